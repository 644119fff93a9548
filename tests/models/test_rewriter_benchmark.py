"""The rewriter benchmark's metrics (issue 13): kept, types, leaks and the n-gram judge."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

from tokendp.text.spans import Span

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "rewriter.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_rewriter", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_rewriter"] = module
    spec.loader.exec_module(module)
    return module


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
