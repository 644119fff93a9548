"""Rényi divergences and mollify against independent float64 / mpmath values."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch
from distributions import FAMILIES, exact_lambda, pairs, symmetric_divergence64

from tokendp.divergence import _prepare, mollify, renyi_divergence, symmetric_renyi_divergence
from tokendp.errors import InvalidInputError, InvalidParameterError


def _mp_renyi(p: list[float], q: list[float], alpha: float) -> float:
    """D_alpha of the normalised distributions, at 40 digits."""
    mpmath.mp.dps = 40
    sp, sq = mpmath.fsum(map(mpmath.mpf, p)), mpmath.fsum(map(mpmath.mpf, q))
    total = mpmath.fsum((mpmath.mpf(pi) / sp) ** alpha * (mpmath.mpf(qi) / sq) ** (1 - alpha) for pi, qi in zip(p, q) if pi > 0)
    return float(mpmath.log(total) / (alpha - 1))


@pytest.mark.parametrize("alpha", [1.1, 2.0, 3.5, 20.0])
def test_renyi_matches_mpmath(alpha: float) -> None:
    gen = torch.Generator().manual_seed(0)
    logp = torch.log_softmax(torch.randn(6, 40, generator=gen, dtype=torch.float64) * 2, -1)
    logq = torch.log_softmax(torch.randn(6, 40, generator=gen, dtype=torch.float64) * 2, -1)
    got = renyi_divergence(logp, logq, alpha)
    for i in range(6):
        want = _mp_renyi(logp[i].exp().tolist(), logq[i].exp().tolist(), alpha)
        assert got[i].item() == pytest.approx(want, rel=1e-10)
    got32 = renyi_divergence(logp.float(), logq.float(), alpha)
    assert got32.dtype == torch.float32
    torch.testing.assert_close(got32.double(), got, rtol=1e-4, atol=1e-6)


def test_renyi_infinite_zero_and_support_cases() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64))
    logq = torch.log(torch.tensor([[0.5, 0.0, 0.5], [0.25, 0.25, 0.5], [0.5, 0.5, 0.0]], dtype=torch.float64))
    d = renyi_divergence(logp, logq, 2.0)
    assert d[0].item() == math.inf  # P puts mass where Q has none
    assert d[1].item() == pytest.approx(math.log(0.25 / 0.25 + 0.25 / 0.25))  # log sum P^2/Q = log 2
    assert d[2].item() == pytest.approx(math.log(2.0))
    assert renyi_divergence(logq[:1], logp[:1], 2.0).item() == math.inf


def test_identical_is_exactly_zero_and_symmetric_takes_max() -> None:
    gen = torch.Generator().manual_seed(1)
    logp = torch.log_softmax(torch.randn(5, 151_936, generator=gen) * 4, -1)  # huge vocabulary, float32
    assert torch.equal(renyi_divergence(logp, logp, 3.0), torch.zeros(5))
    logq = torch.log_softmax(torch.randn(151_936, generator=gen) * 4, -1)
    sym = symmetric_renyi_divergence(logp, logq, 2.0)
    both = torch.maximum(renyi_divergence(logp, logq, 2.0), renyi_divergence(logq.expand_as(logp), logp, 2.0))
    assert torch.equal(sym, both)
    want = _mp_renyi(logp[0].double().exp().tolist(), logq.double().exp().tolist(), 2.0)
    assert renyi_divergence(logp[0].double(), logq.double(), 2.0).item() == pytest.approx(want, rel=1e-9)


def test_renyi_v2_and_broadcasting() -> None:
    logp = torch.log(torch.tensor([[0.9, 0.1]], dtype=torch.float64))  # (1, 2)
    logq = torch.log(torch.tensor([[0.5, 0.5], [0.2, 0.8]], dtype=torch.float64))  # (2, 2)
    d = renyi_divergence(logp, logq, 2.0)
    assert d.shape == (2,)
    assert d[0].item() == pytest.approx(math.log(0.81 / 0.5 + 0.01 / 0.5))
    assert d[1].item() == pytest.approx(math.log(0.81 / 0.2 + 0.01 / 0.8))


def test_invalid_parameters() -> None:
    x = torch.zeros(1, 3)
    with pytest.raises(InvalidParameterError):
        renyi_divergence(x, x, 1.0)
    with pytest.raises(InvalidParameterError):
        mollify(x, x[0], alpha=2.0, cap=-0.1)
    with pytest.raises(InvalidInputError):
        mollify(x, torch.zeros(4), alpha=2.0, cap=0.1)


def _check_mollify(lp: torch.Tensor, lq: torch.Tensor, alpha: float, cap: torch.Tensor) -> None:
    lam = mollify(lp.float(), lq.float(), alpha=alpha, cap=cap)
    assert lam.dtype == torch.float32 and lam.shape == cap.shape
    assert bool(((lam >= 0) & (lam <= 1)).all())
    d = symmetric_divergence64(lp.float(), lq.float(), lam, alpha)
    assert bool((d <= cap * (1 + 1e-5)).all()), f"infeasible: max D/cap = {(d / cap).max().item()}"
    best = exact_lambda(lp.float(), lq.float(), alpha, cap)
    gap = best - lam.double()
    assert gap.max().item() <= 1e-3, f"suboptimal by {gap.max().item()}"


@pytest.mark.parametrize("family", FAMILIES)
def test_mollify_feasible_and_optimal(family: str) -> None:
    """Every family: V = 2 and V = 64, alpha = 2 and a random order in [1.1, 20], caps 1e-4..10.

    8 families x 2 vocabularies (2 and 64) x 2 orders x 200 cases x 4 groups = 25,600 group cases.
    """
    gen = torch.Generator().manual_seed(FAMILIES.index(family))
    n, m = 200, 4
    for vocab in (2, 64):
        lp, lq = pairs(n, m, vocab, gen, family)
        other = math.exp(torch.empty(1, dtype=torch.float64).uniform_(math.log(1.1), math.log(20.0), generator=gen).item())
        for alpha in (2.0, other):
            cap = torch.exp(torch.empty(n, m, dtype=torch.float64).uniform_(math.log(1e-4), math.log(10.0), generator=gen))
            _check_mollify(lp, lq, alpha, cap)


@pytest.mark.parametrize("family", FAMILIES)
def test_mollify_float32_general_orders(family: str) -> None:
    """Caps where the float32 passes run at orders other than 2 (the engine's calibrated orders)."""
    gen = torch.Generator().manual_seed(100 + FAMILIES.index(family))
    n, m = 200, 4
    for vocab in (2, 64):
        lp, lq = pairs(n, m, vocab, gen, family)
        normal = lq.min(-1).values > -80.0  # Q within float32's normal range (else float64 runs)
        lp, lq = lp[normal], lq[normal]
        if family == "zero_public":  # Q = 0 somewhere: always float64
            assert len(lq) == 0
            continue
        assert len(lq) >= 20
        for alpha in (1.5, 3.5, 9.0):
            cap = torch.exp(torch.empty(len(lq), m, dtype=torch.float64).uniform_(math.log(0.01), math.log(0.9 / (alpha - 1)), generator=gen))
            assert _prepare(lp.float(), lq.float(), alpha, cap).r.dtype == torch.float32
            _check_mollify(lp, lq, alpha, cap)


def test_mollify_special_values() -> None:
    gen = torch.Generator().manual_seed(3)
    lp, lq = pairs(4, 3, 50, gen, "random")
    assert torch.equal(mollify(lp, lq, alpha=2.0, cap=0.0), torch.zeros(4, 3, dtype=torch.float64))
    same = lq.unsqueeze(1).expand(4, 3, 50)
    assert torch.equal(mollify(same, lq, alpha=3.0, cap=1e-4), torch.ones(4, 3, dtype=torch.float64))
    loose = mollify(lp, lq, alpha=2.0, cap=1e6)
    assert torch.equal(loose, torch.ones_like(loose))
    zero_pub = lq.clone()
    zero_pub[:, 0] = -math.inf  # P > 0 = Q there: infinite for every lam > 0
    assert torch.equal(mollify(lp, torch.log_softmax(zero_pub, -1), alpha=2.0, cap=5.0), torch.zeros(4, 3, dtype=torch.float64))


def test_mollify_huge_vocabulary_and_cap_tensor() -> None:
    gen = torch.Generator().manual_seed(4)
    base = torch.randn(151_936, generator=gen) * 2.5
    lq = torch.log_softmax(base, -1)
    priv = base + 0.5 * torch.randn(2, 3, 151_936, generator=gen)
    priv[:, :, :3] += 12.0
    lp = torch.log_softmax(priv, -1)
    cap = torch.tensor([1e-3, 0.02, 1.0], dtype=torch.float64)  # broadcast over the batch
    for alpha in (2.0, 4.0):
        lam = mollify(lp, lq, alpha=alpha, cap=cap)
        assert lam.shape == (2, 3)
        d = symmetric_divergence64(lp, lq, lam, alpha)
        assert bool((d <= cap * (1 + 1e-5)).all())
        best = exact_lambda(lp, lq, alpha, cap.expand(2, 3), steps=30)
        assert (best - lam.double()).max().item() <= 1e-3
