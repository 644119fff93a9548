"""Exact (mpmath) references for the accountants: the conversion offset, the RDP and zCDP
conversions. Float inputs are taken as the exact rationals they are (``mpf(float)`` is exact)."""

from __future__ import annotations

import mpmath


def m(x: float) -> mpmath.mpf:
    return mpmath.mpf(float(x))


def offset(alpha: float, delta: float) -> mpmath.mpf:
    """log((a-1)/a) - (log delta + log a)/(a-1) (Canonne, Kamath, Steinke 2020, Prop. 12)."""
    a = m(alpha)
    return mpmath.log((a - 1) / a) - (mpmath.log(m(delta)) + mpmath.log(a)) / (a - 1)


def rdp_epsilon(r: mpmath.mpf, alpha: float, delta: float) -> mpmath.mpf:
    """The improved conversion of RDP r at order alpha: 0 when r = 0, never negative."""
    return mpmath.mpf(0) if r == 0 else max(mpmath.mpf(0), r + offset(alpha, delta))


def zcdp_epsilon(rho: mpmath.mpf, delta: float) -> mpmath.mpf:
    """min over a > 1 of a rho + offset(a), evaluated at the root of its derivative
    rho (a-1)^2 + log a + log delta found by bisection: a value >= the exact minimum, equal to it
    to the working precision."""
    if rho == 0:
        return mpmath.mpf(0)
    log_delta = mpmath.log(m(delta))
    lo, hi = mpmath.mpf(0), mpmath.sqrt(-log_delta / rho) + 1
    for _ in range(400):
        mid = (lo + hi) / 2
        if rho * mid**2 + mpmath.log1p(mid) + log_delta < 0:
            lo = mid
        else:
            hi = mid
    a = 1 + hi
    return max(mpmath.mpf(0), a * rho + mpmath.log((a - 1) / a) - (log_delta + mpmath.log(a)) / (a - 1))
