"""Decoding constraints before the mechanism depend only on public data and treat rows alike."""

from __future__ import annotations

import pytest
import torch

from tokendp.errors import InvalidParameterError
from tokendp.logits_processors import (PublicLogitsProcessor, apply_to_rows, banned_ngram_tokens,
                                       min_new_tokens, no_repeat_ngram, repetition_penalty)


def _rows(seed: int = 0, rows: int = 3, vocab: int = 11) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed))  # (R, V)


def test_repetition_penalty_known_values_and_same_tokens_in_every_row():
    logits = torch.tensor([[2.0, -2.0, 1.0], [-1.0, 4.0, 0.5]])
    out = repetition_penalty(logits, [0, 1, 1], 2.0)
    assert torch.equal(out, torch.tensor([[1.0, -4.0, 1.0], [-2.0, 2.0, 0.5]]))
    assert torch.equal(logits, torch.tensor([[2.0, -2.0, 1.0], [-1.0, 4.0, 0.5]]))  # not in place


def test_processors_reject_one_history_per_row():
    with pytest.raises(InvalidParameterError, match="shared by all its rows"):
        repetition_penalty(_rows(), torch.tensor([[1, 2], [1, 3], [1, 2]]), 1.3)
    with pytest.raises(InvalidParameterError):
        PublicLogitsProcessor(repetition_penalty=0.0)


def test_no_repeat_ngram_bans_completions_of_released_ngrams():
    assert banned_ngram_tokens([5, 6, 7, 5, 6], 3) == [7]
    assert banned_ngram_tokens([5, 6, 7, 5, 8], 3) == []
    assert banned_ngram_tokens([5, 6], 1) == [5, 6]
    assert banned_ngram_tokens([], 2) == []
    out = no_repeat_ngram(_rows(), [1, 2, 1], 2)
    assert torch.isinf(out[:, 2]).all() and torch.isfinite(out[:, [0, 1, 3]]).all()


def test_min_new_tokens_masks_eos_until_reached():
    logits = _rows()
    assert torch.isinf(min_new_tokens(logits, [1, 2], 3, [0])[:, 0]).all()
    assert torch.equal(min_new_tokens(logits, [1, 2, 3], 3, [0]), logits)


@pytest.mark.parametrize("seed", range(5))
def test_the_adjustment_is_the_same_function_for_every_row(seed):
    """Privacy: the change to each row's logits may not depend on the row (its private context).
    With rows that differ arbitrarily, the processed rows equal one public map of each row:
    processing a row alone gives the same result as processing it among others."""
    proc = PublicLogitsProcessor(repetition_penalty=1.4, no_repeat_ngram_size=2, min_new_tokens=4,
                                 eos_ids=(0,))
    generated = [3, 4, 3, 7]
    logits = _rows(seed, rows=4)
    together = proc(logits, generated)
    for r in range(4):
        alone = proc(logits[r:r + 1], generated)
        assert torch.equal(together[r:r + 1], alone)
    # and it depends on the released ids: another history, another result
    assert not torch.equal(proc(logits, [5, 6]), together)


def test_apply_to_rows_uses_each_sequences_own_released_ids():
    proc = PublicLogitsProcessor(repetition_penalty=2.0)
    logits = torch.ones(5, 4)  # (Rtot, V)
    out = apply_to_rows(proc, logits, [3, 2], [[1], [2, 3]])
    assert torch.equal(out[:3], torch.tensor([[1.0, 0.5, 1.0, 1.0]] * 3))
    assert torch.equal(out[3:], torch.tensor([[1.0, 1.0, 0.5, 0.5]] * 2))
    assert apply_to_rows(PublicLogitsProcessor(), logits, [3, 2], [[1], [2]]) is logits


def test_apply_to_rows_copies_nothing_while_no_ngram_is_banned():
    """sanitize's default no-repeat rule is active at every step but bans nothing at most of
    them: then the logits come back as they are, and otherwise only the banning sequence's rows
    change."""
    proc = PublicLogitsProcessor(no_repeat_ngram_size=3)
    logits = torch.ones(5, 4)  # (Rtot, V)
    assert apply_to_rows(proc, logits, [3, 2], [[1, 2, 3], [0, 1]]) is logits
    out = apply_to_rows(proc, logits, [3, 2], [[1, 2, 3, 1, 2], [0, 1]])  # (1, 2) was followed by 3
    assert torch.isinf(out[:3, 3]).all() and torch.equal(out[:3, :3], logits[:3, :3])
    assert torch.equal(out[3:], logits[3:]) and torch.equal(logits, torch.ones(5, 4))


def test_suppressed_ids_are_never_released_from_any_row_of_any_sequence():
    logits = _rows(rows=5)  # two sequences: rows 0-1 and 2-4
    processor = PublicLogitsProcessor(no_repeat_ngram_size=2, suppress=(3, 7))
    out = apply_to_rows(processor, logits, [2, 3], [[1, 2, 1], []])
    assert torch.isinf(out[:, [3, 7]]).all()
    assert torch.isinf(out[:2, 2]).all() and torch.isfinite(out[2:, 2]).all()  # the n-gram rule: sequence 0 only
    keep = [i for i in range(11) if i not in (2, 3, 7)]
    assert torch.equal(out[:, keep], logits[:, keep]) and torch.isfinite(logits).all()  # not in place
    assert torch.equal(processor(logits[:2], [1, 2, 1]), out[:2])


def test_placeholder_runs_are_the_marks_tokens_a_special_tokens_id_or_nothing_for_a_word():
    import tinylm
    from transformers import AutoTokenizer

    from tokendp.models.registry import base_model_dir
    from tokendp.text.contexts import placeholder_id, placeholder_runs

    tiny = tinylm.tokenizer()
    assert placeholder_runs(tiny, placeholder_id(tiny)) == (placeholder_id(tiny),)
    assert placeholder_runs(tiny, tiny.all_special_ids[0]) == (tiny.all_special_ids[0],)
    assert placeholder_runs(tiny, tiny.convert_tokens_to_ids("a")) == ()
    smol = AutoTokenizer.from_pretrained(base_model_dir())  # the default model's (installed by make install)
    runs = placeholder_runs(smol, placeholder_id(smol))
    assert {smol.decode([i]) for i in runs} >= {"_", "__", "___", " _", " ___"}
    assert all(set(smol.decode([i]).strip()) == {"_"} or "__" in smol.decode([i]) for i in runs)
    assert not any(set(t.strip()) == {"_"} or "__" in t for i in range(len(smol)) if i not in runs
                   for t in [smol.decode([i])])  # every token that could write "___" with two others
    assert placeholder_runs(smol, smol.convert_tokens_to_ids("Name")) == ()  # a typed marker is a word


@pytest.mark.parametrize("method", ["public", "dp-fusion"])
def test_a_temperature_past_float32_samples_around_the_suppressed_tokens(method):
    """float32 logits divided by 1e300 (inf in float32) made the suppressed tokens' -inf a NaN:
    "nothing to sample" (schemathesis found it through /v1/generate)."""
    import tokendp

    budget = {"epsilon": 8.0} if method == "dp-fusion" else {}
    out = tokendp.generate("What?", context="A letter about Anna Smith.", model="tiny", method=method,
                           temperature=1e300, max_new_tokens=4, seed=0, **budget)
    assert out.report.stop_reason in ("max_new_tokens", "eos")  # it sampled, where it raised
