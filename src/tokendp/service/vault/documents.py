"""The owner's documents, checked before anything is stored (docs/vault.md, "Documents").

A document is its text, exactly as given (spans index it: a BOM and CRLF line ends count,
:mod:`tokendp.text.layout`), a public title, its spans with optional subjects and a default
subject. Everything is checked here, and a document that fails any check stores nothing: the
text must be valid UTF-8 and not blank; every span must lie within the text, with start < end,
and carry one of tokendp's labels; spans are mapped onto the text the model reads and checked
there as every sanitize request's are. Subject ids are stored in their canonical form
(:func:`~tokendp.service.vault.units.canonical_subject`: one person, one id). Messages name
offsets, labels and fields, never the text, the title or a subject.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tokendp.errors import InvalidInputError
from tokendp.service.vault.units import canonical_subject
from tokendp.text.contexts import validate_spans
from tokendp.text.layout import BOM, clean
from tokendp.text.spans import Span
from tokendp.text.taggers.labels import CHOOSABLE


def check_document(id: str, title: str, text: str, spans: Sequence[Mapping[str, Any]],
                   subject: str | None) -> dict[str, Any]:
    """The document as stored: ``{id, title, text, spans: [{start, end, label, subject?}], subject}``."""
    for what, value in (("id", id), ("title", title), ("text", text), ("subject", subject)):
        if value is not None and not _is_utf8(value):
            raise InvalidInputError(f"the document's {what} is not valid UTF-8 (it holds a lone surrogate)")
    if "/" in id or any(ord(c) < 32 for c in id):
        raise InvalidInputError("a document id may not hold '/' or control characters (it is part of the URL)")
    if not text.lstrip(BOM).strip():
        raise InvalidInputError("the document's text is empty")
    if subject is not None:
        subject = _canonical(subject, "the document's subject")
    stored, parsed = [], []
    for i, span in enumerate(spans):
        start, end, label = span["start"], span["end"], span["label"]
        if label not in CHOOSABLE:
            raise InvalidInputError(f"span {i} has the label {label!r}, which is not one of tokendp's labels: "
                                    f"{', '.join(CHOOSABLE)}")
        if not 0 <= start < end <= len(text):
            raise InvalidInputError(f"span {i} ({label}) is [{start}, {end}): spans need 0 <= start < end <= "
                                    f"{len(text)}, the text's length in characters as given")
        own = span.get("subject")
        if own is not None:
            if not _is_utf8(own):
                raise InvalidInputError(f"span {i}'s subject is not valid UTF-8")
            own = _canonical(own, f"span {i}'s subject")
        parsed.append(Span(start, end, label))
        stored.append({"start": start, "end": end, "label": label, **({"subject": own} if own is not None else {})})
    body, layout = clean(text)
    validate_spans(body, layout.to_clean(parsed))
    return {"id": id, "title": title, "text": text, "spans": stored, "subject": subject}


def _canonical(subject: str, what: str) -> str:
    try:
        return canonical_subject(subject)
    except InvalidInputError as err:
        raise InvalidInputError(f"{what}: {err}") from None


def _is_utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
