"""Label mapping between tagger schemes and TAB's eight categories.

TAB (Pilán et al., 2022) annotates PERSON, CODE, LOC, ORG, DEM (demographic attributes:
nationality, profession, age, health...), DATETIME, QUANTITY and MISC. Presidio, spaCy
(OntoNotes) and Stanza use their own names; :func:`to_tab` maps any of them to TAB's (and
tokendp's finer DATE, DURATION and OCCUPATION to DATETIME and DEM), :func:`to_presidio` maps
TAB's back to Presidio's entity names.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.taggers.subtypes import PARENT

TAB_LABELS: tuple[str, ...] = ("PERSON", "CODE", "LOC", "ORG", "DEM", "DATETIME", "QUANTITY", "MISC")
#: The labels of tokendp's built-in taggers: TAB's, with DATETIME split into DATE and DURATION and
#: occupations apart from the other DEM (:mod:`tokendp.text.taggers.subtypes`).
LABELS: tuple[str, ...] = ("PERSON", "CODE", "LOC", "ORG", "DEM", "OCCUPATION", "DATE", "DURATION", "QUANTITY",
                           "MISC")

PRESIDIO_TO_TAB: dict[str, str] = {
    "PERSON": "PERSON",
    "LOCATION": "LOC",
    "DATE_TIME": "DATETIME",
    "ORGANIZATION": "ORG",
    "NRP": "DEM",
    "AGE": "DEM",
    "EMAIL_ADDRESS": "CODE",
    "PHONE_NUMBER": "CODE",
    "IBAN_CODE": "CODE",
    "CREDIT_CARD": "CODE",
    "CRYPTO": "CODE",
    "IP_ADDRESS": "CODE",
    "URL": "CODE",
    "MEDICAL_LICENSE": "CODE",
    "US_SSN": "CODE",
    "US_ITIN": "CODE",
    "US_PASSPORT": "CODE",
    "US_DRIVER_LICENSE": "CODE",
    "US_BANK_NUMBER": "CODE",
    "UK_NHS": "CODE",
    "UK_NINO": "CODE",
    "ID": "CODE",
}

SPACY_TO_TAB: dict[str, str] = {
    "PERSON": "PERSON",
    "PER": "PERSON",
    "NORP": "DEM",
    "LANGUAGE": "DEM",
    "FAC": "LOC",
    "GPE": "LOC",
    "LOC": "LOC",
    "ORG": "ORG",
    "DATE": "DATETIME",
    "TIME": "DATETIME",
    "MONEY": "QUANTITY",
    "PERCENT": "QUANTITY",
    "QUANTITY": "QUANTITY",
    "CARDINAL": "QUANTITY",
    "ORDINAL": "QUANTITY",
    "LAW": "MISC",
    "EVENT": "MISC",
    "PRODUCT": "MISC",
    "WORK_OF_ART": "MISC",
    "MISC": "MISC",
}

STANZA_TO_TAB: dict[str, str] = {
    "PERSON": "PERSON",
    "ORGANIZATION": "ORG",
    "LOCATION": "LOC",
    "DATE": "DATETIME",
    "TIME": "DATETIME",
    "MONEY": "QUANTITY",
    "PERCENT": "QUANTITY",
}

TAB_TO_PRESIDIO: dict[str, str] = {
    "PERSON": "PERSON",
    "LOC": "LOCATION",
    "DATETIME": "DATE_TIME",
    "ORG": "ORGANIZATION",
    "DEM": "NRP",
    "CODE": "ID",
    "QUANTITY": "QUANTITY",
    "MISC": "MISC",
}

_ANY_TO_TAB: dict[str, str] = {**STANZA_TO_TAB, **SPACY_TO_TAB, **PRESIDIO_TO_TAB, **PARENT,
                               **{label: label for label in TAB_LABELS}}


def to_tab(label: str, *, unknown: str | None = None) -> str:
    """Map a TAB, Presidio, spaCy or Stanza label (any case, optional ``B-``/``I-``) to TAB's.

    An unknown label gives ``unknown`` when one is passed (taggers map labels outside TAB's
    scheme to a catch-all), else raises :class:`InvalidInputError` naming the label.
    """
    key = label.upper()
    if len(key) > 2 and key[1] == "-" and key[0] in "BIES":
        key = key[2:]
    try:
        return _ANY_TO_TAB[key]
    except KeyError:
        if unknown is not None:
            return unknown
        raise InvalidInputError(
            f"unknown entity label {label!r}; use one of TAB's {', '.join(TAB_LABELS)} "
            "or a Presidio, spaCy or Stanza label") from None


def to_presidio(label: str) -> str:
    """Map a TAB label to Presidio's entity name (CODE becomes the generic ``ID``)."""
    return TAB_TO_PRESIDIO[to_tab(label)]


# ---------------------------------------------------------------------------- choosing private labels
#: Labels a user may name as private: the built-in taggers' and TAB's (DATETIME, the parent of
#: DATE and DURATION).
CHOOSABLE: tuple[str, ...] = (*LABELS, "DATETIME")


def choose_labels(labels: str | Sequence[str] | None) -> frozenset[str] | None:
    """The private labels a user names (``"PERSON,CODE"`` or a list; any case), or None for all.

    A parent names its finer labels too (DATETIME: DATE and DURATION; DEM: OCCUPATION). Raises
    :class:`InvalidParameterError` for a name outside :data:`CHOOSABLE` or an empty choice: a
    misspelt name must not leave the spans it meant to protect in the clear.
    """
    if labels is None:
        return None
    names = labels.split(",") if isinstance(labels, str) else list(labels)
    if not all(isinstance(n, str) for n in names):
        raise InvalidParameterError(f"labels must be label names, e.g. ['PERSON', 'CODE']; got {labels!r}")
    chosen = {n.strip().upper() for n in names if n.strip()}
    if not chosen:
        raise InvalidParameterError("labels names no label; name the private ones (e.g. PERSON,CODE) "
                                    "or leave it out to protect every label")
    unknown = sorted(chosen - set(CHOOSABLE))
    if unknown:
        raise InvalidParameterError(f"unknown label(s) {', '.join(unknown)} in labels; choose from "
                                    f"{', '.join(CHOOSABLE)}")
    return frozenset(chosen | {child for child, parent in PARENT.items() if parent in chosen})


def is_private(label: str, chosen: frozenset[str] | None) -> bool:
    """Whether a span labelled ``label`` stays private under the choice ``chosen``
    (:func:`choose_labels`): every label when None; else a chosen label, or any label outside
    :data:`CHOOSABLE` (a user's own label from spans they give, which cannot be kept public)."""
    return chosen is None or label in chosen or label not in CHOOSABLE
