"""Rounding up: every epsilon, RDP or zCDP value the accountants report or charge is an upper
bound of its exact-arithmetic value, whatever order the float64 additions run in.

A reported epsilon such as T r + log((a-1)/a) - (log delta + log a)/(a-1) is a float64 sum whose
rounding may fall 1e-15 below the exact value, and the per-token values it is built from carry
their own rounding. Claiming epsilon 8 while the exact bound is 8 + 1e-15 is a (tiny) false
claim, and a ledger that compares such sums with a budget can admit a token the exact bound
refuses. So each value is computed as a sum of terms whose exact values are known to within a
stated relative error, and rounded up with a rigorous bound (docs/privacy.md, "Floating point",
"Rounding of reported epsilons"):

    U = 2^-53 (float64 unit roundoff); each term t_i is within ``units`` U |t_i| of the exact
    value v_i it stands for. A float64 sum s of n terms, added in ANY order, satisfies
    |s - sum t_i| <= gamma_(n-1) sum |t_i|, gamma_k = k U / (1 - k U) (Higham, "Accuracy and
    Stability of Numerical Algorithms", 2002, Lemma 3.1 and Sec. 4.2), so

        sum v_i <= s + (units U + gamma_n) sum |t_i|  =: s + E.

    The bound is returned as nextafter(fl(s + 2 E'), +inf), E' the computed E: fl(sum |t_i|) is
    at least (1 - gamma_n) of the exact sum of magnitudes and the products forming E' lose at most
    2U, so 2 E' >= E; and for any real x, nextafter(fl(x), +inf) >= x, since fl(x) is one of the
    two floats adjacent to x. The factor 2 also covers the second-order terms that the error
    counts below leave out ((1 + U)^k - 1 <= k U (1 + k U) for the k roundings of a term).

The error model of the terms (docs/privacy.md, "Floating point"): +, -, *, / and sqrt are exact
to a factor 1 +- U; exp, log, log1p, expm1, sinh and scipy's gammaln are within 4 ulp (8 U).
A function f that is non-decreasing in an input is bounded above by evaluating it at an upper
bound of that input, so inputs computed with rounding are first rounded up themselves.

For the reported values to be reproducible (a ledger and an accountant computing the same bound
bit for bit), the terms of each column are sorted and then added in that order: the result is a
function of the multiset of terms, whatever order the caller lists them in.

Sums of products of floats whose exact values are floats themselves (count * epsilon, count *
rho, epsilon^2 / 2) need no error term: :func:`exact_sum_up` computes them in rational arithmetic
and rounds up once, so a sum that is exactly representable is reported as it is.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

U = 2.0**-53
"""float64 unit roundoff."""

LIBM_UNITS = 8.0
"""exp, log, log1p, expm1, sinh, gammaln: within 4 ulp = 8 U of the exact value."""


def gamma(n: int) -> float:
    """gamma_n = n U / (1 - n U) (Higham 2002, Lemma 3.1), for n U < 1."""
    return n * U / (1.0 - n * U)


def upper_sum(terms: Sequence[float | np.ndarray], *, units: float = 0.0) -> float | np.ndarray:
    """An upper bound of sum_i v_i, the exact values that the float ``terms`` stand for.

    Each term t_i is within ``units`` U |t_i| of v_i (0: the terms are the exact values). Terms
    may be arrays (broadcast together; the bound is elementwise, one sum per element) and may be
    +inf (the bound is then +inf). A sum of terms that are all 0, or of none, is exactly 0. See
    the module docstring for the proof; the result does not depend on the order of ``terms``.
    """
    if len(terms) == 0:
        return 0.0
    arrays = np.broadcast_arrays(*[np.asarray(t, dtype=np.float64) for t in terms])
    stacked = np.stack(arrays)  # (n, ...)
    total = _sequential_sum(np.sort(stacked, axis=0))  # (...)
    magnitude = _sequential_sum(np.sort(np.abs(stacked), axis=0))  # (...)
    error = 2.0 * ((units * U + gamma(len(arrays))) * magnitude)
    with np.errstate(invalid="ignore"):
        bound = np.where(magnitude == 0, total, np.nextafter(total + error, np.inf))
    return float(bound) if bound.ndim == 0 else bound


def exact_sum_up(values: Sequence[float], counts: Sequence[int] | None = None) -> float:
    """The smallest float >= sum_i count_i values_i, computed in exact rational arithmetic (floats
    are rationals); ``counts`` default to 1. A sum whose exact value is a float is returned as is
    (three charges of 1.0 spend exactly 3.0), and no order of addition is involved. +inf if a
    value is +inf."""
    counts = [1] * len(values) if counts is None else counts
    if any(math.isinf(v) for v in values):
        return math.inf
    return ceil_float(sum((n * Fraction(v) for n, v in zip(counts, values)), Fraction(0)))


def ceil_float(value: Fraction) -> float:
    """The smallest float >= ``value``: float() of a Fraction is correctly rounded (an integer
    division), so it is that float or the one above; +inf above the largest float, and the most
    negative float below it (where float() overflows)."""
    try:
        nearest = float(value)
    except OverflowError:
        return math.inf if value > 0 else -sys.float_info.max
    return nearest if Fraction(nearest) >= value else math.nextafter(nearest, math.inf)


def up(value: float | np.ndarray, *, units: float) -> float | np.ndarray:
    """An upper bound of the exact value that ``value`` stands for, ``value`` being within
    ``units`` U of it (relatively): :func:`upper_sum` of one term."""
    return upper_sum([value], units=units)


def down(value: float, *, units: float) -> float:
    """A lower bound of the exact value that ``value`` stands for (relatively within ``units`` U)."""
    return -up(-value, units=units)


def _sequential_sum(rows: np.ndarray) -> np.ndarray:
    """rows[0] + rows[1] + ... in this order, elementwise  # (...)"""
    total = rows[0].copy()
    for row in rows[1:]:
        total = total + row
    return total
