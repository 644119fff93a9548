"""Exposure: the exact ranking equals scoring every candidate one by one; the sampled estimate
brackets it; the rank follows the model's likelihood."""

from __future__ import annotations

import math

import pytest
import torch

import tinylm
from tokendp.errors import InvalidInputError
from tokendp.eval.exposure import _sequence_logprob, candidate_logprobs, canary_exposures, digit_vocabulary
from tokendp.text.canaries import Canary, CanaryFormat


@pytest.fixture(scope="module")
def tiny():
    from tokendp.models import load_default_model

    return load_default_model()


def test_exact_scores_equal_one_by_one_scoring(tiny):
    model, tok = tiny
    fmt = CanaryFormat(digits=3)
    prefix, digits = digit_vocabulary(tok, fmt, "042")
    scores = candidate_logprobs(model, prefix, digits, 3, batch=7)  # (1000,)
    some = ["000", "042", "917", "999"]
    np_scores = _sequence_logprob(model, tok, fmt, some)
    torch.testing.assert_close(scores[[int(s) for s in some]], np_scores, rtol=1e-4, atol=1e-4)


def test_exact_and_sampled_agree_and_rank_follows_likelihood(tiny):
    model, tok = tiny
    fmt = CanaryFormat(digits=3)
    scores = candidate_logprobs(model, *digit_vocabulary(tok, fmt, "000"), 3)
    best = f"{int(torch.argmax(scores)):03d}"
    exact = canary_exposures(model, tok, fmt, [Canary(best, 1), Canary("123", 1)], method="exact")
    assert exact[0].rank == 1 and exact[0].exposure == pytest.approx(math.log2(1000))
    sampled = canary_exposures(model, tok, fmt, [Canary("123", 1)], method="sampled", samples=400)[0]
    assert sampled.low <= exact[1].exposure + 0.5 and exact[1].exposure - 0.5 <= sampled.high
    assert abs(sampled.exposure - exact[1].exposure) < 1.0  # the skew-normal extrapolation, near the truth here


def test_a_tokenizer_that_merges_digits_needs_the_sampled_estimate():
    tok = tinylm.tokenizer()
    fmt = CanaryFormat(prefix="code", digits=2, separator="")
    if digit_vocabulary(tok, fmt, "12") is None:
        with pytest.raises(InvalidInputError, match="sampled"):
            canary_exposures(tinylm.model(), tok, fmt, [Canary("12", 1)], method="exact")
    found = canary_exposures(tinylm.model(), tok, fmt, [Canary("12", 1)], method="sampled", samples=30)[0]
    assert 0 <= found.low <= found.high <= math.log2(100) + 1e-9 and 0 <= found.exposure <= math.log2(100) + 1e-9
