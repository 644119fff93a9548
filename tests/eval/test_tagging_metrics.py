"""Character-level recall/precision: whitespace ignored, label-agnostic headline, per-label."""

import json
import math

import pytest

from tokendp.text.tab import load_tab, split_ids
from tokendp.eval.tagging import char_scores
from tokendp.errors import InvalidInputError
from tokendp.text.spans import Span

TEXT = "Anna Berg met Carl in Oslo"  # Anna Berg 0-9, Carl 14-18, Oslo 22-26


def test_whitespace_is_not_counted_and_labels_do_not_matter_for_the_headline():
    gold = {"d": [Span(0, 9, "PERSON"), Span(22, 26, "LOC")]}
    pred = {"d": [Span(0, 4, "ORG"), Span(4, 18, "PERSON")]}  # covers Anna Berg (as ORG+PERSON) and Carl
    scores = char_scores({"d": TEXT}, gold, pred)
    assert scores.gold_chars == 12  # "AnnaBerg" + "Oslo"
    assert scores.predicted_chars == 4 + 4 + 3 + 4  # Anna, Berg, met, Carl
    assert scores.recall == pytest.approx(8 / 12)
    assert scores.precision == pytest.approx(8 / 15)
    assert scores.recall_by_label == {"LOC": 0.0, "PERSON": 1.0}
    assert scores.precision_by_label == {"ORG": 1.0, "PERSON": pytest.approx(4 / 11)}


def test_overlapping_predictions_count_once_and_empty_prediction_gives_nan_precision():
    gold = {"d": [Span(0, 4, "PERSON")]}
    both = char_scores({"d": TEXT}, gold, {"d": [Span(0, 4, "PERSON"), Span(0, 4, "ORG")]})
    assert (both.recall, both.precision, both.predicted_chars) == (1.0, 1.0, 4)
    assert math.isnan(char_scores({"d": TEXT}, gold, {}).precision)


def test_split_convention(tmp_path):
    ids = ["b", "a", "d", "c", "e"]
    assert split_ids(ids, "tune") == ["a", "c", "e"]
    assert split_ids(ids, "report") == ["b", "d"]
    with pytest.raises(InvalidInputError):
        split_ids(ids, "test")
    (tmp_path / "texts.json").write_text(json.dumps({i: TEXT for i in ids}))
    (tmp_path / "gold_spans.json").write_text(json.dumps({i: [[22, 26, "LOC"]] for i in ids}))
    data = load_tab(tmp_path, "report")
    assert list(data.texts) == ["b", "d"] and data.gold["b"] == [Span(22, 26, "LOC", 1.0, "gold")]


def test_gold_mentions_whole_partial_and_missed_per_label():
    text = "Mr F.A. Lindqvist met Ann in Oslo"  # PERSON 0-17, PERSON 22-25, LOC 29-33
    gold = {"d": [Span(0, 17, "PERSON"), Span(22, 25, "PERSON"), Span(29, 33, "LOC")]}
    pred = {"d": [Span(0, 4, "PERSON"), Span(8, 17, "PERSON"), Span(27, 33, "ORG")]}  # "F.A." left out
    scores = char_scores({"d": text}, gold, pred)
    person, loc = scores.mentions_by_label["PERSON"], scores.mentions_by_label["LOC"]
    assert (person.whole, person.partial, person.missed) == (0, 1, 1)
    assert (loc.whole, loc.partial, loc.missed) == (1, 0, 0)
    assert scores.mentions.total == 3 and scores.mentions.whole_rate == pytest.approx(1 / 3)
    assert scores.to_dict()["mentions"] == {"whole": 1, "partial": 1, "missed": 1, "whole_rate": pytest.approx(1 / 3)}


def test_a_mention_is_whole_when_only_whitespace_is_left_out():
    text = "Anna  Berg"
    scores = char_scores({"d": text}, {"d": [Span(0, 10, "PERSON")]}, {"d": [Span(0, 4, "X"), Span(6, 10, "Y")]})
    assert scores.mentions_by_label["PERSON"].whole == 1
