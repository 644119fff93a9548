"""Zero-concentrated DP: conversion to (epsilon, delta) and its inverse.

rho-zCDP means D_a(M(x) || M(x')) <= a rho for every order a > 1 (Bun and Steinke 2016, Def. 1.1).
It composes by adding rho (Bun and Steinke 2016, Lemma 2.3).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from scipy.optimize import brentq

from tokendp.accounting._checks import check_delta, check_nonnegative, check_positive
from tokendp.accounting._rounding import ceil_float, exact_sum_up
from tokendp.accounting.rdp import epsilon_sum, offset_terms


def zcdp_optimal_order(*, rho: float, delta: float) -> float:
    """The order a* > 1 minimising the conversion of :func:`zcdp_to_epsilon`.

    d/da [a rho + log((a-1)/a) - (log delta + log a)/(a-1)] = rho + (log delta + log a)/(a-1)^2,
    so a* solves rho (a-1)^2 + log a + log delta = 0: the left side rises from log delta < 0 at
    a = 1 to log a > 0 at a = 1 + sqrt(log(1/delta)/rho), giving a unique root (found by brentq).
    It is positive at a = 1/delta too, so the bracket is the smaller of the two: for a tiny rho
    the root is near 1/delta, far below the first bound, which brentq's tolerance would not resolve.
    The first bound is computed as sqrt(log(1/delta)) / sqrt(rho), finite for every rho > 0 (a
    subnormal rho included), and the second is left out where 1/delta passes the largest float.
    For a huge rho the left side at the bracket's end can round to 0 or below: the root is then
    within rounding of that end, which is returned (the conversion holds at every order).
    """
    rho = check_positive("rho", rho)
    log_delta = math.log(check_delta(delta))
    try:
        at_inverse_delta = math.expm1(-log_delta)  # a - 1 at a = 1/delta
    except OverflowError:
        at_inverse_delta = math.inf
    upper = min(math.sqrt(-log_delta) / math.sqrt(rho), at_inverse_delta)

    def slope(v: float) -> float:  # rho (a-1)^2 + log a + log delta at a = 1 + v
        return rho * v * v + math.log1p(v) + log_delta

    if not slope(upper) > 0:
        return 1.0 + upper
    return 1.0 + brentq(slope, 0.0, upper, xtol=1e-14 * upper, rtol=1e-15, maxiter=200)


def zcdp_to_epsilon(*, rho: float, delta: float) -> float:
    """Epsilon of a rho-zCDP mechanism at ``delta``, minimised over a continuous order.

    eps = min_{a>1} a rho + log((a-1)/a) - (log delta + log a)/(a-1)   (Canonne, Kamath, Steinke
    2020, Prop. 12 applied to RDP a rho; docs/privacy.md "Common ground", Conversions). rho = 0 gives 0
    (the output does not depend on the unit); a negative optimum is reported as 0 (sound:
    (eps, delta)-DP with eps < 0 implies (0, delta)-DP).

    The conversion holds at every order, so the value at the float order a* of
    :func:`zcdp_optimal_order`, rounded up (:func:`~tokendp.accounting.rdp.epsilon_sum`: the
    product a rho within U, the offset's terms within 10 U), is never below the exact minimum.
    """
    rho = check_nonnegative("rho", rho)
    delta = check_delta(delta)
    if rho == 0:
        return 0.0
    a = max(zcdp_optimal_order(rho=rho, delta=delta), math.nextafter(1.0, 2.0))  # 1 + u may round to 1
    return max(0.0, epsilon_sum([a * rho], offset_terms(a, delta)))


def epsilon_to_zcdp(*, epsilon: float, delta: float) -> float:
    """The largest rho whose :func:`zcdp_to_epsilon` is <= ``epsilon``.

    The map rho -> eps(rho) is increasing (a minimum of increasing functions of rho), so the
    inverse is found by brentq on a doubling bracket; the returned rho is checked feasible
    (never above the target), stepping down by a relative 1e-12 if rounding requires it.
    """
    epsilon = check_nonnegative("epsilon", epsilon)
    delta = check_delta(delta)
    if epsilon == 0:
        return 0.0
    high = max(epsilon, 1e-12)
    while zcdp_to_epsilon(rho=high, delta=delta) <= epsilon:
        high *= 2.0
    rho = brentq(lambda r: zcdp_to_epsilon(rho=r, delta=delta) - epsilon, 0.0, high, xtol=1e-15 * high, rtol=1e-15, maxiter=300)
    while rho > 0 and zcdp_to_epsilon(rho=rho, delta=delta) > epsilon:
        rho *= 1.0 - 1e-12
    return rho


def compose_zcdp(rhos: Sequence[float], counts: Sequence[int] | None = None) -> float:
    """rho of the composition of count_i mechanisms of rho_i-zCDP each: sum_i count_i rho_i (Bun
    and Steinke 2016, Lemma 2.3), in exact arithmetic rounded up to a float
    (:func:`~tokendp.accounting._rounding.exact_sum_up`). ``counts`` default to 1."""
    return exact_sum_up([check_nonnegative("rho", r) for r in rhos], counts)


def pure_dp_to_zcdp(*, epsilon: float) -> float:
    """epsilon-DP implies (epsilon^2 / 2)-zCDP (Bun and Steinke 2016, Prop. 1.4); exact, rounded up."""
    return ceil_float(Fraction(check_nonnegative("epsilon", epsilon)) ** 2 / 2)


def bounded_range_to_zcdp(*, eta: float) -> float:
    """eta-bounded-range (e.g. the exponential mechanism) implies (eta^2 / 8)-zCDP; exact, rounded up.

    Cesar and Rogers 2021, "Bounding, concentrating, and truncating: unifying privacy loss
    composition for data analytics", Lemma 3.2.
    """
    return ceil_float(Fraction(check_nonnegative("eta", eta)) ** 2 / 8)
