"""Utility and attack metrics on token log-probabilities.

Perplexity (the DP-Fusion paper's utility metric, Thareja et al., ICLR 2026, Sec. 5): the
original document d_1..d_n is scored under a method's next-token distribution by teacher
forcing, PPL = exp(-(1/n) sum_t log p(d_t | prompt, d_<t)); over many documents the
negative log-likelihoods and token counts are summed first (a token-weighted pool).

Attacks score a candidate's fit to a released text from its per-token log-probabilities
l_1..l_n (higher score = more likely the truth):

* LOSS (Yeom et al., CSF 2018): the mean log-probability (1/n) sum_t l_t, i.e. minus the loss;
* Min-K% Prob (Shi et al., ICLR 2024): the mean of the ceil(k n) smallest l_t.

In the token-recovery game the attack succeeds when the true candidate scores best.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from tokendp.errors import InvalidInputError, InvalidParameterError


def target_logprobs(logprobs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) at each position: ``logprobs # (..., T, V)``, ``targets # (..., T)`` -> ``# (..., T)``."""
    if logprobs.shape[:-1] != targets.shape:
        raise InvalidInputError(
            f"log-probs of shape {tuple(logprobs.shape)} do not match targets of shape {tuple(targets.shape)}")
    return logprobs.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)


def perplexity(nll_sum: float, n_tokens: int) -> float:
    """exp(nll_sum / n_tokens): the perplexity of ``n_tokens`` tokens with total NLL ``nll_sum``."""
    if n_tokens <= 0:
        raise InvalidInputError("perplexity needs at least one token")
    return math.exp(nll_sum / n_tokens)


def pooled_perplexity(parts: Iterable[tuple[float, int]]) -> float:
    """Perplexity over documents, pooled by tokens: exp(sum NLL / sum n) of (nll_sum, n) pairs."""
    parts = list(parts)
    return perplexity(sum(p[0] for p in parts), sum(p[1] for p in parts))


def _check_mask(token_lp: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    mask = torch.ones_like(token_lp, dtype=torch.bool) if mask is None else mask.bool()
    if mask.shape != token_lp.shape:
        raise InvalidInputError("the mask must have the shape of the token log-probabilities")
    if not bool(mask.any(-1).all()):
        raise InvalidInputError("every scored sequence needs at least one token")
    return mask


def loss_score(token_lp: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """LOSS attack score: mean log-prob over real tokens. ``token_lp # (..., T)`` -> ``# (...)``."""
    mask = _check_mask(token_lp, mask)
    total = torch.where(mask, token_lp, 0.0).sum(-1, dtype=torch.float64)
    return (total / mask.sum(-1)).to(torch.float64)


def min_k_score(token_lp: torch.Tensor, mask: torch.Tensor | None = None, *, k: float = 0.2) -> torch.Tensor:
    """Min-K% Prob score: mean of the ceil(k n) lowest log-probs of each row's n real tokens.

    ``token_lp # (..., T)`` -> ``# (...)``; ``k`` in (0, 1].
    """
    if not 0.0 < k <= 1.0:
        raise InvalidParameterError(f"k must be a fraction in (0, 1], got {k!r} (0.2 is Min-20%)")
    mask = _check_mask(token_lp, mask)
    n = mask.sum(-1)  # (...)
    count = torch.ceil(k * n.double()).long().clamp(min=1)  # (...)
    lowest = torch.where(mask, token_lp.double(), math.inf).sort(-1).values  # (..., T) ascending
    keep = torch.arange(token_lp.shape[-1], device=token_lp.device) < count.unsqueeze(-1)  # (..., T)
    return torch.where(keep, lowest, 0.0).sum(-1) / count


def attack_success(scores: torch.Tensor, truth: int = 0) -> float:
    """1 when candidate ``truth`` has the highest score, 1/t when it ties with t-1 others, else 0.

    ``scores # (C,)``; ties score like a uniformly random tie-break (so a method whose output
    does not tell the candidates apart scores exactly 1/C, chance level).
    """
    if scores.dim() != 1 or not 0 <= truth < scores.shape[0]:
        raise InvalidInputError("scores must be one score per candidate, with the truth among them")
    best = scores.max()
    if scores[truth] < best:
        return 0.0
    return 1.0 / int((scores == best).sum())
