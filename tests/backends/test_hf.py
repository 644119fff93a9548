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
    RowSequence.from_ids([[5, 6, 7, 8, 9, 10], [5, 6, 7, 11, 12, 10], [5, 6, 7, 8, 13, 10]], public_prefix=3),
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


def test_a_sequence_given_twice_is_prefilled_once_and_decodes_on_its_own(backend, monkeypatch):
    """The same object twice (copies by construction) runs once; each copy then decodes its own
    tokens, as if it had been prefilled alone. Equal rows in distinct objects are not merged."""
    seqs = [SEQS[0], SEQS[1], SEQS[0], SEQS[2], SEQS[0]]
    forwarded = []
    forward = backend._forward
    monkeypatch.setattr(backend, "_forward", lambda ids, *a, **k: forwarded.append(ids.shape[0]) or forward(ids, *a, **k))
    state, logits = backend.prefill(seqs)
    assert forwarded == [1, 6]  # SEQS[0]'s prefix once, then the three distinct sequences' 6 rows
    assert state.rows_per_sequence == (3, 2, 3, 1, 3) and logits.shape == (12, backend.vocab_size)
    assert state.row_sequence.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 3, 4, 4, 4]
    rows = _flat(seqs)
    for i, ids in enumerate(rows):
        torch.testing.assert_close(logits[i], _full_logits(backend.model, ids), atol=1e-5, rtol=0)
    tokens = torch.tensor([50, 60, 51, 70, 52])
    out = backend.decode(state, tokens)
    for i, r in enumerate(rows):
        torch.testing.assert_close(out[i], _full_logits(backend.model, r + [int(tokens[state.row_sequence[i]])]),
                                   atol=1e-5, rtol=0)
    forwarded.clear()
    backend.prefill([SEQS[1], RowSequence.from_ids([list(r.ids) for r in SEQS[1].rows])])
    assert forwarded == [4]


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


def test_extend_and_rollback_equal_full_recomputation(backend):
    """Several positions per pass, then a different tail forgotten per sequence (a crop for the
    tail all forget, mask holes for the rest), twice: every later logit is the recomputed one."""
    state, _ = backend.prefill(SEQS)
    rows = _flat(SEQS)
    seq_of_row = [0, 0, 0, 1, 1, 2]
    for tokens, forget in ((torch.tensor([[50, 51, 52], [60, 61, 62], [70, 71, 72]]), [2, 1, 2]),
                           (torch.tensor([[53, 54, 55], [63, 64, 65], [73, 74, 75]]), [0, 2, 1])):
        logits = backend.extend(state, tokens)
        assert logits.shape == (6, 3, backend.vocab_size)
        for i, r in enumerate(rows):
            for j in range(3):
                torch.testing.assert_close(logits[i, j], _full_logits(backend.model, r + tokens[seq_of_row[i], :j + 1].tolist()),
                                           atol=1e-5, rtol=0)
        backend.rollback(state, torch.tensor(forget))
        for i, r in enumerate(rows):
            r.extend(tokens[seq_of_row[i], :3 - forget[seq_of_row[i]]].tolist())
    logits = backend.decode(state, torch.tensor([1, 2, 3]))
    for i, r in enumerate(rows):
        torch.testing.assert_close(logits[i], _full_logits(backend.model, r + [1 + seq_of_row[i]]), atol=1e-5, rtol=0)
    assert backend.can_roll_back


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


# --------------------------------------------------------------------------- LoRA adapters per row
@pytest.fixture(scope="module")
def lora_backend():
    dirs = tinylm.adapter_dirs(3)
    return HFBackend.load(tinylm.model_dir(), adapters={d.name: d for d in dirs})


def _alone(adapter_dir, ids):
    """Last-position logits of ``ids`` read by one adapter (or the base model), its own model, no batch."""
    import copy

    from peft import PeftModel

    base = copy.deepcopy(tinylm.model())
    model = base if adapter_dir is None else PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    return _full_logits(model, ids)


def test_adapters_are_loaded_in_peft_layout(lora_backend):
    dirs = tinylm.adapter_dirs(3)
    assert lora_backend.adapters == tuple(d.name for d in dirs)
    assert all((d / "adapter_config.json").is_file() and (d / "adapter_model.safetensors").is_file() for d in dirs)


def test_mixed_adapter_batch_equals_each_adapter_alone(lora_backend):
    """PMixED's layout: per sequence, the public row (no adapter) then one row per member, all in
    one forward pass per step; every row equals its adapter run alone, the public row the base model."""
    names = lora_backend.adapters
    prompts = [[5, 6, 7, 8], [20, 21, 22, 23, 24, 25]]
    seqs = [RowSequence((Row(tuple(p)), *(Row(tuple(p), a) for a in names))) for p in prompts]
    calls = []
    hook = lora_backend.model.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        state, logits = lora_backend.prefill(seqs)
        tokens = torch.tensor([40, 41])
        decoded = lora_backend.decode(state, tokens)
    finally:
        hook.remove()
    assert calls == [1, 1]  # one pass for the prefill, one for the step: never one per member
    dirs = dict(zip(names, tinylm.adapter_dirs(3)))
    for stage, out, extra in (("prefill", logits, []), ("decode", decoded, [[40], [41]])):
        for s, p in enumerate(prompts):
            ids = p + (extra[s] if extra else [])
            for r, adapter in enumerate((None, *names)):
                alone = _alone(None if adapter is None else dirs[adapter], ids)
                torch.testing.assert_close(out[4 * s + r], alone, atol=1e-5, rtol=0, msg=f"{stage} {adapter}")
            assert (out[4 * s + 1] - out[4 * s]).abs().max() > 1e-2  # the adapters do change the logits


def test_public_row_of_a_mixed_batch_is_the_base_model_exactly(lora_backend):
    """"__base__" rows skip every LoRA update: the public row of a mixed batch is bit-identical to
    the same batch with no adapter on any row, and equals the plain base model (the lm_head GEMM
    may round a batch of 4 rows and one row differently in the last bit, hence the tolerance there)."""
    p = (5, 6, 7, 8, 9)
    mixed_seq = RowSequence((Row(p), *(Row(p, a) for a in lora_backend.adapters)))
    base_seq = RowSequence((Row(p), *(Row(p) for _ in lora_backend.adapters)))
    _, mixed = lora_backend.prefill([mixed_seq])
    _, base = lora_backend.prefill([base_seq], share_prefix=False)
    assert torch.equal(mixed[0], base[0])
    assert all(torch.equal(base[0], base[i]) for i in range(1, 4))
    torch.testing.assert_close(mixed[0], _alone(None, list(p)), atol=1e-5, rtol=0)


def test_mixed_batch_keeps_adapters_when_sequences_finish(lora_backend):
    names = lora_backend.adapters
    seqs = [RowSequence((Row((5, 6)), *(Row((5, 6), a) for a in names))),
            RowSequence((Row((7, 8, 9)), Row((7, 8, 9), names[2])))]
    state, _ = lora_backend.prefill(seqs)
    lora_backend.decode(state, torch.tensor([1, 2]))
    state = lora_backend.keep(state, torch.tensor([False, True]))
    assert state.adapters == ("__base__", names[2])
    logits = lora_backend.decode(state, torch.tensor([3]))
    dirs = dict(zip(names, tinylm.adapter_dirs(3)))
    torch.testing.assert_close(logits[0], _alone(None, [7, 8, 9, 2, 3]), atol=1e-5, rtol=0)
    torch.testing.assert_close(logits[1], _alone(dirs[names[2]], [7, 8, 9, 2, 3]), atol=1e-5, rtol=0)


def test_unknown_adapter_is_refused(lora_backend):
    with pytest.raises(InvalidInputError, match="unknown adapter.*shard-999"):
        lora_backend.prefill([RowSequence((Row((1, 2)), Row((1, 2), "shard-999")))])


@pytest.mark.parametrize("fixture", ["backend", "lora_backend"])
def test_passes_name_the_cache_as_the_model_expects(fixture, request):
    """The cache goes under the forward's own keyword (``cache`` in the transformers versions that
    renamed ``past_key_values``): no deprecation warning on any pass, peft model or not."""
    import warnings

    b = request.getfixturevalue(fixture)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state, _ = b.prefill([RowSequence.from_ids([[5, 6, 7], [5, 8, 7]], public_prefix=1)])
        b.decode(state, torch.tensor([9]))
