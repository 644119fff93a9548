"""Overlap resolution: same-label merge, then score > length > source priority; trimmed losers."""

from tokendp.text.spans import Span
from tokendp.text.taggers import merge_same_label, resolve_overlaps

TEXT = "Mr John Smith of Acme Ltd met on 30 May 1996 in London."


def test_same_label_overlaps_merge_into_their_union():
    merged = merge_same_label([Span(0, 7, "PERSON", 0.6, "a"), Span(3, 13, "PERSON", 0.9, "b")])
    assert merged == [Span(0, 13, "PERSON", 0.9, "b")]


def test_touching_same_label_spans_merge_but_distant_ones_do_not():
    merged = merge_same_label([Span(0, 2, "ORG"), Span(2, 4, "ORG"), Span(6, 8, "ORG")])
    assert [(s.start, s.end) for s in merged] == [(0, 4), (6, 8)]


def test_higher_score_wins_and_loser_keeps_its_free_part():
    spans = [Span(17, 25, "ORG", 0.9, "model"), Span(0, 25, "PERSON", 0.5, "model")]
    out = resolve_overlaps(spans, TEXT)
    assert Span(17, 25, "ORG", 0.9, "model") in out
    assert Span(0, 16, "PERSON", 0.5, "model") in out  # trailing space trimmed
    assert all(a.end <= b.start for a, b in zip(out, out[1:]))


def test_longer_span_wins_on_equal_score():
    out = resolve_overlaps([Span(33, 39, "DATETIME", 0.8), Span(33, 44, "QUANTITY", 0.8)], TEXT)
    assert out == [Span(33, 44, "QUANTITY", 0.8)]


def test_source_priority_breaks_ties():
    spans = [Span(48, 54, "ORG", 0.8, "model"), Span(48, 54, "LOC", 0.8, "patterns")]
    assert resolve_overlaps(spans, TEXT, source_priority=("patterns", "model"))[0].label == "LOC"
    assert resolve_overlaps(spans, TEXT, source_priority=("model", "patterns"))[0].label == "ORG"


def test_pieces_without_letters_or_digits_are_dropped():
    out = resolve_overlaps([Span(3, 13, "PERSON", 0.9), Span(2, 14, "ORG", 0.1)], TEXT)
    assert out == [Span(3, 13, "PERSON", 0.9)]


def test_no_character_is_lost():
    spans = [Span(0, 13, "PERSON", 0.4), Span(8, 25, "ORG", 0.7), Span(20, 44, "DATETIME", 0.9)]
    covered = {i for s in spans for i in range(s.start, s.end) if not TEXT[i].isspace()}
    out = resolve_overlaps(spans, TEXT)
    assert covered == {i for s in out for i in range(s.start, s.end) if not TEXT[i].isspace()}
