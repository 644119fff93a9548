"""The default model's training data: detokenisation, synthetic documents, masking."""

from __future__ import annotations

import pytest

pytest.importorskip("faker")

from tokendp.models.training.examples import ExampleStream, masked_ids  # noqa: E402
from tokendp.models.training.synthetic import SyntheticDocs  # noqa: E402
from tokendp.models.training.tokenizer import MASK, SPECIAL_TOKENS, train_tokenizer  # noqa: E402
from tokendp.models.training.wikitext import detokenize  # noqa: E402


@pytest.fixture(scope="module")
def synth() -> SyntheticDocs:
    return SyntheticDocs(7)


@pytest.fixture(scope="module")
def tokenizer(synth):
    texts = [synth.document(6).text for _ in range(200)] + ["The 1990s, Zürich and Łódź."]
    return train_tokenizer(texts, vocab_size=500)


def test_detokenize_undoes_wikitext_conventions():
    line = ' The game \'s 2 @,@ 000 copies ( " real @-@ time " ) sold , <unk> said . '
    assert detokenize(line, unk=lambda: "Ozawa") == \
        'The game\'s 2,000 copies ("real-time") sold, Ozawa said.'


def test_spans_point_at_the_values(synth):
    doc = synth.document(8)
    assert doc.spans and len(doc.spans) == len(doc.kinds)
    for span in doc.spans:
        value = doc.text[span.start:span.end]
        assert value and value == value.strip()


def test_refill_changes_only_the_fresh_slots(synth):
    doc = synth.document(8)
    fresh = set(range(0, len(doc.spans), 2))
    new = synth.refill(doc, fresh)
    assert len(new.spans) == len(doc.spans)
    for i, (a, b) in enumerate(zip(doc.spans, new.spans)):
        if i not in fresh:
            assert doc.text[a.start:a.end] == new.text[b.start:b.end]
    # The text between entities (the template) is unchanged.
    gaps = lambda d: [d.text[s.end:t.start] for s, t in zip(d.spans, d.spans[1:])]  # noqa: E731
    assert gaps(doc) == gaps(new)


def test_masking_keeps_token_count_and_masks_exactly_overlapping_tokens(tokenizer, synth):
    mask_id = tokenizer.convert_tokens_to_ids(MASK)
    for _ in range(20):
        doc = synth.document(5)
        enc = tokenizer(doc.text, add_special_tokens=False, return_offsets_mapping=True)
        masked = masked_ids(tokenizer, doc.text, list(doc.spans))
        assert len(masked) == len(enc["input_ids"])
        for tok, new, (b, e) in zip(enc["input_ids"], masked, enc["offset_mapping"]):
            overlaps = any(s.start < e and b < s.end for s in doc.spans)
            assert new == (mask_id if overlaps else tok)
        assert mask_id in masked


def test_tokenizer_special_tokens_and_unicode_round_trip(tokenizer):
    assert tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS) == [0, 1, 2, 3, 4]
    text = "Çağlayan, Łódź — “quoted” 戦場 ☃\n\ttab"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text


def test_examples_put_loss_on_the_rewrite_only(tokenizer, synth):
    paragraph = "In 1990 the team moved to Paris, where it met Ozawa and Sega in 1994."
    stream = ExampleStream(tokenizer, [paragraph] * 3, seed=3)
    rewrite = tokenizer.convert_tokens_to_ids("<|rewrite|>")
    for kind in ("random", "wiki", "synth", "fill", "partial", "wikifill"):
        ex = stream.example(kind, 30)
        cut = ex.ids.index(rewrite)
        assert ex.ids[0] == tokenizer.convert_tokens_to_ids("<|doc|>")
        assert ex.ids[-1] == tokenizer.eos_token_id
        assert all(w == 1.0 for w in ex.weights[cut + 1:])
        assert all(w < 1.0 for w in ex.weights[:cut + 1])
        if kind in ("fill", "partial", "wikifill"):
            assert tokenizer.convert_tokens_to_ids(MASK) in ex.ids[:cut]
