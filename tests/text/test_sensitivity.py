"""The tiered detector on hand-tagged inputs (each tier adds what it promises, no more) and on the
default part-of-speech source, textblob's Pattern tagger, on real sentences."""

from __future__ import annotations

import sys

import pytest

from tokendp.errors import InvalidParameterError, MissingDependencyError
from tokendp.text.sensitivity import TIERS, TieredDetector, Word, pattern_pos, sentence_words, tier_spans, universal_tags
from tokendp.text.spans import Span

TEXT = "Dr Helen Marsh signed the contract in Leeds. The weather was nice and code 4711 worked."
TAGS = ["PROPN", "PROPN", "PROPN", "VERB", "DET", "NOUN", "ADP", "PROPN",
        "DET", "NOUN", "AUX", "ADJ", "CCONJ", "NOUN", "NUM", "VERB"]
ENTITIES = [Span(3, 14, "PERSON"), Span(38, 43, "LOC")]


def _words() -> list[Word]:
    found = sentence_words(TEXT)
    assert len(found) == len(TAGS)
    return [Word(a, b, tag, s) for (a, b, s), tag in zip(found, TAGS)]


def _marked(tier: str) -> set[str]:
    return {TEXT[s.start:s.end] for s in tier_spans(TEXT, ENTITIES, _words(), tier=tier, window=2)}


def test_tiers_grow_and_add_what_they_promise():
    low, high = _marked("low-entity"), _marked("high-entity")
    assert low == {"Helen Marsh", "4711"}
    assert high == low | {"Leeds"}
    contextual = _marked("low-contextual")
    # proper nouns, the verb next to the name, the verb right after the digits
    assert contextual == high | {"Dr", "Helen", "Marsh", "Leeds", "signed", "worked"}
    full = _marked("high-contextual")
    assert full >= contextual | {"contract", "code"}  # the verbs' nearby nouns
    assert "weather" not in full and "nice" not in full  # far from any entity or its verbs


def test_sentences_bound_the_context():
    text = "Bob left. Then everyone smiled."
    words = [Word(a, b, t, s) for (a, b, s), t in zip(sentence_words(text), ["PROPN", "VERB", "ADV", "PRON", "VERB"])]
    marked = {text[s.start:s.end] for s in tier_spans(text, [Span(0, 3, "PERSON")], words, tier="high-contextual", window=5)}
    assert marked == {"Bob", "left"}


def test_bad_tier_and_window():
    with pytest.raises(InvalidParameterError, match="tier"):
        tier_spans(TEXT, [], [], tier="everything")
    with pytest.raises(InvalidParameterError, match="window"):
        tier_spans(TEXT, [], [], tier="low-entity", window=-1)


class _Tagger:
    name = "hand"

    def tag(self, text):
        return [s for s in ENTITIES if s.end <= len(text)]


@pytest.mark.parametrize("tier", TIERS)
def test_detector_wires_tagger_and_pos(tier):
    detector = TieredDetector(tier, tagger=_Tagger(), pos=lambda words: ["PROPN"] * len(words), window=2)
    spans = detector.spans(TEXT)
    assert all(0 <= s.start < s.end <= len(TEXT) for s in spans)
    assert ("Dr" in {TEXT[s.start:s.end] for s in spans}) == tier.endswith("contextual")


def test_universal_tags_map_penn_treebank():
    words = ["there", "is", "a", "case", "Mr", "Kaya", "has", "lodged", "and", "has", "not", "a", "lawyer", "s",
             "to", "3"]
    ptb = ["EX", "VBZ", "DT", "NN", "NNP", "NNP", "VBZ", "VBN", "CC", "VBZ", "RB", "DT", "NN", "POS", "TO", "CD"]
    assert universal_tags(words, ptb) == ["PRON", "VERB", "DET", "NOUN", "PROPN", "PROPN", "AUX", "VERB", "CCONJ",
                                          "VERB", "ADV", "DET", "NOUN", "PART", "PART", "NUM"]
    # a combined lexicon tag counts as its first part; an unknown tag is X for a word, PUNCT otherwise
    assert universal_tags(["x", "fine", "-"], ["??", "JJ|NN", "??"]) == ["X", "ADJ", "PUNCT"]
    # "be" is AUX (copula, passive), "have"/"do" only before a verb, adverbs skipped
    assert universal_tags(["was", "did", "not", "go"], ["VBD", "VBD", "RB", "VB"]) == ["AUX", "AUX", "ADV", "VERB"]


@pytest.fixture(scope="module")
def pos():
    pytest.importorskip("textblob")
    return pattern_pos()


def _tags(pos, sentence: str) -> dict[str, str]:
    words = sentence.split()
    return dict(zip(words, pos(words)))


def test_default_pos_source_tags_real_sentences(pos):
    tags = _tags(pos, "Mr Kowalski lodged an application against Poland on 3 March 2006")
    assert tags["Kowalski"] == tags["Poland"] == "PROPN"
    assert (tags["lodged"], tags["application"], tags["3"], tags["2006"]) == ("VERB", "NOUN", "NUM", "NUM")
    tags = _tags(pos, "she has signed it but she has a car")
    assert (tags["she"], tags["signed"], tags["it"], tags["car"]) == ("PRON", "VERB", "PRON", "NOUN")
    assert pos("she has signed it but she has a car".split())[1::5] == ["AUX", "VERB"]


def test_default_pos_source_repairs_tokendp_words(pos):
    # "applicant's" reaches the tagger as applicant, s (the apostrophe is dropped): s is the
    # possessive, not a pronoun; "2" is a number, not Twitter's "to"
    tags = _tags(pos, "the applicant s lawyer appealed on 2 May")
    assert (tags["s"], tags["lawyer"], tags["appealed"], tags["2"]) == ("PART", "NOUN", "VERB", "NUM")
    assert pos([]) == []


def test_detector_reads_the_default_pos_source(pos):
    marked = {TEXT[s.start:s.end] for s in TieredDetector("low-contextual", tagger=_Tagger(), window=2).spans(TEXT)}
    # the proper nouns, and the verbs near the name and the code's digits; nothing far from them
    assert marked == {"Helen Marsh", "Leeds", "4711", "Dr", "Helen", "Marsh", "signed", "worked"}
    full = {TEXT[s.start:s.end] for s in TieredDetector("high-contextual", tagger=_Tagger(), window=2).spans(TEXT)}
    assert full >= marked | {"contract", "code"} and not full & {"weather", "nice", "was"}


def test_missing_textblob_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "textblob.en", None)
    with pytest.raises(MissingDependencyError, match=r'textblob: pip install "tokendp\[train\]"'):
        TieredDetector("low-contextual", tagger=_Tagger())
    TieredDetector("high-entity", tagger=_Tagger())  # the entity tiers need no POS source
