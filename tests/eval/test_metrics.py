"""Metrics on hand-made cases: known distributions, known perplexities, known winners."""

import math

import pytest
import torch

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.eval.metrics import (attack_success, loss_score, min_k_score, perplexity, pooled_perplexity,
                                  target_logprobs)


def test_uniform_distribution_has_perplexity_v():
    v, t = 7, 5
    logprobs = torch.full((t, v), -math.log(v))  # (T, V) uniform
    targets = torch.tensor([0, 3, 6, 2, 1])
    nll = -target_logprobs(logprobs, targets).sum().item()
    assert perplexity(nll, t) == pytest.approx(v)


def test_known_distribution_known_perplexity():
    probs = torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]])  # (T, V)
    targets = torch.tensor([0, 1])
    lp = target_logprobs(probs.log(), targets)
    assert lp.tolist() == pytest.approx([math.log(0.5), math.log(0.8)])
    assert perplexity(-lp.sum().item(), 2) == pytest.approx((0.5 * 0.8) ** -0.5)


def test_pooled_perplexity_weights_by_tokens():
    # doc A: 1 token at NLL 0, doc B: 3 tokens at total NLL 3 -> exp(3/4), not the mean of exp(0), exp(1)
    assert pooled_perplexity([(0.0, 1), (3.0, 3)]) == pytest.approx(math.exp(0.75))
    with pytest.raises(InvalidInputError):
        perplexity(1.0, 0)


def test_target_logprobs_batched_shapes():
    lp = torch.log_softmax(torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0)), -1)
    tg = torch.tensor([[0, 1, 2], [3, 3, 0]])
    out = target_logprobs(lp, tg)
    assert out.shape == (2, 3) and out[1, 0] == lp[1, 0, 3]
    with pytest.raises(InvalidInputError):
        target_logprobs(lp, tg[:, :2])


def test_loss_and_min_k_scores():
    token_lp = torch.tensor([[-1.0, -2.0, -3.0, -4.0, -10.0],
                             [-0.5, -0.5, -0.5, -0.5, -0.5]])
    assert loss_score(token_lp).tolist() == pytest.approx([-4.0, -0.5])
    # k = 0.2 of 5 tokens -> the single lowest; k = 0.4 -> mean of the two lowest
    assert min_k_score(token_lp, k=0.2).tolist() == pytest.approx([-10.0, -0.5])
    assert min_k_score(token_lp, k=0.4).tolist() == pytest.approx([-7.0, -0.5])
    assert min_k_score(token_lp, k=1.0).tolist() == pytest.approx(loss_score(token_lp).tolist())


def test_scores_ignore_masked_padding():
    token_lp = torch.tensor([[-1.0, -3.0, -100.0], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    assert loss_score(token_lp, mask).tolist() == pytest.approx([-2.0, -2.0])
    assert min_k_score(token_lp, mask, k=0.5).tolist() == pytest.approx([-3.0, -2.0])
    with pytest.raises(InvalidParameterError):
        min_k_score(token_lp, k=0.0)
    with pytest.raises(InvalidInputError):
        loss_score(token_lp, torch.zeros_like(mask))


def test_attack_success_known_winner_and_ties():
    assert attack_success(torch.tensor([-1.0, -2.0, -3.0, -1.5, -9.0])) == 1.0
    assert attack_success(torch.tensor([-2.0, -1.0, -3.0, -1.5, -9.0])) == 0.0
    assert attack_success(torch.tensor([-1.0, -1.0, -3.0, -1.5, -9.0])) == 0.5
    assert attack_success(torch.zeros(5)) == pytest.approx(0.2)  # no information: chance level
    assert attack_success(torch.tensor([0.0, 1.0]), truth=1) == 1.0
