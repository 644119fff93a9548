"""The tiered detector on hand-tagged inputs: each tier adds what it promises, no more."""

from __future__ import annotations

import pytest

from tokendp.errors import InvalidParameterError
from tokendp.text.sensitivity import TIERS, TieredDetector, Word, sentence_words, tier_spans
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


def test_default_pos_source_tags_in_context():
    pytest.importorskip("denckring_en_pos")
    from tokendp.text.sensitivity import perceptron_pos

    tags = perceptron_pos()(["she", "walks", "home"])
    assert tags[1] == "VERB"
