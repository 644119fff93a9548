"""Spans from Presidio's analyzer: the ``RecognizerResult`` objects an ``AnalyzerEngine``
returns (``entity_type``, ``start``, ``end``, ``score``), or their ``to_dict()`` form.

Duck-typed: Presidio itself is not imported. Each result becomes a span with its offsets and
score, its source ``presidio:<entity_type>``, and a label from its entity type, read exactly as
a span file's ``entity_type`` is (:func:`tokendp.text.taggers.spans_from_json`), so that the
Python API and ``tokendp sanitize --spans results.json`` give the same spans:

- tokendp's own labels (TAB's eight, DATE, DURATION, OCCUPATION) stay as they are;
- Presidio's entity types map by :data:`~tokendp.text.taggers.labels.PRESIDIO_TO_TAB`
  (PERSON -> PERSON, LOCATION -> LOC, DATE_TIME -> DATETIME, ORGANIZATION -> ORG, NRP and AGE
  -> DEM, e-mail, phone, IBAN, card, crypto, IP, URL, licence and the US/UK identifiers -> CODE);
- any other entity type (a custom recogniser's, a country's identifier) keeps its own name and
  becomes its own privacy group, protected like every other.

``labels`` overrides or extends that mapping (``{"MEDICAL_RECORD": "CODE"}``). Messages name
the result's index, never the text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.spans import Span
from tokendp.text.taggers.json_spans import spans_from_json

_FIELDS = ("entity_type", "start", "end")


def is_recognizer_result(item: object) -> bool:
    """Whether ``item`` is a Presidio result: an object with ``entity_type``, ``start`` and
    ``end`` (a ``RecognizerResult`` of the analyzer or the anonymizer), or a mapping with
    ``entity_type`` and no ``label`` (``RecognizerResult.to_dict()``, Presidio's REST answer)."""
    if isinstance(item, Span):
        return False
    if isinstance(item, Mapping):
        return "entity_type" in item and "label" not in item
    return all(hasattr(item, name) for name in _FIELDS)


def presidio_spans(results: Iterable[object], text: str | None = None, *,
                   labels: Mapping[str, str] | None = None) -> list[Span]:
    """The spans of Presidio ``results`` (see the module docstring), sorted by offset; checked
    against ``text`` when given. ``labels``: entity type -> tokendp label, applied first.

    Raises :class:`InvalidInputError` naming the result's index for a result that is not one
    (or is malformed), :class:`InvalidParameterError` for a bad ``labels`` mapping."""
    mapping = _mapping(labels)
    items = []
    for i, result in enumerate(results):
        if not is_recognizer_result(result):
            raise InvalidInputError(f"span #{i} is not a Presidio RecognizerResult (entity_type, start, end) but "
                                    f"a {type(result).__name__}")
        fields = result if isinstance(result, Mapping) else {name: getattr(result, name, None)
                                                             for name in (*_FIELDS, "score")}
        entity = fields["entity_type"]
        if not isinstance(entity, str) or not entity.strip():
            raise InvalidInputError(f"span #{i} is malformed: entity_type must be a non-empty string")
        score = fields.get("score")
        items.append({"start": fields.get("start"), "end": fields.get("end"),
                      "label": mapping.get(entity.upper(), entity), "score": 1.0 if score is None else score,
                      "source": f"presidio:{entity}"})
    return spans_from_json(items, text)


def _mapping(labels: Mapping[str, str] | None) -> dict[str, str]:
    if labels is None:
        return {}
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                                  for k, v in labels.items()):
        raise InvalidParameterError("labels maps Presidio entity types to tokendp labels, e.g. "
                                    "{'MEDICAL_RECORD': 'CODE'}")
    return {k.upper(): v.strip() for k, v in labels.items()}
