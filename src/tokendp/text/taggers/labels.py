"""Label mapping between tagger schemes and TAB's eight categories.

TAB (Pilán et al., 2022) annotates PERSON, CODE, LOC, ORG, DEM (demographic attributes:
nationality, profession, age, health...), DATETIME, QUANTITY and MISC. Presidio, spaCy
(OntoNotes) and Stanza use their own names; :func:`to_tab` maps any of them to TAB's (and
tokendp's finer DATE, DURATION and OCCUPATION to DATETIME and DEM), :func:`to_presidio` maps
TAB's back to Presidio's entity names.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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


# ---------------------------------------------------------------------------- what a job protects
#: Labels a user may name: the built-in taggers' and TAB's DATETIME, the parent of DATE and
#: DURATION (DEM, the parent of OCCUPATION, is both).
CHOOSABLE: tuple[str, ...] = (*LABELS, "DATETIME")


def covers(name: str, label: str) -> bool:
    """Whether the name ``name`` covers spans labelled ``label``: the same label, or its parent
    (DATETIME covers DATE and DURATION, DEM covers OCCUPATION). A span labelled with the parent
    itself (TAB's DATETIME, which may be a date or a duration) is covered by the parent alone."""
    return label == name or PARENT.get(label) == name


def _names(value: str | Sequence[str] | None, what: str) -> frozenset[str] | None:
    if value is None:
        return None
    names = value.split(",") if isinstance(value, str) else list(value)
    if not all(isinstance(n, str) for n in names):
        raise InvalidParameterError(f"{what} must be label names, e.g. ['PERSON', 'CODE']; got {value!r}")
    return frozenset(n.strip().upper() for n in names if n.strip())


@dataclass(frozen=True)
class LabelChoice:
    """Which spans a job protects and which it releases as plain text (docs/privacy.md,
    "Choosing labels"). Protecting is the default; keeping is explicit.

    ``keep``: the labels released as plain text, read by every row with no guarantee.
    ``protect``: None protects every label not kept. Otherwise the labels to protect, and then
    every label present in the input must be protected or kept (:meth:`check`): a span whose
    label the user named in neither list is refused, never silently released."""

    protect: frozenset[str] | None = None
    keep: frozenset[str] = frozenset()

    @classmethod
    def of(cls, labels: str | Sequence[str] | None = None, keep: str | Sequence[str] | None = None) -> LabelChoice:
        """From the names a user gives (``"PERSON,CODE"`` or a list, any case)."""
        protect, kept = _names(labels, "labels"), _names(keep, "keep") or frozenset()
        if protect is not None and not protect:
            raise InvalidParameterError("labels names no label; name the labels to protect (e.g. PERSON,CODE) "
                                        "or leave it out to protect every label")
        both = sorted((protect or frozenset()) & kept)
        if both:
            raise InvalidParameterError(f"{', '.join(both)} is both protected (labels) and kept (keep); choose one")
        return cls(protect, kept)

    def is_private(self, label: str) -> bool:
        """Whether spans labelled ``label`` are protected (after :meth:`check` has passed)."""
        return not any(covers(k, label) for k in self.keep)

    def check_names(self, known: Iterable[str]) -> None:
        """Refuse a name that can match no span: one outside :data:`CHOOSABLE` and ``known``
        (the labels of spans a user gave), so that a typo fails before anything loads."""
        unknown = sorted(((self.protect or frozenset()) | self.keep) - set(CHOOSABLE) - set(known))
        if unknown:
            raise InvalidParameterError(f"unknown label(s) {', '.join(unknown)}; choose from {', '.join(CHOOSABLE)} "
                                        "or the labels of your spans")

    def check(self, present: Iterable[str], *, whole_input: bool = True) -> None:
        """Refuse an input whose labels (``present``: every span's) this choice leaves open: with
        ``protect``, a label neither protected nor kept; and, when ``present`` is the whole input,
        a protected name that matches no span (a likely typo: DATE where the spans say DATETIME)."""
        if self.protect is None:
            return
        counts = Counter(present)
        named = self.protect | self.keep
        loose = sorted(label for label in counts if not any(covers(n, label) for n in named))
        if loose:
            parts = [f"{label} ({counts[label]} span{'s' if counts[label] != 1 else ''})" for label in loose]
            raise InvalidParameterError(
                f"spans labelled {', '.join(parts)} are neither protected (labels) nor kept (keep): add them to "
                f"labels to protect them, or to keep to release them as plain text. {ALIASES_NOTE}")
        unmatched = sorted(n for n in self.protect if not any(covers(n, label) for label in counts))
        if whole_input and unmatched:
            raise InvalidParameterError(
                f"labels names {', '.join(unmatched)}, which matches no span of the input (a typo?); the spans' "
                f"labels are {', '.join(sorted(counts)) or 'none'}. {ALIASES_NOTE}")

    def kept(self, labels: Iterable[str]) -> dict[str, int]:
        """How many spans of each kept label ``labels`` (every span's) hold, for the report."""
        return dict(sorted(Counter(label for label in labels if not self.is_private(label)).items()))


ALIASES_NOTE = ("DATETIME covers DATE and DURATION, DEM covers OCCUPATION; a span labelled DATETIME is covered "
                "by DATETIME alone.")
