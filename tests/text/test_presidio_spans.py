"""Presidio's results read as spans (tokendp.text.presidio_spans), duck-typed: the contract the jobs
rely on without importing Presidio (tests/integrations/test_presidio.py runs the real package)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.fusion import spans_of
from tokendp.text.presidio_spans import is_recognizer_result, presidio_spans
from tokendp.text.spans import Span

TEXT = "Mr Tomas Lindqvist, tomas@example.com, 2 June 2024."


def result(entity_type, start, end, score=0.85):
    return SimpleNamespace(entity_type=entity_type, start=start, end=end, score=score)


def test_what_counts_as_a_presidio_result():
    assert is_recognizer_result(result("PERSON", 3, 18))
    assert is_recognizer_result({"entity_type": "PERSON", "start": 3, "end": 18})  # to_dict(), the REST answer
    assert not is_recognizer_result({"label": "PERSON", "start": 3, "end": 18, "entity_type": "PERSON"})
    assert not is_recognizer_result(Span(3, 18, "PERSON"))
    assert not is_recognizer_result("PERSON")


def test_labels_map_as_span_files_do_and_the_override_comes_first():
    found = presidio_spans([result("PERSON", 3, 18), result("EMAIL_ADDRESS", 20, 37, 1.0),
                            result("DATE_TIME", 39, 50), result("PATIENT_ID", 0, 2)], TEXT)
    assert [(s.start, s.label, s.source) for s in found] == [
        (0, "PATIENT_ID", "presidio:PATIENT_ID"), (3, "PERSON", "presidio:PERSON"),
        (20, "CODE", "presidio:EMAIL_ADDRESS"), (39, "DATETIME", "presidio:DATE_TIME")]
    assert found[1].score == 0.85
    assert [s.label for s in presidio_spans([result("PATIENT_ID", 0, 2)], labels={"patient_id": "CODE"})] == ["CODE"]
    assert presidio_spans([{"entity_type": "PERSON", "start": 3, "end": 18}])[0].score == 1.0


def test_the_jobs_read_a_list_of_results_as_spans():
    body, spans = spans_of("\ufeff" + TEXT, [result("PERSON", 4, 19)], None)  # offsets into the text as given
    assert body == TEXT and [(s.start, s.end, s.label) for s in spans] == [(3, 18, "PERSON")]


@pytest.mark.parametrize("results,words", [
    ([result("PERSON", 3, 90)], "span #0 ends at 90, past the end of the text"),
    ([result("PERSON", 3, 18), "Tomas"], "span #1 is not a Presidio RecognizerResult"),
    ([result("", 3, 18)], "span #0 is malformed: entity_type"),
    ([result("PERSON", 3.0, 18)], "span #0 is malformed: start and end must be integers"),
    ([result("PERSON", 3, 18, score=7)], "span #0 is malformed: score"),
])
def test_malformed_results_are_refused_by_index_without_text(results, words):
    with pytest.raises(InvalidInputError) as info:
        presidio_spans(results, TEXT)
    assert words in str(info.value) and "Tomas" not in str(info.value)


def test_a_bad_mapping_is_a_parameter_error():
    with pytest.raises(InvalidParameterError, match="labels maps Presidio entity types"):
        presidio_spans([], labels={"PERSON": 3})
