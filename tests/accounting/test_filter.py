"""The Rényi filter's accounting (docs/privacy.md, "DP-Fusion with a per-group Rényi filter")
against mpmath at 60 digits: charges and epsilons never below their exact values, budgets and
caps never above what their exact values allow, and all within about 1e-12 of exact.

Float inputs are taken as the exact rationals they are (``mpf(float)`` is exact)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import exact_privacy as ref

from tokendp import accounting as acc
from tokendp.errors import InvalidParameterError

DPS = 60


def _rho(divergence: float, groups: int, alpha: float) -> mpmath.mpf:
    """log(1 + (exp((alpha-1) d) - 1)/m)/(alpha-1), exactly (to 60 digits)."""
    a = ref.m(alpha)
    return mpmath.log1p(mpmath.expm1((a - 1) * ref.m(divergence)) / groups) / (a - 1)


def _cases(n: int, seed: int):
    """(divergence, m, alpha): divergences 1e-300 to 1e3, m 1 to 1000, alpha 1.0001 to 1024,
    the project's grid included."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        d = float(10.0 ** rng.uniform(-300, 3)) if i % 3 else float(10.0 ** rng.uniform(-6, 1))
        m = int(rng.choice([1, 2, 3, 6, 8, 64, 1000]))
        grid = [1.0001, 1.25, 1.5, 2.0, 3.5, 10.0, 64.0, 1024.0]
        alpha = float(rng.choice(grid)) if i % 2 else float(1 + 10.0 ** rng.uniform(-3, 2))
        yield d, m, alpha


def test_charge_is_never_below_the_exact_rho_and_close_to_it():
    with mpmath.workdps(DPS):
        for d, m, alpha in _cases(1500, 0):
            got = acc.dp_fusion_filter_charge(divergence=d, groups=m, alpha=alpha)
            exact = _rho(d, m, alpha)
            assert got >= exact, (d, m, alpha, got, exact)
            assert got <= exact * (1 + 1e-12) + 1e-300, (d, m, alpha, got, exact)
            assert got <= d


def test_charge_edges():
    assert acc.dp_fusion_filter_charge(divergence=0.0, groups=3, alpha=2.0) == 0.0
    assert acc.dp_fusion_filter_charge(divergence=math.inf, groups=3, alpha=2.0) == math.inf
    assert acc.dp_fusion_filter_charge(divergence=0.4, groups=1, alpha=3.5) >= 0.4  # m = 1: rho(d) = d
    with pytest.raises(InvalidParameterError, match="groups"):
        acc.dp_fusion_filter_charge(divergence=0.1, groups=0, alpha=2.0)
    with pytest.raises(InvalidParameterError, match="divergence"):
        acc.dp_fusion_filter_charge(divergence=-0.1, groups=1, alpha=2.0)


def test_cap_is_the_largest_divergence_whose_charge_fits():
    """charge(cap) <= r; the exact rho at the next float up exceeds r (up to 1e-12): nothing is left."""
    with mpmath.workdps(DPS):
        for r, m, alpha in _cases(600, 1):
            cap = acc.dp_fusion_filter_cap(remaining=r, groups=m, alpha=alpha)
            assert acc.dp_fusion_filter_charge(divergence=cap, groups=m, alpha=alpha) <= r
            assert _rho(cap, m, alpha) <= ref.m(r)
            assert _rho(math.nextafter(cap, math.inf) * (1 + 1e-11), m, alpha) > ref.m(r), (r, m, alpha, cap)
    assert acc.dp_fusion_filter_cap(remaining=0.0, groups=2, alpha=2.0) == 0.0


@pytest.mark.parametrize("alpha", [1.25, 2.0, 3.5, 10.0, 64.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-10])
def test_budget_meets_its_epsilon_exactly_and_the_certificate_is_rounded_up(alpha, delta):
    with mpmath.workdps(DPS):
        for epsilon in (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 100.0):
            offset = ref.offset(alpha, delta)
            if epsilon <= offset:
                with pytest.raises(InvalidParameterError, match="raise epsilon or delta"):
                    acc.dp_fusion_filter_budget(epsilon=epsilon, alpha=alpha, delta=delta)
                continue
            budget = acc.dp_fusion_filter_budget(epsilon=epsilon, alpha=alpha, delta=delta)
            certified = acc.dp_fusion_filter_epsilon(budget=budget, alpha=alpha, delta=delta)
            exact = ref.rdp_epsilon(ref.m(budget), alpha, delta)
            assert certified <= epsilon
            assert exact <= certified <= exact + 1e-12 * (abs(exact) + abs(offset))
            assert ref.m(epsilon) - exact <= 1e-12 * (epsilon + abs(offset))  # the largest budget, up to rounding


def test_budget_and_epsilon_edges():
    assert acc.dp_fusion_filter_budget(epsilon=0.0, alpha=2.0, delta=1e-5) == 0.0
    assert acc.dp_fusion_filter_epsilon(budget=0.0, alpha=2.0, delta=1e-5) == 0.0
    with pytest.raises(InvalidParameterError, match="epsilon"):
        acc.dp_fusion_filter_budget(epsilon=-1.0, alpha=2.0, delta=1e-5)
    with pytest.raises(InvalidParameterError, match="delta"):
        acc.dp_fusion_filter_budget(epsilon=8.0, alpha=2.0, delta=0.0)
    with pytest.raises(InvalidParameterError, match="alpha"):
        acc.dp_fusion_filter_epsilon(budget=1.0, alpha=1.0, delta=1e-5)


def test_the_certificate_does_not_depend_on_the_number_of_tokens():
    """Epsilon 8 at delta 1e-5 and alpha 3.5 is one budget for a 171-token letter and a
    1,000-token judgment; the fixed accounting's cap shrinks with T instead."""
    budget = acc.dp_fusion_filter_budget(epsilon=8.0, alpha=3.5, delta=1e-5)
    assert budget == pytest.approx(8.0 - acc.conversion_offset(3.5, 1e-5))
    assert acc.dp_fusion_filter_epsilon(budget=budget, alpha=3.5, delta=1e-5) <= 8.0


def test_the_weight_ceiling_rule():
    """L = min(1, sqrt(B / (4 alpha))): 1 for a zero budget (nothing mixes) and for large budgets,
    growing with B and shrinking with alpha; refused for invalid inputs."""
    assert acc.dp_fusion_filter_max_lam(budget=0.0, alpha=3.0) == 1.0
    assert acc.dp_fusion_filter_max_lam(budget=30.0, alpha=3.0) == 1.0
    assert acc.dp_fusion_filter_max_lam(budget=0.48, alpha=16.0) == pytest.approx(math.sqrt(0.0075))
    assert acc.dp_fusion_filter_max_lam(budget=1.0, alpha=8.0) < acc.dp_fusion_filter_max_lam(budget=2.0, alpha=8.0)
    assert acc.dp_fusion_filter_max_lam(budget=1.0, alpha=8.0) < acc.dp_fusion_filter_max_lam(budget=1.0, alpha=4.0)
    for kwargs in ({"budget": -1.0, "alpha": 3.0}, {"budget": 1.0, "alpha": 1.0}):
        with pytest.raises(InvalidParameterError):
            acc.dp_fusion_filter_max_lam(**kwargs)
