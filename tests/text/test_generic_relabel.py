"""The CRF's generic words are dropped; its ORG spans that read as a name become PERSON."""

import pytest

from tokendp.text.spans import Span
from tokendp.text.taggers.generic import drop_generic, is_generic
from tokendp.text.taggers.relabel import names_as_person


@pytest.mark.parametrize("text,generic", [
    ("Government", True), ("the Government", True), ("(“the Government”)", True), ("Court", True),
    ("the", True), ("Turkish Government", False), ("Court of Appeal", False), ("Board", False),
])
def test_generic_words(text, generic):
    assert is_generic(text) is generic


def test_only_the_crfs_generic_spans_are_dropped():
    text = "the Government and the Court"
    spans = [Span(4, 14, "ORG", 0.5, "model"), Span(23, 28, "ORG", 0.9, "patterns:x")]
    assert drop_generic(spans, text) == [spans[1]]


def _relabel(text, word, source="model"):
    start = text.index(word)
    return names_as_person([Span(start, start + len(word), "ORG", 0.5, source)], text)[0].label


@pytest.mark.parametrize("text,word,label", [
    ("Later that evening Éric Robert telephoned me.", "Éric Robert", "PERSON"),
    ("Patient: Szilveszter Magyar\nAddress:", "Szilveszter Magyar", "PERSON"),
    ("He wrote to Inland Revenue about the revenue.", "Inland Revenue", "ORG"),       # written in lower case too
    ("the High Court’s judgment", "High Court’s", "ORG"),                            # an organisation word
    ("Ospedale Carpiano\n\nPatient:", "Ospedale Carpiano", "ORG"),
    ("Kestrel Mutual Assurance paid", "Kestrel Mutual", "ORG"),                      # the next word is a firm word
    ("84079 Madonna Delle Grazie\n", "Madonna Delle Grazie", "ORG"),                # after a postcode
    ("Later that evening Éric Robert telephoned me.", "Éric", "ORG"),               # one word
    ("– that Sergeant Gamble had reasonable grounds", "Gamble", "PERSON"),           # one word after a rank
    ("seen by Dr Okafor Nwosu today", "Okafor Nwosu", "PERSON"),
    ("the Sergeant Major Office", "Office", "ORG"),                                  # an organisation word
    ("the Inspector General reported", "General", "ORG"),
])
def test_names_read_as_person(text, word, label):
    assert _relabel(text, word) == label


def test_pattern_spans_keep_their_label():
    assert _relabel("Later that evening Éric Robert telephoned me.", "Éric Robert", "patterns:x") == "ORG"
