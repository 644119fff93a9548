"""DATE vs DURATION and OCCUPATION vs DEM by form; choosing the private labels."""

from __future__ import annotations

import pytest

from tokendp.errors import InvalidParameterError
from tokendp.text.spans import Span
from tokendp.text.taggers import get_tagger, spans_from_json, to_tab
from tokendp.text.taggers.labels import CHOOSABLE, LabelChoice, covers
from tokendp.text.taggers.subtypes import datetime_kind, dem_kind, refine_labels


@pytest.mark.parametrize("text", ["six weeks", "two years and six months", "three-month", "18 months",
                                  "more than four years", "the next three months", "two to four years",
                                  "six months’ imprisonment", "fifteen years'", "Over 160 hours",
                                  "9 years 9 months", "six working days"])
def test_lengths_of_time_are_durations(text):
    assert datetime_kind(text) == "DURATION"


@pytest.mark.parametrize("text", ["30 May 1996", "1996", "May", "10.30 a.m.", "following day", "three days later",
                                  "two years ago", "two years of age", "eight years old", "month of Ramadan",
                                  "1990-1995", "several weeks later"])
def test_points_in_time_and_ages_are_dates(text):
    assert datetime_kind(text) == "DATE"


@pytest.mark.parametrize("text", ["teacher", "bus driver", "police officers", "Secretary of State",
                                  "Trustee in Bankruptcy", "consultant microbiologist", "Deputy Mayor",
                                  "President of the Court", "journalist", "Lord Chief Justice"])
def test_jobs_are_occupations(text):
    assert dem_kind(text) == "OCCUPATION"


@pytest.mark.parametrize("text", ["British", "Turkish national", "mental disorder", "sister", "owner", "white",
                                  "aged 45", "eight years old", "no children", "Catholic"])
def test_other_traits_stay_dem(text):
    assert dem_kind(text) == "DEM"


def test_refinement_changes_labels_only():
    text = "A teacher, British, was held for six weeks from 3 May 2001."
    spans = [Span(2, 9, "DEM"), Span(11, 18, "DEM", 0.7, "model"), Span(33, 42, "DATETIME"),
             Span(48, 58, "DATETIME"), Span(0, 1, "PERSON")]
    out = refine_labels(spans, text)
    assert [s.label for s in out] == ["OCCUPATION", "DEM", "DURATION", "DATE", "PERSON"]
    assert [(s.start, s.end, s.score, s.source) for s in out] == [(s.start, s.end, s.score, s.source) for s in spans]
    assert [to_tab(s.label) for s in out] == ["DEM", "DEM", "DATETIME", "DATETIME", "PERSON"]


def test_the_built_in_taggers_split_the_letter():
    text = "He works as a bus driver. Please review him in clinic in six weeks, on 2 June 2024."
    for name in ("auto", "patterns"):
        labels = {text[s.start:s.end]: s.label for s in get_tagger(name).tag(text)}
        assert labels["six weeks"] == "DURATION" and labels["2 June 2024"] == "DATE"
    assert {text[s.start:s.end]: s.label for s in get_tagger("auto").tag(text)}["bus driver"] == "OCCUPATION"


def test_json_spans_keep_the_finer_labels():
    spans = spans_from_json([[0, 2, "DATE"], [3, 5, "duration"], [6, 8, "OCCUPATION"], [9, 11, "DATE_TIME"]])
    assert [s.label for s in spans] == ["DATE", "DURATION", "OCCUPATION", "DATETIME"]


def test_a_label_choice_protects_by_default_and_keeps_only_what_is_named():
    """LabelChoice (docs/privacy.md, "Choosing labels"): a parent covers its finer labels but a
    finer name never covers the parent's spans; with labels=, every label present must be named
    in labels or keep, and each protected name must match a span of the whole input."""
    assert covers("DATETIME", "DATE") and covers("DATETIME", "DURATION") and covers("DEM", "OCCUPATION")
    assert not covers("DATE", "DATETIME") and not covers("OCCUPATION", "DEM") and covers("WARD", "WARD")
    default = LabelChoice.of()
    assert default.protect is None and all(default.is_private(x) for x in ("PERSON", "DURATION", "WARD"))
    kept = LabelChoice.of(keep="duration, loc")
    assert not kept.is_private("DURATION") and not kept.is_private("LOC") and kept.is_private("DATE")
    assert kept.kept(["DURATION", "PERSON", "LOC", "DURATION"]) == {"DURATION": 2, "LOC": 1}
    assert not LabelChoice.of(keep="DATETIME").is_private("DATE")  # the parent keeps its finer labels
    strict = LabelChoice.of("PERSON,DATE", keep="LOC")
    strict.check(["PERSON", "DATE", "LOC"])
    with pytest.raises(InvalidParameterError, match=r"DATETIME \(2 spans\) are neither"):
        strict.check(["PERSON", "DATETIME", "DATETIME", "LOC"])
    with pytest.raises(InvalidParameterError, match="DATE, which matches no span"):
        strict.check(["PERSON", "LOC"])
    strict.check(["PERSON", "LOC"], whole_input=False)  # part of a corpus: no typo check
    for labels, keep, what in (("PERSN", None, "unknown label"), ("", None, "no label"), ([1], None, "label names"),
                               ("PERSON", "person", "both protected")):
        with pytest.raises(InvalidParameterError, match=what):
            LabelChoice.of(labels, keep).check_names([])
    LabelChoice.of("WARD").check_names(["WARD"])  # a label of the user's own spans
    assert set(CHOOSABLE) >= {"DATE", "DURATION", "OCCUPATION", "DATETIME"}
