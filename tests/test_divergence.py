"""Rényi divergences and mollify against independent float64 / mpmath values."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch
from distributions import FAMILIES, exact_lambda, pairs, symmetric_divergence64, symmetric_divergence_exact

import tokendp.divergence as divergence
from tokendp.divergence import _prepare, _with_search_data, mollify, renyi_divergence, symmetric_renyi_divergence
from tokendp.errors import InvalidInputError, InvalidParameterError

pytestmark = pytest.mark.usefixtures("step_path")  # every test on the CPU path and the accelerator path (tests/host_reads.py)


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
    # the float64 reference itself is good to ~1e-13 here (V <= 64)
    assert bool((d <= cap * (1 + 1e-9) + 1e-13).all()), f"infeasible: max D/cap = {(d / cap).max().item()}"
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
def test_mollify_float32_general_orders(family: str, step_path: str) -> None:
    """Caps where the float32 passes run at orders other than 2 (the engine's calibrated orders);
    on the accelerator path the same caps search in float64 (no eligibility read)."""
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
            searched = _with_search_data(_prepare(lp.float(), lq.float(), alpha, cap), lp.float(), lq.float())
            assert (searched.float32 is not None) == (step_path == "cpu")
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


def _huge_case(seed: int, batch: int = 2, m: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """LM-like rows at V = 151,936 (Qwen2.5's vocabulary), float32."""
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(151_936, generator=gen) * 2.5
    priv = base + 0.5 * torch.randn(batch, m, 151_936, generator=gen)
    priv[:, :, :3] += 12.0
    return torch.log_softmax(priv, -1), torch.log_softmax(base, -1)


def test_mollify_huge_vocabulary_and_cap_tensor() -> None:
    lp, lq = _huge_case(4)
    cap = torch.tensor([1e-3, 0.02, 1.0], dtype=torch.float64)  # broadcast over the batch
    for alpha in (2.0, 4.0):
        lam = mollify(lp, lq, alpha=alpha, cap=cap)
        assert lam.shape == (2, 3)
        d = symmetric_divergence_exact(lp, lq, lam, alpha)
        assert bool((d <= cap).all()), f"max D/cap - 1 = {(d / cap).max().item() - 1}"


def _gamma(n: int) -> float:
    nu = n * 2.0**-53
    return nu / (1 - nu)


@pytest.mark.parametrize("direction", [-1.0, 1.0])
def test_mollify_meets_cap_under_the_worst_summation_order(monkeypatch: pytest.MonkeyPatch, direction: float) -> None:
    """Every float64 sum is moved by the most any order of addition could move it (gamma_V
    times the sum of absolute values), all down or all up: the lambdas must still meet their
    caps when recomputed with exact sums. V = 151,936, orders 1.5 to 8, caps 1e-4 to 1."""
    plain_sum, plain_q_sum = divergence._sum, divergence._q_sum  # the two points every certified sum goes through

    def worst_sum(x: torch.Tensor) -> torch.Tensor:
        out = plain_sum(x)
        return out + direction * _gamma(x.shape[-1]) * plain_sum(x.abs()) if x.dtype == torch.float64 else out

    def worst_q_sum(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        out = plain_q_sum(x, q)
        return out + direction * _gamma(x.shape[-1]) * plain_q_sum(x.abs(), q) if x.dtype == torch.float64 else out

    monkeypatch.setattr(divergence, "_sum", worst_sum)
    monkeypatch.setattr(divergence, "_q_sum", worst_q_sum)
    lp, lq = _huge_case(5, batch=1, m=4)
    cap = torch.tensor([1e-4, 1e-3, 0.05, 1.0], dtype=torch.float64)
    for alpha in (1.5, 2.0, 3.5, 8.0):
        lam = mollify(lp, lq, alpha=alpha, cap=cap / (alpha if alpha > 2 else 1))
        d = symmetric_divergence_exact(lp, lq, lam, alpha)
        c = cap / (alpha if alpha > 2 else 1)
        assert bool((d <= c).all()), f"alpha {alpha}: max D/cap - 1 = {(d / c).max().item() - 1}"
        assert bool((lam > 0).all())


@pytest.mark.parametrize("threads", [1, 2])
def test_mollify_randomised_audit(threads: int) -> None:
    """A few hundred random and adversarial cases, V from 2 to 151,936, orders 1.5 to 8, caps
    1e-4 to 1, recomputed with exact sums: no lambda over its cap."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(40 + threads)
        worst = 0.0
        for case, vocab in enumerate((2, 50, 1000, 20_000, 151_936)):
            family = FAMILIES[case % len(FAMILIES)] if vocab < 151_936 else "random"
            n = 2 if vocab == 151_936 else 12
            lp, lq = pairs(n, 4, vocab, gen, family)
            lp, lq = lp.float(), lq.float()
            for alpha in (1.5, 2.0, 3.0, 8.0):
                cap = torch.exp(torch.empty(n, 4, dtype=torch.float64).uniform_(math.log(1e-4), 0.0, generator=gen))
                lam = mollify(lp, lq, alpha=alpha, cap=cap)
                d = symmetric_divergence_exact(lp, lq, lam, alpha)
                worst = max(worst, (d / cap).max().item())
        assert worst <= 1.0, f"max D/cap - 1 = {worst - 1}"
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mollify_leaves_its_inputs_alone(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(9)
    lp, lq = pairs(3, 2, 40, gen, "random")
    lp, lq = lp.to(dtype), lq.to(dtype)
    before = (lp.clone(), lq.clone())
    for alpha in (2.0, 3.0):
        mollify(lp, lq, alpha=alpha, cap=0.05)
    assert torch.equal(lp, before[0]) and torch.equal(lq, before[1])


@pytest.mark.parametrize("exponent", [0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 2.75, 3.0, 5.0, 7.0, 11.0, 15.0, 23.0, 63.0])
def test_quarter_power_within_its_rounding_count(exponent: float) -> None:
    """The product-and-square-root chain against 50-digit powers: within gamma_ceil(c) of the
    exact power of its (exact float64) input, for w across many binades (the float32 chain, an
    estimate only, within the same count of its own unit roundoff)."""
    from tokendp.divergence import _gamma, _quarter_power

    gen = torch.Generator().manual_seed(int(4 * exponent))
    w = torch.exp(torch.empty(400, dtype=torch.float64).uniform_(-8.0, 8.0, generator=gen) / max(exponent, 1.0))
    got, count = _quarter_power(w.clone(), exponent)
    mpmath.mp.dps = 50
    worst = max(abs(float(mpmath.mpf(g) / mpmath.power(mpmath.mpf(x), mpmath.mpf(exponent)) - 1))
                for g, x in zip(got.tolist(), w.tolist()))
    assert worst <= _gamma(math.ceil(count)), (worst, count)
    assert worst > 0 or exponent == 1.0  # the chain rounds: the bound is not vacuous
    got32, count32 = _quarter_power(w.float(), exponent)
    u32 = 2.0**-24
    exact = [mpmath.power(mpmath.mpf(x), mpmath.mpf(exponent)) for x in w.float().double().tolist()]
    worst32 = max(abs(float(mpmath.mpf(g) / e - 1)) for g, e in zip(got32.double().tolist(), exact) if abs(g) < 1e38)
    assert count32 == count and worst32 <= math.ceil(count) * u32 / (1 - math.ceil(count) * u32)  # a float32 estimate


def test_power_pair_reciprocal_of_subnormal_is_infinite() -> None:
    """A w^(a-1) that underflows to a subnormal has lost digits: its reciprocal is +inf in the
    rigorous pass (an upper bound), never an underestimate."""
    from tokendp.divergence import _power_pair

    w = torch.tensor([1e-5, 1e-300, 0.5, 2.0], dtype=torch.float64)
    lower, power_a, power_1a = _power_pair(w, 64.0, rigorous=True)
    assert 0 < lower[0] < torch.finfo(torch.float64).tiny  # 1e-315: subnormal
    assert power_1a[0] == math.inf and power_1a[1] == math.inf
    assert torch.allclose(power_1a[2:], w[2:] ** -63.0, rtol=1e-13) and torch.allclose(power_a[2:], w[2:] ** 64.0, rtol=1e-13)


@pytest.mark.parametrize("alpha", [1.25, 3.0, 3.5, 3.3, 64.0])
def test_general_order_bounds_are_tight_upper_bounds(alpha: float) -> None:
    """The float64 pass at orders other than 2 (product chains at multiples of 1/4, exp/log at
    3.3): each direction's bound is above the 50-digit divergence of the mixture, by < 1e-9."""
    from tokendp.divergence import _evaluate_general

    gen = torch.Generator().manual_seed(7)
    lp = torch.log_softmax(torch.randn(2, 300, generator=gen, dtype=torch.float64) * 2, -1)  # (m, V)
    lq = torch.log_softmax(torch.randn(300, generator=gen, dtype=torch.float64) * 2, -1)
    lam = torch.tensor([0.01, 0.05, 0.3], dtype=torch.float64).expand(2, 3)  # (m, K)
    prob = _prepare(lp, lq, alpha, torch.full((2,), 0.5, dtype=torch.float64))
    ev = _evaluate_general(prob, lam, slopes=False)
    for j in range(2):
        for k in range(3):
            mix = (lam[j, k] * lp[j].exp() + (1 - lam[j, k]) * lq.exp()).tolist()
            forward = _mp_renyi(mix, lq.exp().tolist(), alpha)
            reverse = _mp_renyi(lq.exp().tolist(), mix, alpha)
            for bound, exact in ((ev.forward[j, k].item(), forward), (ev.reverse[j, k].item(), reverse)):
                assert exact <= bound <= exact * (1 + 1e-9) + 1e-13, (alpha, j, k, bound, exact)


@pytest.mark.parametrize("alpha", [1.5, 3.5, 3.3])
def test_each_group_answers_alone(alpha: float) -> None:
    """A group's lambda is the same whatever its batchmates hold (same shape: BLAS may round
    by shape, which is public): beside groups that meet their cap at lam = 1 (no search runs)
    and beside groups that need a search. Caps just above each group's own divergence at
    lam = 1, where the float32 search aims below the cap."""
    gen = torch.Generator().manual_seed(3)
    lq = torch.log_softmax(torch.randn(300, generator=gen) * 2, -1)  # (V,)
    lp = torch.log_softmax(lq + 0.3 * torch.randn(6, 300, generator=gen), -1)  # (m, V): close to Q
    whole = symmetric_divergence64(lp, lq, torch.ones(6, dtype=torch.float64), alpha)  # (m,)
    cap = whole * torch.tensor([1 + 1e-7, 1 + 1e-5, 1.001, 0.5, 0.3, 0.1], dtype=torch.float64)  # one search mode
    together = mollify(lp, lq, alpha=alpha, cap=cap)
    assert together[2] == 1.0 and bool((together[3:] < 1).all())
    for i in range(6):
        for mate in (2, 5):  # one that meets its cap at lam = 1, one that needs a search
            rows, caps = lp[mate].repeat(6, 1), cap[mate].repeat(6)
            rows[i], caps[i] = lp[i], cap[i]
            assert mollify(rows, lq, alpha=alpha, cap=caps)[i] == together[i], (i, mate)


@pytest.mark.parametrize("alpha", [2.0, 3.0])
def test_slices_of_positions_answer_as_each_position_alone(monkeypatch: pytest.MonkeyPatch, alpha: float) -> None:
    """On the CPU a batch of positions is searched in slices that fit the cache
    (divergence._SLICE_BYTES): every field equals the answer for that position searched alone,
    for two leading dimensions and with public caps, and slices of several positions stay
    within their caps and agree with the unsliced search up to rounding."""
    from tokendp.divergence import mollify_checked

    gen = torch.Generator().manual_seed(11)
    lq = torch.log_softmax(torch.randn(2, 3, 200, generator=gen) * 2, -1)  # (B, P, V)
    lp = torch.log_softmax(lq.unsqueeze(-2) + torch.randn(2, 3, 4, 200, generator=gen), -1)  # (B, P, m, V)
    cap = torch.rand(2, 3, 4, generator=gen, dtype=torch.float64) * 0.2  # (B, P, m)
    kwargs = dict(alpha=alpha, public_cap=torch.full((4,), 0.1, dtype=torch.float64))
    whole = mollify_checked(lp, lq, cap=cap, **kwargs)
    monkeypatch.setattr(divergence, "_SLICE_BYTES", 1)  # one position per slice
    sliced = mollify_checked(lp, lq, cap=cap, **kwargs)
    for name in ("lam", "divergence", "log_q", "ratios", "norm"):
        alone = torch.stack([torch.stack([getattr(mollify_checked(lp[b, p:p + 1], lq[b, p:p + 1], cap=cap[b, p:p + 1],
                                                                  **kwargs), name)[0] for p in range(3)])
                             for b in range(2)])
        # On accelerators nothing is sliced (the batch is one graph of fixed work).
        expected = alone if divergence._device.reads_are_free(cap) else getattr(whole, name)
        assert torch.equal(getattr(sliced, name), expected), name
    monkeypatch.setattr(divergence, "_SLICE_BYTES", 2 * 4 * 200 * 8)  # two positions per slice
    pairs = mollify_checked(lp, lq, cap=cap, **kwargs)
    assert bool((pairs.divergence <= cap).all()) and bool((sliced.divergence <= cap).all())
    assert torch.allclose(pairs.lam, whole.lam, atol=1e-5) and torch.allclose(sliced.lam, whole.lam, atol=1e-5)
