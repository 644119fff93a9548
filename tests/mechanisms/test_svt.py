"""The stateful sparse-vector switch: one threshold per text, the cap of c, and a Monte Carlo check
of its pure-DP guarantee (Lyu, Su, Li 2017, Alg. 1) on adversarial neighbouring query sequences,
with broken variants that the same check must catch."""

from __future__ import annotations

import math

import pytest
import torch

from tokendp.accounting import PureDpEvent, sparse_vector_noise
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.mechanisms import SparseVectorSwitch
from tokendp.mechanisms.svt import laplace


def _switch(n, *, seed=0, c=3, epsilon=1.0, threshold=0.0, sensitivity=1.0):
    return SparseVectorSwitch(threshold=threshold, sensitivity=sensitivity, epsilon=epsilon, max_positives=c,
                              num_texts=n, generator=torch.Generator().manual_seed(seed))


def test_threshold_is_drawn_once_per_text_with_the_documented_scale():
    switch = _switch(200_000, c=4, epsilon=2.0, threshold=5.0)
    before = switch.noisy_threshold.clone()
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        switch.decide(torch.zeros(200_000), gen)
    assert torch.equal(switch.noisy_threshold, before)  # never re-noised, not after positives either
    scale, _ = sparse_vector_noise(sensitivity=1.0, epsilon=2.0, max_positives=4)
    assert switch.threshold_scale == scale
    noise = before - 5.0
    assert noise.abs().mean().item() == pytest.approx(scale, rel=0.02)  # E|Lap(b)| = b
    assert noise.median().abs().item() < 0.02 * scale
    assert noise.unique().numel() == 200_000  # one independent threshold per text


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
            switch.noisy_threshold = redraw_threshold + laplace((RUNS,), switch.threshold_scale, gen)
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
            switch.query_scale /= case["c"]
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


def test_laplace_helper_is_zero_median_with_mean_abs_scale():
    x = laplace((400_000,), 2.5, torch.Generator().manual_seed(3))
    assert x.dtype == torch.float64 and x.abs().mean().item() == pytest.approx(2.5, rel=0.01)
    assert (x > 0).double().mean().item() == pytest.approx(0.5, abs=0.005)
    assert math.isfinite(x.abs().max().item())
