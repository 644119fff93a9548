"""The rewriter benchmark's metrics (issue 13): kept, types, leaks and the n-gram judge."""

from __future__ import annotations

from collections import Counter

from repo_scripts import load_script
from tokendp.text.spans import Span


def _bench():
    return load_script("benchmarks/rewriter.py")


TEXT = "Mr Durdu was arrested in Ankara on 3 May 1999. The Court of Cassation upheld it."
SPANS = [Span(0, 8, "PERSON"), Span(25, 31, "LOC"), Span(35, 45, "DATETIME"), Span(51, 69, "ORG")]


def test_kept_counts_only_the_text_outside_spans_in_order():
    b = _bench()
    assert b.kept(TEXT, SPANS, TEXT) == 1.0
    rewrite = "Mr Smith was arrested in Lyon on 1 June 2001. The Regional Court upheld it."
    assert 0.9 < b.kept(TEXT, SPANS, rewrite) <= 1.0
    assert b.kept(TEXT, SPANS, "") == 0.0
    assert b.kept(TEXT, SPANS, "upheld it. was arrested in") < 0.5


def test_leaks_are_span_strings_not_in_the_public_text():
    b = _bench()
    assert b.leaks(TEXT, SPANS, "Mr Smith was arrested in Ankara.") == ["Ankara"]
    assert b.leaks(TEXT, SPANS, "May") == []  # 3 characters or fewer never count
    text = "The Court met. The Court of Cassation ruled."
    assert b.leaks(text, [Span(15, 37, "ORG")], "The Court met.") == []  # in the public text too


def test_types_caps_each_label_at_its_gold_count():
    b = _bench()
    gold = Counter({"PERSON": 2, "DATETIME": 2})
    assert b.types_score(Counter({"PERSON": 5, "LOC": 3}), gold) == 0.5
    assert b.types_score(Counter({"PERSON": 1, "DATETIME": 2}), gold) == 0.75


def test_char_ngram_judge_prefers_fluent_text():
    b = _bench()
    corpus = " ".join(["The applicant was arrested in the city and the court upheld the decision."] * 20
                      + ["On the same day the prosecutor appealed against the judgment of the court."] * 20)
    judge = b.CharNgramJudge(corpus, order=5)
    fluent = "The court upheld the decision of the prosecutor."
    scrambled = "prosecutor the decision court of upheld The the."
    assert judge.perplexity(fluent) < judge.perplexity(scrambled)
    assert judge.perplexity(fluent) > 1.0


def test_slot_fillers_are_what_the_rewrite_puts_between_the_kept_text():
    b = _bench()
    rewrite = "Mr Smith was arrested in Lyon on 1 June 2001. The Regional Court upheld it."
    fillers = [rewrite[a:e] for a, e in b.slot_fillers(TEXT, SPANS, rewrite)]
    assert fillers == ["Mr Smith", "Lyon", "1 June 2001", "Regional Court"]
    # spans given out of order get their own fillers, in the order given
    assert [rewrite[a:e] for a, e in b.slot_fillers(TEXT, SPANS[::-1], rewrite)] == fillers[::-1]
    # a dropped slot has an empty filler; a slot character in the rewrite never aligns
    dropped = "Mr Durdu was arrested in on 3 May 1999. The \x00 upheld it."
    a, e = b.slot_fillers(TEXT, SPANS[1:2], dropped)[0]
    assert dropped[a:e].strip() == ""


def test_slot_fillers_share_one_slot_for_overlapping_spans():
    b = _bench()
    text = "He met John Smith in Paris."
    spans = [Span(7, 17, "PERSON"), Span(12, 17, "PERSON"), Span(21, 26, "LOC")]
    rewrite = "He met Ann Lee in Rome."
    assert [rewrite[a:e] for a, e in b.slot_fillers(text, spans, rewrite)] == ["Ann Lee", "Ann Lee", "Rome"]


def test_filler_label_is_the_tab_label_covering_most_of_the_filler():
    b = _bench()
    tags = [Span(0, 8, "PERSON"), Span(33, 44, "DATE"), Span(46, 50, "OCCUPATION")]
    assert b.filler_labels(tags, 0, 8) == {"PERSON"}
    assert b.filler_labels(tags, 33, 44) == {"DATETIME"}  # the tagger's DATE is TAB's DATETIME
    assert b.filler_labels(tags, 46, 60) == {"DEM"}
    assert b.filler_labels(tags, 10, 20) == set()  # nothing tagged: no label
    assert b.filler_labels([Span(0, 3, "PERSON"), Span(4, 12, "LOC")], 0, 12) == {"LOC"}  # most characters


def test_slot_label_hits_catch_a_filler_of_the_wrong_kind():
    b = _bench()
    rewrite = "Mr Smith was arrested in Dr Kovacs on 1 June 2001. The Regional Court upheld it."
    tags = [Span(0, 8, "PERSON"), Span(25, 34, "PERSON"), Span(38, 49, "DATE"), Span(55, 69, "ORG")]
    assert b.slot_label_hits(TEXT, SPANS, rewrite, tags) == [True, False, True, True]
    assert b.slot_label_hits(TEXT, SPANS, "", []) == [False] * 4


def test_types_compare_at_tab_level():
    b = _bench()
    found = b.type_counts([[Span(0, 3, "DATE"), Span(5, 9, "DURATION")], [Span(0, 4, "OCCUPATION")]])
    assert found == Counter({"DATETIME": 2, "DEM": 1})
    assert b.types_score(found, Counter({"DATETIME": 2, "DEM": 1})) == 1.0


def test_temperatures_default_to_the_library_default_and_refuse_bad_values():
    import inspect

    import pytest

    import tokendp

    b = _bench()
    assert b.parse_temperatures(None) == [inspect.signature(tokendp.sanitize).parameters["temperature"].default]
    assert b.parse_temperatures("0.5,0.7, 1.0") == [0.5, 0.7, 1.0]
    for bad in ("", "0", "-1", "x", "nan"):
        with pytest.raises(SystemExit):
            b.parse_temperatures(bad)


def test_distinct_fillers_count_pairs_of_different_entities_filled_alike():
    b = _bench()
    text = "Mr Durdu met Mr Kaya and Mr Durdu again in Ankara."
    spans = [Span(0, 8, "PERSON"), Span(13, 20, "PERSON"), Span(25, 33, "PERSON"), Span(43, 49, "LOC")]
    # pairs: (Durdu, Kaya) twice; the two "Mr Durdu" are the same text, LOC has no partner
    assert b.distinct_filler_pairs(text, spans, "Mr Lee met Mr Roy and Mr Lee again in Lyon.") == (2, 2)
    assert b.distinct_filler_pairs(text, spans, "Mr Lee met Mr Lee and Mr Lee again in Lyon.") == (0, 2)
    assert b.distinct_filler_pairs(text, spans, "Mr Lee met Mr Roy and Mr Roy again in Lyon.") == (1, 2)


def test_held_out_synthetic_documents_are_fixed_and_never_training_templates():
    """Issue 37's held-out documents: the same for a seed, spans on their values, three kinds in
    turn, each ending on its closing, and none of their sentences in the training templates."""
    import pytest

    pytest.importorskip("faker")
    from tokendp.models.training import synthetic

    b = _bench()
    docs = b.held_out_documents(6)
    assert docs == b.held_out_documents(6)
    assert [d[0].split(" (")[1] for d in docs[:3]] == ["HR e-mail)", "clinic letter)", "police report)"]
    training = {t for pool in synthetic._TEMPLATES.values() for t in pool}
    training |= {t for parts in synthetic._CORRESPONDENCE.values() for pool in parts for t in pool}
    for openings, body, closings in b._HELD_OUT.values():
        assert not training & {*openings, *body, *closings}
    for _, text, spans in docs:
        assert 250 <= len(text) <= 1100 and text.count("\n\n") >= 3 and spans
        assert all(0 <= s.start < s.end <= len(text) and text[s.start:s.end].strip() for s in spans)
        assert spans[-1].start > text.rindex("\n\n")  # the closing is signed


def test_scores_report_the_share_of_rewrites_ending_on_the_end_of_turn():
    b = _bench()
    judge = b.CharNgramJudge("the court dismissed the appeal of the applicant " * 20)
    m = b.score([TEXT, TEXT], [SPANS, SPANS], [TEXT, TEXT], [[], []], judge, [1.0, 1.0], Counter(),
                ["eos", "stop_string"])
    assert m["endings"] == 0.5 and m["stop_reasons"] == {"eos": 1, "stop_string": 1}
