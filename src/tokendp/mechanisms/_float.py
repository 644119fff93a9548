"""Floating-point slack of the per-token mechanisms (docs/privacy.md "InvisibleInk, Amin, DP-Prompt and DP-Decoding").

Lemma. A step computes float64 log-weights lhat with |lhat_y - (l_y + c)| <= e for every token y,
where l is the exact mechanism's log-probability vector and c any per-row constant, and the
sampler (:mod:`tokendp.sampling`) draws exactly from W / sum W with W_y = exp(lhat_y - M)(1 + eta_y),
|eta_y| <= 2^-43. Then the released P satisfies |log P(y) - l_y| <= 2 e + s, s = log((1 + 2^-43) /
(1 - 2^-43)), so between neighbours every log-ratio moves by at most 4 e + 2 s <= 4 e + 2^-40:
a pure-DP bound eps becomes eps + 4 e + 2^-40, a bounded range R becomes R + 4 e + 2^-40.

Each mechanism makes room for that slack by shrinking its private parameter (the clip, the clip
width, the mixing weight) by a public amount, so the accounted bound holds unchanged.
"""

from __future__ import annotations

from tokendp.errors import InvalidParameterError

UNIT = 2.0**-53  # u, the unit roundoff of float64
LIBM = 2.0**-44  # assumed relative error of float64 exp and log (libm, Sleef and CUDA document 1-2 ulp)
SAMPLER_RELATIVE = 2.0**-43  # the sampler draws from weights within this factor of exp(l - M)
SAMPLER_SLACK = 2.0**-40  # >= 2 log((1 + 2^-43) / (1 - 2^-43))


def shrunk(name: str, value: float, slope: float, slack: float) -> float:
    """value - 2 slack / slope, for a bound that is linear (or steeper) in ``value`` with ``slope``.

    The exact bound at the result is below the bound at ``value`` by at least 2 slack minus the
    result's rounding (u value slope), hence by at least ``slack`` whenever slack >= u value slope,
    which every caller's slack includes. Refused when the room would take half of ``value``.
    """
    out = value - 2.0 * slack / slope
    if value > 0 and out < value / 2:
        raise InvalidParameterError(
            f"{name} {value:g} is too small for float64: its privacy loss per token is below the rounding slack "
            f"{slack:.3g} that the guarantee must absorb (docs/privacy.md \"InvisibleInk, Amin, DP-Prompt and DP-Decoding\")")
    return max(out, 0.0)
