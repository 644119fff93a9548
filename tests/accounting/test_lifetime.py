"""The vault's lifetime filter arithmetic (tokendp.accounting.lifetime) against exact rationals
and mpmath: reservations never above what remains, spends never below what was spent."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import mpmath
import pytest

from tokendp.accounting import (dp_fusion_filter_alpha, dp_fusion_filter_epsilon, lifetime_alpha, lifetime_budget,
                                lifetime_reservation, lifetime_spent)
from tokendp.accounting.mechanisms import DP_FUSION_ORDERS
from tokendp.errors import InvalidParameterError


def _offset(alpha: float, delta: float) -> mpmath.mpf:
    with mpmath.workprec(200):
        a = mpmath.mpf(alpha)
        return mpmath.log((a - 1) / a) - (mpmath.log(mpmath.mpf(delta)) + mpmath.log(a)) / (a - 1)


@pytest.mark.parametrize("epsilon, delta", [(1, 1e-5), (4, 1e-5), (8, 1e-5), (20, 1e-6), (2, 1e-3)])
def test_the_order_is_the_smallest_whose_conversion_leaves_at_least_three_tenths_of_the_epsilon(epsilon, delta):
    alpha = lifetime_alpha(epsilon=epsilon, delta=delta)
    assert alpha == dp_fusion_filter_alpha(epsilon=epsilon, delta=delta)  # the filter's own rule
    assert _offset(alpha, delta) <= 0.7 * epsilon
    smaller = [a for a in DP_FUSION_ORDERS if a < alpha]
    assert all(_offset(a, delta) > 0.7 * epsilon - 1e-12 for a in smaller)
    budget = lifetime_budget(epsilon=epsilon, delta=delta, alpha=alpha)
    assert budget >= 0.3 * epsilon * (1 - 1e-12)
    assert dp_fusion_filter_epsilon(budget=budget, alpha=alpha, delta=delta) <= epsilon


def test_an_epsilon_too_small_for_every_order_is_refused():
    with pytest.raises(InvalidParameterError, match="no Renyi budget"):
        lifetime_alpha(epsilon=0.01, delta=1e-5)


def test_reservations_never_exceed_what_remains_exactly_and_spends_never_fall_below_what_was_spent():
    rng = random.Random(7)
    for _ in range(2000):
        budget = rng.uniform(0, 5)
        spent, outstanding = rng.uniform(0, budget), rng.uniform(0, budget) * rng.random()
        release = rng.uniform(0, 3)
        r = lifetime_reservation(budget=budget, spent=spent, outstanding=outstanding, release=release)
        room = Fraction(budget) - Fraction(spent) - Fraction(outstanding)
        assert 0 <= r <= release and Fraction(r) <= max(room, Fraction(0))
        assert r == release or room <= 0 or Fraction(math.nextafter(r, math.inf)) > room  # the largest such float
        left = r * rng.random()
        after = lifetime_spent(spent=spent, reserved=r, left=left)
        exact = Fraction(spent) + Fraction(r) - Fraction(left)
        assert Fraction(after) >= exact and Fraction(math.nextafter(after, -math.inf)) < exact


def test_a_release_cannot_leave_more_than_it_reserved():
    with pytest.raises(InvalidParameterError):
        lifetime_spent(spent=0.0, reserved=0.5, left=0.6)
