"""The stateful sparse-vector switch: one threshold per text, the cap of c, and a Monte Carlo check
of its pure-DP guarantee (Lyu, Su, Li 2017, Alg. 1) on adversarial neighbouring query sequences,
with broken variants that the same check must catch; the discrete Laplace noise against its pmf."""

from __future__ import annotations

import math

import pytest
import torch

from tokendp.accounting import PureDpEvent, sparse_vector_discrete_noise, sparse_vector_grid
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.mechanisms import SparseVectorSwitch
from tokendp.mechanisms.svt import discrete_laplace


def _switch(n, *, seed=0, c=3, epsilon=1.0, threshold=0.0, sensitivity=1.0):
    return SparseVectorSwitch(threshold=threshold, sensitivity=sensitivity, epsilon=epsilon, max_positives=c,
                              num_texts=n, generator=torch.Generator().manual_seed(seed))


def _mean_abs(scale: int) -> float:
    """E|Z| for Z ~ Lap_Z(t): 2q / (1 - q^2), q = exp(-1/t)."""
    q = math.exp(-1.0 / scale)
    return 2 * q / (1 - q * q)


def test_threshold_is_drawn_once_per_text_with_the_documented_scale():
    switch = _switch(200_000, c=4, epsilon=2.0, threshold=5.0)
    before = switch.noisy_threshold.clone()
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        switch.decide(torch.zeros(200_000), gen)
    assert torch.equal(switch.noisy_threshold, before)  # never re-noised, not after positives either
    grid, steps = sparse_vector_grid(sensitivity=1.0)
    assert (grid, steps) == (2.0**-8, 257) and (switch.grid, switch.steps) == (grid, steps)
    scale, _ = sparse_vector_discrete_noise(steps=steps, epsilon=2.0, max_positives=4)
    assert switch.threshold_scale == scale and before.dtype == torch.int64
    noise = (before - math.ceil(5.0 / grid)).double()  # grid steps
    assert noise.abs().mean().item() == pytest.approx(_mean_abs(scale), rel=0.02)
    assert noise.median().abs().item() < 0.02 * scale
    assert abs(torch.corrcoef(torch.stack((noise[1:], noise[:-1])))[0, 1].item()) < 0.01  # independent per text


def test_same_seed_same_decisions_and_docs_select_runs():
    stats = torch.linspace(-3, 3, 64)
    a, b = _switch(64, seed=5), _switch(64, seed=5)
    ga, gb = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    for _ in range(4):
        assert torch.equal(a.decide(stats, ga), b.decide(stats, gb))
    assert torch.equal(a.positives, b.positives)
    sub = _switch(5, c=2, threshold=-1e9)
    out = sub.decide(torch.zeros(2), torch.Generator(), docs=torch.tensor([1, 3]))
    assert out.tolist() == [True, True] and sub.positives.tolist() == [0, 1, 0, 1, 0]
    with pytest.raises(InvalidInputError):
        sub.decide(torch.zeros(3), torch.Generator(), docs=torch.tensor([1, 3]))


def test_cap_allows_exactly_c_positives_then_only_negatives():
    switch = _switch(1000, c=3, threshold=-1e9)  # every open run answers positive
    gen = torch.Generator().manual_seed(0)
    answers = torch.stack([switch.decide(torch.full((1000,), 1e9), gen) for _ in range(7)])  # (7, N)
    assert bool(answers[:3].all()) and not bool(answers[3:].any())
    assert switch.positives.tolist() == [3] * 1000
    assert switch.event() == PureDpEvent(1.0)
    with pytest.raises(InvalidParameterError):
        _switch(4, c=0)


# ------------------------------------------------------------------------ the privacy check
RUNS = 200_000


def _pattern_counts(switch, queries, *, redraw_threshold=None, seed=1):
    """Answer the fixed query sequence in all RUNS runs at once -> counts of each answer pattern.
    ``redraw_threshold``: T, to draw fresh threshold noise before every query (the removed
    per-step switch) instead of once."""
    gen = torch.Generator().manual_seed(seed)
    answers = []
    for q in queries:
        if redraw_threshold is not None:
            switch.noisy_threshold = math.ceil(redraw_threshold / switch.grid) + discrete_laplace(
                switch.threshold_scale, (RUNS,), gen)
        answers.append(switch.decide(torch.full((RUNS,), float(q), dtype=torch.float64), gen))
    bits = torch.stack(answers, 1).long()  # (RUNS, L)
    return torch.bincount((bits << torch.arange(len(queries))).sum(1), minlength=2 ** len(queries)).double()


def _worst_log_ratio(counts_a, counts_b, min_count=200):
    """Largest |log P_a(pattern)/P_b(pattern)| over well-sampled patterns, minus 4 standard errors."""
    ok = (counts_a >= min_count) & (counts_b >= min_count)
    log_ratio = (counts_a[ok] / counts_b[ok]).log().abs()
    se = (1 / counts_a[ok] + 1 / counts_b[ok]).sqrt()
    worst = int(torch.argmax(log_ratio))
    return log_ratio[worst].item(), 4 * se[worst].item()


# Neighbouring sequences: every query moves by exactly Delta = 1, some up and some down (the
# statistic is not monotone). AboveThreshold (c = 1) with the threshold near the queries nearly
# attains e^eps on "below x9, then above"; c = 3 mixes falls and rises around three positives.
CASES = {
    "c=1": dict(c=1, threshold=2.0, d=[0.0] * 9 + [1.0], d_prime=[1.0] * 9 + [0.0]),
    "c=3": dict(c=3, threshold=1.0, d=[0.0, 0.0, 0.0, 1.0, 1.0, 1.0], d_prime=[1.0, 1.0, 1.0, 0.0, 0.0, 0.0]),
}


def _ratio(case, *, broken=None):
    counts = []
    for seed, queries in ((1, case["d"]), (2, case["d_prime"])):
        switch = _switch(RUNS, seed=seed, c=case["c"], epsilon=1.0, threshold=case["threshold"])
        if broken == "no c in the query noise":
            switch.query_scale = math.ceil(switch.query_scale / case["c"])
        redraw = case["threshold"] if broken == "threshold per query" else None
        counts.append(_pattern_counts(switch, queries, redraw_threshold=redraw, seed=seed + 10))
    return _worst_log_ratio(*counts)


@pytest.mark.parametrize("name", sorted(CASES))
def test_monte_carlo_ratio_stays_below_exp_epsilon(name):
    worst, tolerance = _ratio(CASES[name])
    assert worst <= 1.0 + tolerance, f"log ratio {worst:.3f} exceeds epsilon 1 (+{tolerance:.3f})"
    if name == "c=1":
        assert worst > 0.8  # the case is close to tight, so the check has little slack to hide in


@pytest.mark.parametrize(("name", "broken"), [("c=3", "no c in the query noise"), ("c=1", "threshold per query")])
def test_the_same_check_catches_broken_switches(name, broken):
    worst, tolerance = _ratio(CASES[name], broken=broken)
    assert worst > 1.0 + tolerance, f"{broken}: log ratio {worst:.3f} should exceed epsilon 1"


@pytest.mark.parametrize("scale", [1, 3, 40])
def test_noise_is_exactly_discrete_laplace(scale):
    """Chi-square of 100,000 integer draws against the closed-form pmf (1-q)/(1+q) q^|z|, q = e^(-1/t)."""
    scipy_stats = pytest.importorskip("scipy.stats")
    z = discrete_laplace(scale, (100_000,), torch.Generator().manual_seed(scale))
    assert z.dtype == torch.int64
    q = math.exp(-1.0 / scale)
    edge = int(math.ceil(6 * scale))  # |z| > edge pooled into one cell per side
    values = torch.arange(-edge, edge + 1, dtype=torch.float64)
    pmf = (1 - q) / (1 + q) * q ** values.abs()
    tail = q ** (edge + 1) / (1 + q)  # P(z > edge) = P(z < -edge)
    counts = torch.bincount((z.clamp(-edge - 1, edge + 1) + edge + 1), minlength=2 * edge + 3).double()
    expected = torch.cat((torch.tensor([tail]), pmf, torch.tensor([tail]))) * z.numel()
    keep = expected >= 5  # cells with fewer expected draws are pooled into one

    def p_value(draws: torch.Tensor) -> float:
        counts = torch.bincount((draws.clamp(-edge - 1, edge + 1) + edge + 1), minlength=2 * edge + 3).double()
        observed, wanted = counts[keep], expected[keep]
        if not bool(keep.all()):
            observed = torch.cat((observed, counts[~keep].sum().unsqueeze(0)))
            wanted = torch.cat((wanted, expected[~keep].sum().unsqueeze(0)))
        assert abs(wanted.sum().item() - draws.numel()) < 1e-6 * draws.numel()
        return scipy_stats.chisquare(observed.numpy(), wanted.numpy()).pvalue

    assert p_value(z) > 1e-4
    if scale > 3:
        return
    # a continuous-Laplace stand-in rounded to integers has another pmf, and at small scales the test sees it
    u = torch.rand(100_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64) - 0.5
    assert p_value(torch.round(-scale * torch.sign(u) * torch.log1p(-2 * u.abs())).long()) < 1e-4


def test_statistics_and_thresholds_live_on_the_grid():
    """Integer queries ceil(s/g) (g a power of two), integer thresholds and noise: every compared
    value is an int64, and statistics Delta + g/4 apart are at most K = ceil(Delta/g) + 1 apart."""
    for delta in (1.0, 0.375, 2.0 / 3.0, 1e-7, 300.0):
        grid, steps = sparse_vector_grid(sensitivity=delta)
        assert math.frexp(grid)[0] == 0.5 and delta / 512 < grid <= delta / 256  # a power of two
        switch = SparseVectorSwitch(threshold=0.3, sensitivity=delta, epsilon=1.0, max_positives=2, num_texts=4,
                                    generator=torch.Generator().manual_seed(0))
        assert switch.noisy_threshold.dtype == torch.int64
        s = torch.rand(10_000, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3 * delta
        for shift in (delta + grid / 4, -(delta + grid / 4)):
            q, q2 = switch.to_grid(s), switch.to_grid(s + shift)
            assert q.dtype == torch.int64 and int((q - q2).abs().max()) <= steps
        assert torch.equal(switch.to_grid(s).double(), torch.ceil(s / grid))  # exact
    t1, t2 = sparse_vector_discrete_noise(steps=257, epsilon=1.0, max_positives=3)
    assert 257 / t1 + 2 * 3 * 257 / t2 <= 1.0  # eps1 + eps2 <= epsilon after rounding the scales up
