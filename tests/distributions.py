"""Random and adversarial next-token distributions for property tests, built in big batches.

Families: flat to peaked softmaxes, P close to Q, identical P and Q, public probabilities of
1e-30 and exactly 0 (with P also 0 there, so the case stays finite), private zeros and tiny
private probabilities where Q has mass (the reverse divergence's pole at lam = 1), and a few
dominant tokens that only one side likes. Everything is float64 log-probabilities.
"""

from __future__ import annotations

import math

import numpy as np
import torch

FAMILIES = ("random", "close", "identical", "tiny_public", "zero_public", "zero_private", "tiny_private", "swap")


def _softmax_logits(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    scale = torch.exp(torch.empty(shape[:-1] + (1,), dtype=torch.float64).uniform_(math.log(0.05), math.log(30.0), generator=gen))
    return torch.randn(shape, dtype=torch.float64, generator=gen) * scale


def pairs(n: int, m: int, vocab: int, gen: torch.Generator, family: str) -> tuple[torch.Tensor, torch.Tensor]:
    """n cases of (logp_priv (n, m, V), logp_pub (n, V)) from one family."""
    lq = _softmax_logits((n, vocab), gen)
    lp = _softmax_logits((n, m, vocab), gen)
    k = max(1, vocab // 10)
    if family == "close":
        eps = torch.exp(torch.empty(n, m, 1, dtype=torch.float64).uniform_(math.log(1e-4), math.log(1.0), generator=gen))
        lp = lq.unsqueeze(1) + eps * torch.randn(n, m, vocab, dtype=torch.float64, generator=gen)
    elif family == "identical":
        lp = lq.unsqueeze(1).expand(n, m, vocab).clone()
    elif family == "tiny_public":
        lq[:, :k] = lq[:, :k].clamp_max(0) - 69.0  # about 1e-30 times the rest
        lp[:, :, :k] += 5.0
    elif family == "zero_public":
        lq[:, :k] = -math.inf
        lp[:, :, :k] = -math.inf
    elif family == "zero_private":
        lp[:, :, :k] = -math.inf
        lq[:, :k] += 3.0
    elif family == "tiny_private":
        lp[:, :, :k] -= 60.0
        lq[:, :k] += 2.0
    elif family == "swap":
        lq[:, 0] += 25.0
        lp[:, :, 1] += 25.0
    elif family != "random":
        raise ValueError(family)
    return torch.log_softmax(lp, -1), torch.log_softmax(lq, -1)


def mixture(logp: torch.Tensor, logq: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """log(lam P + (1 - lam) Q) in float64 for logp (..., m, V), logq (..., V), lam (..., m)."""
    logp = torch.log_softmax(logp.double(), -1)
    logq = torch.log_softmax(logq.double(), -1).unsqueeze(-2)
    lam = lam.double().unsqueeze(-1)
    return torch.logaddexp(torch.log(lam) + logp, torch.log1p(-lam) + logq)


def symmetric_divergence64(logp: torch.Tensor, logq: torch.Tensor, lam: torch.Tensor, alpha: float) -> torch.Tensor:
    """Independent float64 max(D_a(P_lam || Q), D_a(Q || P_lam)), written out without tokendp."""
    lm = mixture(logp, logq, lam)  # (..., m, V)
    lq = torch.log_softmax(logq.double(), -1).unsqueeze(-2).expand_as(lm)

    def d(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        t = alpha * x + (1 - alpha) * y
        t = torch.where(x == -math.inf, -math.inf, torch.where(y == -math.inf, math.inf, t))
        return torch.logsumexp(t, -1) / (alpha - 1)

    return torch.maximum(d(lm, lq), d(lq, lm))


def exact_lambda(logp: torch.Tensor, logq: torch.Tensor, alpha: float, cap: torch.Tensor, steps: int = 32) -> torch.Tensor:
    """Slow reference: float64 bisection on the symmetric divergence (tests only)."""
    lo = torch.zeros(logp.shape[:-1], dtype=torch.float64)
    hi = torch.ones_like(lo)
    at_one = symmetric_divergence64(logp, logq, hi, alpha) <= cap
    for _ in range(steps):
        mid = (lo + hi) / 2
        ok = symmetric_divergence64(logp, logq, mid, alpha) <= cap
        lo, hi = torch.where(ok, mid, lo), torch.where(ok, hi, mid)
    return torch.where(at_one, 1.0, lo)


def renyi64(logp: torch.Tensor, logq: torch.Tensor, alpha: float) -> torch.Tensor:
    """Independent float64 D_alpha(P || Q) of the normalised distributions, (..., V) -> (...)."""
    lp = torch.log_softmax(logp.double(), -1)
    lq = torch.log_softmax(logq.double(), -1)
    t = alpha * lp + (1 - alpha) * lq
    t = torch.where(lp == -math.inf, -math.inf, torch.where(lq == -math.inf, math.inf, t))
    return torch.logsumexp(t, -1) / (alpha - 1)


def max_log_ratio64(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """max_y |log P(y) - log Q(y)| in float64 over tokens where either is positive, (..., V) -> (...)."""
    lp, lq = logp.double(), logq.double()
    diff = torch.where((lp == -math.inf) & (lq == -math.inf), 0.0, (lp - lq).abs())
    return diff.amax(-1)


def logits_batch(n: int, rows: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    """n cases of (rows, V) logits, cycling through the families (row 0 from Q, the others from P)."""
    per = -(-n // len(FAMILIES))
    out = []
    for family in FAMILIES:
        lp, lq = pairs(per, rows - 1, vocab, gen, family)
        out.append(torch.cat((lq.unsqueeze(1), lp), 1))
    return torch.cat(out)[:n].float()


def _log_fsum_exp(t: np.ndarray) -> float:
    """log sum exp(t) with an exactly rounded sum (math.fsum): no summation-order error."""
    top = t.max()
    if not np.isfinite(top):
        return float(top)
    return float(top + math.log(math.fsum(np.exp(t - top))))


def _renyi_exact(lx: np.ndarray, ly: np.ndarray, alpha: float) -> float:
    """D_alpha(X || Y) of normalised log-probabilities, float64 terms and an exact sum."""
    support = lx > -np.inf
    if np.any(support & (ly == -np.inf)):
        return math.inf
    t = alpha * lx[support] + (1 - alpha) * ly[support]
    return _log_fsum_exp(t) / (alpha - 1)


def _normalised(logp: np.ndarray) -> np.ndarray:
    return logp - _log_fsum_exp(logp)


def symmetric_divergence_exact(logp: torch.Tensor, logq: torch.Tensor, lam: torch.Tensor, alpha: float) -> torch.Tensor:
    """max(D_a(P_lam || Q), D_a(Q || P_lam)) for logp (..., m, V), logq (..., V), lam (..., m),
    independent of tokendp and of any summation order: float64 terms, math.fsum sums."""
    lp = logp.double().numpy()
    lq = np.broadcast_to(logq.double().numpy()[..., None, :], lp.shape)
    lams = lam.double().numpy()
    out = np.empty(lams.shape)
    for idx in np.ndindex(*lams.shape):
        p, q, w = _normalised(lp[idx]), _normalised(lq[idx]), float(lams[idx])
        with np.errstate(divide="ignore"):
            mix = np.logaddexp(math.log(w) + p if w > 0 else np.full_like(p, -np.inf), math.log1p(-w) + q if w < 1 else np.full_like(q, -np.inf))
        out[idx] = max(_renyi_exact(mix, q, alpha), _renyi_exact(q, mix, alpha))
    return torch.from_numpy(out)


def renyi_exact(logp: torch.Tensor, logq: torch.Tensor, alpha: float) -> torch.Tensor:
    """D_alpha(P || Q) (..., V) -> (...) of the normalised distributions, with exact sums."""
    lp, lq = np.broadcast_arrays(logp.double().numpy(), logq.double().numpy())
    out = np.empty(lp.shape[:-1])
    for idx in np.ndindex(*out.shape):
        out[idx] = _renyi_exact(_normalised(lp[idx]), _normalised(lq[idx]), alpha)
    return torch.from_numpy(out)
