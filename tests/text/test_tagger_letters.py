"""The hand-written held-out letters (benchmarks/tagger_letters/heldout.txt): the auto tagger
covers at least 95% of their gold mentions whole (issue 47's acceptance figure)."""

from pathlib import Path

import pytest

from tokendp.eval.marked import load_marked
from tokendp.eval.tagging import char_scores
from tokendp.text.taggers import TAB_LABELS, get_tagger

LETTERS = Path(__file__).resolve().parents[2] / "benchmarks" / "tagger_letters"


@pytest.mark.parametrize("name", ["tune.txt", "heldout.txt", "german.txt", "french.txt"])
def test_sets_parse_with_tab_labels(name):
    texts, gold = load_marked(LETTERS / name)
    assert texts and all(gold[d] for d in texts)
    assert {s.label for spans in gold.values() for s in spans} <= set(TAB_LABELS)


def test_heldout_mentions_are_covered_whole():
    texts, gold = load_marked(LETTERS / "heldout.txt")
    tagger = get_tagger("auto")
    scores = char_scores(texts, gold, {d: tagger.tag(t) for d, t in texts.items()})
    assert scores.mentions.total >= 190
    assert scores.mentions.whole_rate >= 0.95
