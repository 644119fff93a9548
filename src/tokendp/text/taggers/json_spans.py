"""Spans from JSON: a Presidio-style list of ``{start, end, label[, score][, source]}``.

Also accepted: ``entity_type`` instead of ``label`` (Presidio's RecognizerResult) and
``[start, end, label]`` triples (TAB's files). tokendp's own labels (TAB's eight and DATE,
DURATION, OCCUPATION) are kept; other known Presidio, spaCy and Stanza labels are mapped to
TAB's; other labels are kept as given (they become their own privacy group).
Errors name the span's index and the problem, never the document's text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from tokendp.errors import InvalidInputError
from tokendp.text.spans import Span
from tokendp.text.taggers.labels import LABELS, to_tab


def _load(path_or_obj):
    if isinstance(path_or_obj, (str, Path)):
        path = Path(path_or_obj)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InvalidInputError(f"span file not found: {path}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise InvalidInputError(f"span file {path} is not valid UTF-8 JSON "
                                    f"({type(err).__name__} at position {getattr(err, 'pos', '?')})") from None
    return path_or_obj


def _label(raw) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError("label must be a non-empty string")
    if raw.strip().upper() in LABELS:  # tokendp's own labels stay as they are (DATE is not spaCy's here)
        return raw.strip().upper()
    try:
        return to_tab(raw)
    except InvalidInputError:
        return raw


def _one(item) -> Span:
    if isinstance(item, Mapping):
        start, end = item.get("start"), item.get("end")
        label = item.get("label", item.get("entity_type"))
        score, source = item.get("score", 1.0), item.get("source", "json")
    elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) in (3, 4):
        start, end, label = item[:3]
        score, source = (item[3] if len(item) == 4 else 1.0), "json"
    else:
        raise ValueError("expected an object {start, end, label} or a list [start, end, label]")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
        raise ValueError("start and end must be integers")
    if not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
        raise ValueError("score must be a number in [0, 1]")
    return Span(start, end, _label(label), float(score), str(source))


def spans_from_json(path_or_obj, text: str | None = None) -> list[Span]:
    """Parse spans from a JSON file path or an already-loaded list; check them against ``text``.

    Raises :class:`InvalidInputError` if the JSON is not a list, a span is malformed, or (when
    ``text`` is given) a span does not satisfy ``0 <= start < end <= len(text)``.
    """
    data = _load(path_or_obj)
    if not isinstance(data, list):
        raise InvalidInputError("spans JSON must be a list of {start, end, label[, score]} objects")
    spans = []
    for i, item in enumerate(data):
        try:
            span = _one(item)
        except (ValueError, TypeError) as err:
            raise InvalidInputError(f"span #{i} is malformed: {err}") from None
        if text is not None and span.end > len(text):
            raise InvalidInputError(f"span #{i} ends at {span.end}, past the end of the text "
                                    f"({len(text)} characters); are the offsets for this document?")
        spans.append(span)
    return sorted(spans, key=lambda s: (s.start, s.end))
