"""The Hugging Face backend: batching, prefix sharing and KV caching change nothing."""

from __future__ import annotations

import pytest
import torch

import tinylm
from tokendp.backends import HFBackend, Row, RowSequence
from tokendp.errors import InvalidInputError


@pytest.fixture(scope="module")
def backend():
    return HFBackend(tinylm.model(), tinylm.tokenizer())


def _full_logits(model, ids):
    """Last-position logits from a plain forward over the whole sequence (no cache, no batch)."""
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0, -1].float()  # (V,)


SEQS = [
    RowSequence.from_ids([[5, 6, 7, 8, 9, 10], [5, 6, 7, 11, 12, 10], [5, 6, 7, 8, 13, 10]]),
    RowSequence.from_ids([[20, 21], [22, 21]]),          # no shared prefix
    RowSequence.from_ids([[30, 31, 32, 33, 34, 35, 36, 37, 38]]),
]


def _flat(seqs):
    return [list(r.ids) for s in seqs for r in s.rows]


def test_batched_logits_equal_unbatched(backend):
    _, logits = backend.prefill(SEQS)
    assert logits.shape == (6, backend.vocab_size) and logits.dtype == torch.float32
    for i, ids in enumerate(_flat(SEQS)):
        torch.testing.assert_close(logits[i], _full_logits(backend.model, ids), atol=1e-5, rtol=0)


def test_prefix_sharing_equals_no_sharing(backend):
    shared_state, shared = backend.prefill(SEQS, share_prefix=True)
    plain_state, plain = backend.prefill(SEQS, share_prefix=False)
    assert SEQS[0].shared_prefix_length() == 3 and SEQS[1].shared_prefix_length() == 0
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=0)
    tokens = torch.tensor([40, 41, 42])
    torch.testing.assert_close(backend.decode(shared_state, tokens), backend.decode(plain_state, tokens),
                               atol=1e-5, rtol=0)


def test_kv_cached_decoding_equals_full_recomputation(backend):
    state, _ = backend.prefill(SEQS)
    rows = _flat(SEQS)
    seq_of_row = [0, 0, 0, 1, 1, 2]
    for step in range(4):
        tokens = torch.tensor([50 + step, 60 + step, 70 + step])
        logits = backend.decode(state, tokens)
        for i, r in enumerate(rows):
            r.append(int(tokens[seq_of_row[i]]))
            torch.testing.assert_close(logits[i], _full_logits(backend.model, r), atol=1e-5, rtol=0)


def test_keep_drops_finished_sequences(backend):
    state, _ = backend.prefill(SEQS)
    backend.decode(state, torch.tensor([1, 2, 3]))
    state = backend.keep(state, torch.tensor([True, False, True]))
    assert state.rows_per_sequence == (3, 1) and state.row_sequence.tolist() == [0, 0, 0, 1]
    logits = backend.decode(state, torch.tensor([4, 5]))
    rows = [list(r.ids) + [1, 4] for r in SEQS[0].rows] + [list(SEQS[2].rows[0].ids) + [3, 5]]
    for i, r in enumerate(rows):
        torch.testing.assert_close(logits[i], _full_logits(backend.model, r), atol=1e-5, rtol=0)


def test_context_limit_and_adapters(backend):
    small = HFBackend(tinylm.model(max_positions=16), tinylm.tokenizer())
    assert small.max_context == 16
    small.check_fits(10, 6)
    with pytest.raises(InvalidInputError, match="context of 16 tokens"):
        small.check_fits(10, 7)
    with pytest.raises(InvalidInputError, match="adapter"):
        backend.prefill([RowSequence((Row((1, 2), adapter="shard0"),))])


def test_load_from_directory():
    path = tinylm.model_dir('{"placeholder": "<|mask|>"}')
    loaded = HFBackend.load(path, device="cpu", dtype="float32")
    assert loaded.options == {"placeholder": "<|mask|>"} and loaded.name == str(path)
    _, logits = loaded.prefill([SEQS[2]])
    torch.testing.assert_close(logits[0], _full_logits(tinylm.model(), list(SEQS[2].rows[0].ids)),
                               atol=1e-5, rtol=0)
    with pytest.raises(InvalidInputError, match="cannot load model"):
        HFBackend.load(path / "missing")
