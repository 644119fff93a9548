"""DP-Fusion with a per-group Rényi filter: the budget, its certificate, the per-step charge
and its inverse (docs/privacy.md, "DP-Fusion with a per-group Rényi filter").

Adjacency and unit are DP-Fusion's (documents that differ only in group i's span tokens; one
privacy group). Each group i spends an RDP budget B_i at a fixed order alpha, fixed before
generation from (epsilon_i, delta, alpha) alone, so the certificate does not depend on the
number of tokens. Each step charges group i

    chi = rho(d) + A,   rho(d) = log(1 + (exp((alpha-1) d) - 1) / m) / (alpha - 1),

d a rigorous upper bound on the symmetric divergence of group i's component at the mixing
weight chosen (joint convexity of exp((a-1) D_a), as for the fixed accounting), A the release
allowance (added by the mechanism). The filter theorem (Feldman and Zrnic, "Individual Privacy
Accounting via a Rényi Filter", NeurIPS 2021, Thm. 3.1; a self-contained proof is in the docs)
makes the whole output (alpha, B_i)-RDP when the charges never sum past B_i on any path.

Every value is rounded in the safe direction (:mod:`tokendp.accounting._rounding`): charges
and epsilons up, budgets and caps down.
"""

from __future__ import annotations

import math
from fractions import Fraction

from tokendp.accounting._checks import check_count, check_delta, check_nonnegative, check_order
from tokendp.accounting._rounding import ceil_float
from tokendp.accounting.mechanisms import DP_FUSION_ORDERS, _mixture_cap, _mixture_rdp, _step_down_until
from tokendp.accounting.rdp import check_above_offset, conversion_offset, epsilon_sum, offset_terms
from tokendp.errors import InvalidParameterError

__all__ = ["FILTER_BUDGET_SHARE", "dp_fusion_filter_alpha", "dp_fusion_filter_budget", "dp_fusion_filter_cap",
           "dp_fusion_filter_charge", "dp_fusion_filter_epsilon", "dp_fusion_filter_max_lam", "dp_fusion_filter_pace"]

FILTER_BUDGET_SHARE = 0.3
"""The least share of epsilon that :func:`dp_fusion_filter_alpha` keeps as RDP budget B (the rest
pays the conversion to (epsilon, delta)); chosen on TAB's tuning half (docs/sanitize.md,
"Accounting: fixed or filter")."""

_STEPS_UP = 64
"""Ulps :func:`dp_fusion_filter_cap` may climb above its closed form while the charge still fits."""


def dp_fusion_filter_epsilon(*, budget: float, alpha: float, delta: float) -> float:
    """The certified epsilon of a group whose filter budget is ``budget`` = B at order ``alpha``.

    eps = B + log((alpha-1)/alpha) - (log delta + log alpha)/(alpha-1)   (Canonne, Kamath,
    Steinke 2020, Prop. 12; Balle et al. 2020, Thm. 21), the conversion of (alpha, B)-RDP;
    exactly 0 when B = 0 (the output then does not depend on the group); a negative value is
    reported as 0. Rounded up (:func:`~tokendp.accounting.rdp.epsilon_sum`).
    """
    budget = check_nonnegative("budget", budget)
    alpha = check_order(alpha)
    delta = check_delta(delta)
    if budget == 0:
        return 0.0
    return max(0.0, epsilon_sum([budget], offset_terms(alpha, delta)))


def dp_fusion_filter_alpha(*, epsilon: float, delta: float) -> float:
    """The filter's order for a target ``epsilon`` at ``delta``: the smallest order of
    :data:`~tokendp.accounting.mechanisms.DP_FUSION_ORDERS` whose conversion offset
    log((a-1)/a) - (log delta + log a)/(a-1) (rounded up) is at most (1 - FILTER_BUDGET_SHARE)
    epsilon, so that B >= 0.3 epsilon.

    The trade-off: a smaller order charges a token less for the same mixing weight (D_a grows
    with a, and the mixture's amplification log(1 + (e^((a-1) d) - 1)/m)/(a-1) is stronger at
    small a), a larger one loses less of epsilon to the conversion. The filter spends its budget
    on few tokens with large weights, where the first effect wins; the fixed accounting spreads
    T small charges, where the second does (:func:`~tokendp.fusion.choose_alpha`). Public
    parameters only. Refused when no order qualifies (epsilon too small for delta).
    """
    epsilon = check_nonnegative("epsilon", epsilon)
    delta = check_delta(delta)
    for alpha in DP_FUSION_ORDERS:
        if epsilon_sum([], offset_terms(alpha, delta)) <= (1 - FILTER_BUDGET_SHARE) * epsilon:
            return float(alpha)
    raise InvalidParameterError(f"epsilon {epsilon:g} at delta {delta:g} leaves no Renyi budget at any order up to "
                                f"{DP_FUSION_ORDERS[-1]:g}; raise epsilon or delta")


def dp_fusion_filter_budget(*, epsilon: float, alpha: float, delta: float) -> float:
    """The largest filter budget B whose :func:`dp_fusion_filter_epsilon` is <= ``epsilon``.

    B = epsilon - offset(alpha, delta) in closed form (the conversion of
    :func:`dp_fusion_filter_epsilon` inverted), then stepped down until the rounded-up
    certificate meets ``epsilon``: so the exact conversion of B is below ``epsilon`` too.
    epsilon = 0 gives B = 0 (the group is never read). Refused when epsilon is positive but at
    or below the conversion's offset, where only B = 0 meets it. From public parameters only.
    """
    epsilon = check_nonnegative("epsilon", epsilon)
    alpha = check_order(alpha)
    delta = check_delta(delta)
    if epsilon == 0:
        return 0.0
    check_above_offset(epsilon, alpha, delta)
    offset = conversion_offset(alpha, delta)
    return _step_down_until(
        lambda b: dp_fusion_filter_epsilon(budget=b, alpha=alpha, delta=delta) <= epsilon, epsilon - offset)


def dp_fusion_filter_charge(*, divergence: float, groups: int, alpha: float) -> float:
    """rho(d) = log(1 + (exp((alpha-1) d) - 1) / m) / (alpha - 1), rounded up: the RDP at order
    alpha that one step costs a group whose component moves within symmetric divergence d of
    the public distribution, m = ``groups`` components averaged (joint convexity of
    exp((a-1) D_a); docs/privacy.md, "DP-Fusion (document sanitization)", proof sketch).

    Rounded up: (alpha-1) d and 1/m exactly in rational arithmetic and rounded up, then the
    error bound of the fixed accounting's per-token value (19 U). rho(d) <= d (the average
    cannot move more than its component: log(1 + (e^x - 1)/m) <= x), so the result is at most d.
    """
    d = check_nonnegative("divergence", divergence) if not math.isinf(divergence) else math.inf
    alpha = check_order(alpha)
    m = check_count("groups", groups)
    if d == 0 or math.isinf(d):
        return d
    x = ceil_float((Fraction(alpha) - 1) * Fraction(d))
    return min(_mixture_rdp(alpha, x, ceil_float(Fraction(1, m))), d)


def dp_fusion_filter_cap(*, remaining: float, groups: int, alpha: float) -> float:
    """The largest divergence cap d whose :func:`dp_fusion_filter_charge` fits ``remaining``.

    The inverse of rho in closed form, rho^-1(r) = log(1 + m (exp((alpha-1) r) - 1)) / (alpha-1),
    then moved by ulps until charge(d) <= r holds and charge(next float) does not (or 64 ulps
    up). 0 when nothing remains. The mechanism's step computes the same on the device as a
    proposal and checks the charge it ends up with (docs/privacy.md, step 3 of the filter).
    """
    r = check_nonnegative("remaining", remaining)
    alpha = check_order(alpha)
    m = check_count("groups", groups)
    if r == 0:
        return 0.0

    def fits(d: float) -> bool:
        return dp_fusion_filter_charge(divergence=d, groups=m, alpha=alpha) <= r

    d = _step_down_until(fits, _mixture_cap(alpha, r, 1.0 / m))
    for _ in range(_STEPS_UP):
        above = math.nextafter(d, math.inf)
        if not fits(above):
            break
        d = above
    return d


def dp_fusion_filter_pace(*, budget: float, tokens: int, pace: float, groups: int, alpha: float) -> float:
    """The public pacing cap of a group: the largest divergence d one step may use, the one
    whose charge (:func:`dp_fusion_filter_charge`) fits ``pace`` * B / n, where B = ``budget``
    and n = ``tokens``, the tokens the group hides (public: one placeholder per hidden token).

    At pace 1, the group's budget covers each hidden token's worth of text once at the full
    cap; a smaller pace keeps room for the tokens after them (a name said again, a date
    computed from a hidden one), a larger one lets the first mentions spend more. From public
    parameters only (docs/privacy.md, "DP-Fusion with a per-group Rényi filter"); 0 when B = 0.
    """
    budget = check_nonnegative("budget", budget)
    tokens = check_count("tokens", tokens)
    pace = check_nonnegative("pace", pace)
    if budget == 0 or pace == 0:
        return 0.0
    return dp_fusion_filter_cap(remaining=pace * budget / tokens, groups=groups, alpha=alpha)


def dp_fusion_filter_max_lam(*, budget: float, alpha: float) -> float:
    """The largest mixing weight a step may give a group: L = min(1, sqrt(B / (4 alpha))), 1
    when B = 0 (the group never mixes then). A public rule of (B, alpha) alone.

    Why: for small weights D_alpha(lam P + (1-lam) Q || Q) ~ alpha lam^2 chi2(P||Q) / 2, while
    the expected log-likelihood a token gains is about lam chi2(P||Q). The gain per unit of
    budget is then about 2 / (alpha lam) whatever the token's chi2, so a budget is best spent at
    one weight on every token, not at one divergence (the fixed accounting's cap gives lam = 1 to
    the tokens that move little and a small weight to those that matter). sqrt(B / (4 alpha)) is
    the weight at which a token with chi2 = 8 would spend the whole budget; on TAB's tuning half
    it is within a hair of the best ceiling measured at every epsilon from 1 to 8
    (docs/sanitize.md, "Accounting: fixed or filter"). The pacing cap still bounds every step.
    """
    budget = check_nonnegative("budget", budget)
    alpha = check_order(alpha)
    return 1.0 if budget == 0 else min(1.0, math.sqrt(budget / (4.0 * alpha)))
