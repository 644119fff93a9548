"""The default model's training data: detokenisation, synthetic documents, masking."""

from __future__ import annotations

import pytest

pytest.importorskip("faker")

from tokendp.models.training.examples import ExampleStream, lockstep_fill, masked_ids  # noqa: E402
from tokendp.models.training.synthetic import SyntheticDocs  # noqa: E402
from tokendp.models.training.tokenizer import MASK, SPECIAL_TOKENS, train_tokenizer  # noqa: E402
from tokendp.models.training.wikitext import detokenize  # noqa: E402
from tokendp.text.spans import Span  # noqa: E402


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


def test_lockstep_fill_replaces_each_placeholder_run_by_a_filler_of_its_length(tokenizer, synth):
    mask_id = tokenizer.convert_tokens_to_ids(MASK)
    changed = 0
    for _ in range(30):
        doc = synth.document(5)
        spans = list(doc.spans)
        source, target = lockstep_fill(tokenizer, doc.text, spans, lambda i: synth.value(doc.kinds[i]))
        original = tokenizer(doc.text, add_special_tokens=False)["input_ids"]
        assert source == masked_ids(tokenizer, doc.text, spans)
        assert len(target) == len(source) == len(original)
        for s, t, o in zip(source, target, original):
            assert t == o if s != mask_id else t != mask_id
        changed += target != original
        # The text between the entities survives in the decoded target.
        for a, b in zip(spans, spans[1:]):
            gap = doc.text[a.end:b.start].strip()
            if len(gap) > 6:
                assert gap[1:-1] in tokenizer.decode(target)
    assert changed >= 25


def test_lockstep_fill_cuts_or_joins_fillers_when_no_length_fits(tokenizer):
    text = "Dear Mr Smith, thank you."
    span = Span(text.index("Mr Smith"), text.index(","), "PERSON")
    n_hidden = masked_ids(tokenizer, text, [span]).count(tokenizer.convert_tokens_to_ids(MASK))
    for value in ("X" * 200, "Y"):
        source, target = lockstep_fill(tokenizer, text, [span], lambda i: value)
        assert len(target) == len(source)
        assert value[0] in tokenizer.decode(target) and "thank you." in tokenizer.decode(target)
    assert n_hidden >= 2
    with pytest.raises(ValueError, match="empty"):
        lockstep_fill(tokenizer, "Smith, thank you.", [Span(0, 5, "PERSON")], lambda i: "")


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
            assert len(ex.ids) == 2 * cut + 1  # lockstep: the rewrite is as long as the source


def test_synthetic_data_does_not_depend_on_the_hash_seed():
    """Same seed, same documents, in processes with different PYTHONHASHSEED (Faker's it_IT
    city list is built from a set)."""
    import os
    import subprocess
    import sys

    code = ("from tokendp.models.training.synthetic import SyntheticDocs\n"
            "s = SyntheticDocs(5)\n"
            "print([s.document(6).text for _ in range(40)], [s.value('city') for _ in range(300)])")
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(outputs) == 1
