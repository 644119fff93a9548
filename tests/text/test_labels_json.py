"""Label mapping and spans from JSON (validation without echoing text)."""

import json

import pytest

from tokendp.errors import InvalidInputError
from tokendp.text.spans import Span
from tokendp.text.taggers import TAB_LABELS, spans_from_json, to_presidio, to_tab
from tokendp.text.taggers.labels import PRESIDIO_TO_TAB, SPACY_TO_TAB, STANZA_TO_TAB


@pytest.mark.parametrize("label,tab", [
    ("PERSON", "PERSON"), ("LOCATION", "LOC"), ("DATE_TIME", "DATETIME"), ("ORGANIZATION", "ORG"),
    ("NRP", "DEM"), ("EMAIL_ADDRESS", "CODE"), ("PHONE_NUMBER", "CODE"), ("IBAN_CODE", "CODE"),
    ("CREDIT_CARD", "CODE"), ("GPE", "LOC"), ("NORP", "DEM"), ("DATE", "DATETIME"), ("MONEY", "QUANTITY"),
    ("CARDINAL", "QUANTITY"), ("LAW", "MISC"), ("FAC", "LOC"), ("B-PER", "PERSON"), ("i-org", "ORG"),
    ("datetime", "DATETIME"),
])
def test_to_tab(label, tab):
    assert to_tab(label) == tab


def test_every_mapping_lands_in_tab_and_round_trips_through_presidio():
    for table in (PRESIDIO_TO_TAB, SPACY_TO_TAB, STANZA_TO_TAB):
        assert set(table.values()) <= set(TAB_LABELS)
    for label in TAB_LABELS:
        assert to_tab(to_presidio(label)) == label
    assert to_presidio("LOC") == "LOCATION" and to_presidio("DATETIME") == "DATE_TIME"


def test_unknown_label_is_an_error():
    with pytest.raises(InvalidInputError, match="WIDGET"):
        to_tab("WIDGET")


def test_unknown_label_falls_back_only_when_asked():
    assert to_tab("WIDGET", unknown="MISC") == "MISC"
    assert to_tab("b-per", unknown="MISC") == "PERSON"  # known labels ignore the fallback


def test_spans_from_presidio_style_objects_and_triples(tmp_path):
    text = "Jane Doe lives in Paris since 2001."
    data = [{"start": 18, "end": 23, "entity_type": "LOCATION", "score": 0.85},
            {"start": 0, "end": 8, "label": "PERSON"}, [29, 33, "DATE"], [0, 4, "MYGROUP"]]
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(data))
    spans = spans_from_json(path, text)
    assert spans == spans_from_json(data, text)
    assert [(s.start, s.end, s.label) for s in spans] == [
        (0, 4, "MYGROUP"), (0, 8, "PERSON"), (18, 23, "LOC"), (29, 33, "DATE")]  # DATE: tokendp's own label
    assert spans[2].score == 0.85


@pytest.mark.parametrize("data,problem", [
    ({"start": 0}, "must be a list"),
    ([{"start": 0, "end": 4}], "label"),
    ([{"start": 5, "end": 2, "label": "PERSON"}], "start < end"),
    ([{"start": "0", "end": 4, "label": "PERSON"}], "integers"),
    ([{"start": 0, "end": 4, "label": "PERSON", "score": 3}], "score"),
    ([{"start": 0, "end": 99, "label": "PERSON"}], "past the end"),
])
def test_bad_spans_are_rejected_without_text(data, problem):
    text = "SECRET NAME"
    with pytest.raises(InvalidInputError, match=problem) as info:
        spans_from_json(data, text)
    assert "SECRET" not in str(info.value)


def test_bad_json_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_bytes(b"\xff\xfe[")
    with pytest.raises(InvalidInputError, match="not valid UTF-8 JSON"):
        spans_from_json(path)
    with pytest.raises(InvalidInputError, match="not found"):
        spans_from_json(tmp_path / "missing.json")


def test_span_type_still_validates():
    with pytest.raises(ValueError):
        Span(3, 3, "PERSON")
