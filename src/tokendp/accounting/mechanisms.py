"""Per-mechanism accountants: per-token bounds from public parameters, totals, calibration.

Each accountant states its adjacency, the unit it protects, the per-token bound, how tokens
compose and how the total converts to (epsilon, delta). ``max_tokens`` (T) is the number of new
tokens fixed before generation; every sampled token is charged and stopping early does not lower
epsilon. Proof sketches are in docs/privacy.md.

Every per-token value charged and every epsilon returned is rounded up: an upper bound of its
exact-arithmetic value under any order of float64 addition (:mod:`tokendp.accounting._rounding`).
The calibrations search the rounded-up values, so their results meet the target exactly or below.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
from scipy.optimize import brentq

from tokendp.accounting._checks import check_count, check_delta, check_nonnegative, check_order, check_positive, check_rate
from tokendp.accounting._rounding import LIBM_UNITS, U, ceil_float, down, exact_sum_up, up, upper_sum
from tokendp.accounting.rdp import (DEFAULT_ORDERS, check_above_offset, conversion_offset, epsilon_sum, grid_epsilon,
                                   offset_columns, offset_terms, pure_dp_to_rdp)
from tokendp.accounting.zcdp import compose_zcdp, epsilon_to_zcdp, pure_dp_to_zcdp, zcdp_to_epsilon
from tokendp.errors import InvalidParameterError

_LOG_SPACE_SWITCH = 30.0  # above this exponent, evaluate log(1 + (e^x - 1)/m) without expm1 overflow


def _step_down_until(feasible, value: float) -> float:
    """A float <= ``value`` for which ``feasible`` holds, 0 if none: steps down of one ulp at first
    (the start is a closed form that misses only by rounding, so the result is the largest such
    float or close to it), doubling after every failure, so that a start farther off still ends
    within about a hundred steps, and a target that no positive value meets within about 1,200."""
    step = U
    while value > 0 and not feasible(value):
        value = min(value * (1.0 - step), np.nextafter(value, 0.0))
        step = min(2.0 * step, 0.5)
    return value


# --- DP-Fusion -------------------------------------------------------------------------------


def _mixture_rdp(alpha: float, x: float, weight: float) -> float:
    """log(1 + w (e^x - 1)) / (alpha-1), x = (alpha-1) c: the RDP of a mixture whose component of
    weight w moves within a symmetric divergence cap c of the public distribution, by joint
    convexity of exp((a-1) D_a) (docs/privacy.md "DP-Fusion (document sanitization)").

    Rounded up (module ``_rounding``): ``x`` and ``weight`` are upper bounds of the exact values
    (the function grows with both; the callers round their rational inputs up exactly with
    ``ceil_float``). Then, for x <= 30, expm1 (8 U), the product (U), log1p (8 U, condition
    number <= 1) and the division (U) stay within 19 U; for x > 30 the value is
    x + log(w + (1 - w) e^-x), whose logarithm's argument is within 11 U (its log then within
    11 U absolute plus 8 U relative). Below x = 1e-100, where w (e^x - 1) may fall below the
    normal floats (and out of that error model), log(1 + y) <= y and e^x - 1 <= x (1 + x) give
    r <= w x (1 + x) / (alpha - 1), computed exactly and rounded up."""
    if x == 0 or weight == 0:
        return 0.0
    weight = min(weight, 1.0)  # an upper bound of a weight <= 1
    if x < 1e-100:
        r = ceil_float(Fraction(weight) * Fraction(x) * (1 + Fraction(x)) / (Fraction(alpha) - 1))
        return max(r, float(np.finfo(np.float64).tiny))
    if x <= _LOG_SPACE_SWITCH:
        log_f = up(math.log1p(math.expm1(x) * weight), units=18.0)
    else:
        tail = math.log(weight + (1.0 - weight) * math.exp(-x))
        log_f = upper_sum([x, tail, 12.0 * U], units=LIBM_UNITS)
    r = up(log_f / (alpha - 1.0), units=2.0)  # alpha - 1 within U (exact below 2^53), the division within U
    return max(r, float(np.finfo(np.float64).tiny))  # a positive cap never rounds to "no loss"


def _mixture_cap(alpha: float, rdp: float, weight: float) -> float:
    """The cap c with :func:`_mixture_rdp` (alpha, c, weight) = rdp (before the feasibility check)."""
    y = (alpha - 1.0) * rdp
    if y <= _LOG_SPACE_SWITCH:
        return math.log1p(math.expm1(y) / weight) / (alpha - 1.0)
    return (y - math.log(weight) + math.log1p(-(1.0 - weight) * math.exp(-y))) / (alpha - 1.0)


def dp_fusion_rdp_per_token(*, alpha: float, beta: float, groups: int) -> float:
    """RDP at order ``alpha`` charged to one privacy group per generated token (DP-Fusion).

    Adjacency: documents differing only in the tokens of group i's spans (span positions,
    lengths and group labels are public); on the neighbour, group i's mixed distribution equals
    the public one. Unit: one privacy group. Per token, with cap c = alpha * beta on the
    symmetric divergence of each group's mixture to the public distribution and ``groups`` = m
    groups averaged, joint convexity of exp((a-1) D_a) gives (proof: docs/privacy.md "DP-Fusion (document sanitization)")

        r = log(1 + (exp((alpha-1) c) - 1) / m) / (alpha - 1),      (r = c when m = 1).

    Composition: T tokens give T r at order alpha (Mironov 2017, Prop. 1). This bound replaces
    the paper's 4 beta per token and does not depend on realised divergences.
    """
    alpha = check_order(alpha)
    beta = check_nonnegative("beta", beta)
    m = check_count("groups", groups)
    # x = (alpha-1) alpha beta exactly, rounded up: also above (alpha-1) fl(alpha beta), the cap the mechanism enforces
    x = ceil_float((Fraction(alpha) - 1) * Fraction(alpha) * Fraction(beta))
    return _mixture_rdp(alpha, x, ceil_float(Fraction(1, m)))


def dp_fusion_epsilon(*, alpha: float, beta: float, groups: int, max_tokens: int, delta: float) -> float:
    """Epsilon per group after ``max_tokens`` tokens of DP-Fusion.

    eps = T r + log((alpha-1)/alpha) - (log delta + log alpha)/(alpha-1)   (Canonne, Kamath,
    Steinke 2020, Prop. 12), r from :func:`dp_fusion_rdp_per_token`; exactly 0 when T r = 0
    (the output then does not depend on the group); a negative value is reported as 0. Rounded
    up (:func:`~tokendp.accounting.rdp.epsilon_sum`), as a Ledger charged T tokens computes it.
    """
    r = dp_fusion_rdp_per_token(alpha=alpha, beta=beta, groups=groups)
    total = check_count("max_tokens", max_tokens) * r
    delta = check_delta(delta)
    if total == 0:
        return 0.0
    return max(0.0, epsilon_sum([total], offset_terms(float(alpha), delta)))


def dp_fusion_beta(*, epsilon: float, alpha: float, groups: int, max_tokens: int, delta: float) -> float:
    """Largest beta whose :func:`dp_fusion_epsilon` is <= ``epsilon`` (calibration).

    Inverts the bound in closed form: r = (eps - offset)/T, then
    alpha beta = log(1 + m (exp((alpha-1) r) - 1)) / (alpha-1). The result is checked feasible.
    Raises InvalidParameterError when epsilon is at or below the conversion's offset, where only
    beta = 0 (no use of the private text) meets the target.
    """
    epsilon = check_positive("epsilon", epsilon)
    alpha = check_order(alpha)
    m = check_count("groups", groups)
    tokens = check_count("max_tokens", max_tokens)
    delta = check_delta(delta)
    check_above_offset(epsilon, alpha, delta)  # the offset rounded up: what any beta > 0 costs at least
    offset = conversion_offset(alpha, delta)
    cap = _mixture_cap(alpha, (epsilon - offset) / tokens, 1.0 / m)
    return _step_down_until(
        lambda b: dp_fusion_epsilon(alpha=alpha, beta=b, groups=m, max_tokens=tokens, delta=delta) <= epsilon,
        cap / alpha,
    )


DP_FUSION_ORDERS = (1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 24.0, 32.0, 64.0)
"""The Renyi orders :func:`dp_fusion_alpha` chooses from."""


def dp_fusion_alpha(targets: Sequence[tuple[float, int, int]], *, delta: float,
                    orders: Sequence[float] = DP_FUSION_ORDERS) -> float:
    """The Renyi order among ``orders`` that allows the largest beta for the tightest of ``targets``.

    ``targets`` holds (epsilon, m, T) per group and document. For small mixing weights,
    D_alpha(lambda P + (1-lambda) Q || Q) ~ alpha lambda^2 chi2(P||Q) / 2, so the cap
    alpha * beta admits lambda ~ sqrt(2 beta / chi2): the best order is the one with the
    largest calibrated beta (:func:`dp_fusion_beta`), a choice made from public parameters
    only. Orders whose conversion cost alone exceeds a target are skipped; none left is an error.
    """
    best, best_alpha = -1.0, None
    for a in orders:
        try:
            beta = min(dp_fusion_beta(epsilon=e, alpha=a, groups=m, max_tokens=t, delta=delta) for e, m, t in targets)
        except InvalidParameterError:
            continue
        if beta > best:
            best, best_alpha = beta, float(a)
    if best_alpha is None:
        raise InvalidParameterError(
            f"no Renyi order in {orders[0]}..{orders[-1]} reaches epsilon "
            f"{min(e for e, _, _ in targets):g} at delta {delta:g}; raise epsilon or delta, or lower max_new_tokens")
    return best_alpha


# --- PMixED ------------------------------------------------------------------------------------


def pmixed_sampled_weight(*, ensemble_size: int, sample_rate: float) -> float:
    """w = sum over subsets S that contain a given member of Pr(S) / |S| = (1 - (1 - q)^N) / N,
    for N members each sampled independently with probability q (Poisson): q E[1 / (1 + Bin(N-1, q))].

    Rounded up (module ``_rounding``), since the bound grows with w: 1 - e^v falls as v rises,
    so v = N log1p(-q) (within 9 U) is rounded down first; -expm1 and the division add 9 U."""
    n = check_count("ensemble_size", ensemble_size)
    q = check_rate("sample_rate", sample_rate)
    if q == 1:
        return ceil_float(Fraction(1, n))
    v = down(n * math.log1p(-q), units=LIBM_UNITS + 1.0)
    return up(-math.expm1(v) / n, units=LIBM_UNITS + 1.0)


def pmixed_rdp_per_token(*, alpha: float, beta: float, ensemble_size: int, sample_rate: float) -> float:
    """RDP at order ``alpha`` charged to one shard per predicted token (PMixED, sound analysis).

    Adjacency: two ensembles of N members that differ in one member, which on the neighbour is
    the public model (its shard's data removed: a LoRA adapter trained on nothing is the base
    model); N is public. Unit: one shard (everything in it, e.g. all records of one user with
    ``--group-by``). Mechanism per token: each member joins S independently with probability
    q; each member's distribution is mixed toward the public one within a symmetric divergence
    cap beta (lambda from the member and the public distribution only, never from S); the
    output is the average over S (the public distribution when S is empty). Per token, joint
    convexity of exp((a-1) D_a) over the subsets S and, inside each S containing the member,
    over its |S| components (docs/privacy.md "PMixED") gives

        r = log(1 + w (exp((alpha-1) beta) - 1)) / (alpha - 1),   w = (1 - (1-q)^N) / N,

    with w from :func:`pmixed_sampled_weight` (q = 1: DP-Fusion's bound with m = N groups).
    The published bound (Flemings et al. 2024, Thm. 5.1) does not hold (docs/privacy.md).
    Composition: T tokens give T r at order alpha.
    """
    alpha = check_order(alpha)
    beta = check_nonnegative("beta", beta)
    x = ceil_float((Fraction(alpha) - 1) * Fraction(beta))
    return _mixture_rdp(alpha, x, pmixed_sampled_weight(ensemble_size=ensemble_size, sample_rate=sample_rate))


def pmixed_epsilon(*, alpha: float, beta: float, ensemble_size: int, sample_rate: float, max_tokens: int, delta: float) -> float:
    """Epsilon per shard after ``max_tokens`` tokens of PMixED: T r + the RDP conversion offset
    (Canonne, Kamath, Steinke 2020, Prop. 12); exactly 0 when T r = 0; rounded up."""
    r = pmixed_rdp_per_token(alpha=alpha, beta=beta, ensemble_size=ensemble_size, sample_rate=sample_rate)
    total = check_count("max_tokens", max_tokens) * r
    delta = check_delta(delta)
    if total == 0:
        return 0.0
    return max(0.0, epsilon_sum([total], offset_terms(float(alpha), delta)))


def pmixed_beta(*, epsilon: float, alpha: float, ensemble_size: int, sample_rate: float, max_tokens: int, delta: float) -> float:
    """Largest per-member cap beta whose :func:`pmixed_epsilon` is <= ``epsilon`` (calibration),
    in closed form (then checked feasible); refused when epsilon is at or below the conversion offset."""
    epsilon = check_positive("epsilon", epsilon)
    alpha = check_order(alpha)
    tokens = check_count("max_tokens", max_tokens)
    delta = check_delta(delta)
    weight = pmixed_sampled_weight(ensemble_size=ensemble_size, sample_rate=sample_rate)
    if weight == 0:
        raise InvalidParameterError("the sample rate is 0: no member is ever read, so no epsilon calibrates beta; "
                                    "raise the sample rate")
    check_above_offset(epsilon, alpha, delta)
    offset = conversion_offset(alpha, delta)
    return _step_down_until(
        lambda b: pmixed_epsilon(alpha=alpha, beta=b, ensemble_size=ensemble_size, sample_rate=sample_rate,
                                 max_tokens=tokens, delta=delta) <= epsilon,
        _mixture_cap(alpha, (epsilon - offset) / tokens, weight),
    )


PMIXED_ORDERS = (1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0, 48.0, 64.0)
"""The Renyi orders :func:`pmixed_alpha` chooses from."""


def pmixed_alpha(*, epsilon: float, ensemble_size: int, sample_rate: float, max_tokens: int, delta: float,
                 orders: tuple[float, ...] = PMIXED_ORDERS) -> float:
    """The Renyi order among ``orders`` that lets each member move farthest from the public
    model at ``epsilon``: the one maximising beta(alpha) / alpha, beta(alpha) = :func:`pmixed_beta`.

    Why that ratio: for a small mixing weight lam both directions of the cap expand as
    D_alpha(P_lam || Q) ~ D_alpha(Q || P_lam) ~ (alpha/2) lam^2 chi2(P || Q) (the second-order
    term of the Renyi divergence of a mixture), so the largest feasible lam is about
    sqrt(2 beta / (alpha chi2)), larger when beta / alpha is. The choice depends on public
    parameters only. Orders whose conversion cost exceeds ``epsilon`` are skipped (at delta 1e-5,
    epsilon 1 needs alpha of about 10 or more); none left is an error.
    """
    best, best_ratio = None, -1.0
    for alpha in orders:
        try:
            beta = pmixed_beta(epsilon=epsilon, alpha=alpha, ensemble_size=ensemble_size, sample_rate=sample_rate,
                               max_tokens=max_tokens, delta=delta)
        except InvalidParameterError:
            continue  # epsilon below this order's conversion cost
        if beta / alpha > best_ratio:
            best, best_ratio = float(alpha), beta / alpha
    if best is None:
        raise InvalidParameterError(f"epsilon {epsilon:g} is below the conversion cost at every order up to "
                                    f"{max(orders):g} at delta={delta:g}: raise epsilon or delta")
    return best


# --- InvisibleInk ----------------------------------------------------------------------------


def invisibleink_rho_per_token(*, clip: float, batch_size: int, temperature: float) -> float:
    """zCDP per token for one reference in InvisibleInk: rho_tok = C^2 / (2 B^2 tau^2).

    Adjacency: replace-by-null on one of the B references (its clipped logit difference becomes
    0). DClip averages phi_pub + clip(phi_i - phi_pub, -C, C) over B references, so each score
    moves by at most C/B; sampling at temperature tau is an exponential mechanism with
    (2C/(B tau))-bounded range, hence (C/(B tau))^2 / 2-zCDP (Cesar and Rogers 2021, Lemma 3.2;
    InvisibleInk, Vinod et al. 2025, Thm. 1). Top-k+ uses public logits only and costs nothing.
    Computed in exact arithmetic and rounded up once.
    """
    clip = check_nonnegative("clip", clip)
    b = check_count("batch_size", batch_size)
    tau = check_positive("temperature", temperature)
    return ceil_float((2 * Fraction(clip) / (b * Fraction(tau))) ** 2 / 8)  # exact, rounded up once


def invisibleink_epsilon(*, clip: float, batch_size: int, temperature: float, max_tokens: int, delta: float) -> float:
    """Epsilon per reference after T tokens: rho = T C^2/(2 B^2 tau^2), exact zCDP conversion;
    rho composed as a Ledger charged T tokens composes it (:func:`compose_zcdp`), rounded up."""
    rho_tok = invisibleink_rho_per_token(clip=clip, batch_size=batch_size, temperature=temperature)
    return zcdp_to_epsilon(rho=compose_zcdp([rho_tok], [check_count("max_tokens", max_tokens)]), delta=delta)


def invisibleink_clip(*, epsilon: float, delta: float, batch_size: int, temperature: float, max_tokens: int) -> float:
    """Largest clip C meeting ``epsilon``: C = B tau sqrt(2 rho* / T), rho* from the zCDP inverse.

    The result is checked feasible: T * rho_tok(C) <= rho* and the epsilon does not exceed the target.
    """
    rho_star = epsilon_to_zcdp(epsilon=check_positive("epsilon", epsilon), delta=delta)
    b = check_count("batch_size", batch_size)
    tau = check_positive("temperature", temperature)
    tokens = check_count("max_tokens", max_tokens)

    def feasible(c: float) -> bool:
        rho = compose_zcdp([invisibleink_rho_per_token(clip=c, batch_size=b, temperature=tau)], [tokens])
        return rho <= rho_star and zcdp_to_epsilon(rho=rho, delta=delta) <= epsilon

    if rho_star == 0.0:  # only C = 0 meets a budget this small (and B tau * 0 would be inf * 0 = nan past float64)
        return 0.0
    return _step_down_until(feasible, min(b * tau * math.sqrt(2.0 * rho_star / tokens), sys.float_info.max))


# --- Amin et al. 2024 ------------------------------------------------------------------------


def amin_rho_per_token(*, clip: float, batch_size: int, temperature: float) -> float:
    """zCDP per token for one reference in Amin et al. 2024 (clipped full logits, averaged).

    Each reference's logits are clipped to [-C, C] and averaged over B references; the token is
    sampled from softmax(average / tau). Adjacency: replace one reference (by any other text or
    by a null reference whose clipped logits also lie in [-C, C]). Each averaged logit then moves
    by at most 2C/B, so sampling is (4C/(B tau))-bounded range, i.e. rho_tok = 2 C^2/(B^2 tau^2)
    (Cesar and Rogers 2021, Lemma 3.2) -- four times InvisibleInk's rho at equal C, since the
    clipped value spans 2C instead of a difference bounded by C. Exact, rounded up once.
    """
    clip = check_nonnegative("clip", clip)
    b = check_count("batch_size", batch_size)
    tau = check_positive("temperature", temperature)
    return ceil_float((4 * Fraction(clip) / (b * Fraction(tau))) ** 2 / 8)  # exact, rounded up once


def amin_epsilon(*, clip: float, batch_size: int, temperature: float, max_tokens: int, delta: float) -> float:
    """Epsilon per reference after T private tokens of Amin et al. (no switch): rho = T rho_tok
    (:func:`compose_zcdp`, rounded up)."""
    rho_tok = amin_rho_per_token(clip=clip, batch_size=batch_size, temperature=temperature)
    return zcdp_to_epsilon(rho=compose_zcdp([rho_tok], [check_count("max_tokens", max_tokens)]), delta=delta)


def amin_clip(*, epsilon: float, delta: float, batch_size: int, temperature: float, max_tokens: int) -> float:
    """Largest clip C whose T-token :func:`amin_epsilon` meets ``epsilon`` (no switch).

    rho_tok = 2 C^2/(B^2 tau^2) is InvisibleInk's C'^2/(2 B^2 tau^2) at C' = 2C, so C is half of
    :func:`invisibleink_clip`; both per-token rhos are then bit-identical (both are computed in
    exact arithmetic, and 4 (C'/2) = 2C' exactly), so a ledger admits exactly T tokens for both.
    """
    return invisibleink_clip(epsilon=epsilon, delta=delta, batch_size=batch_size, temperature=temperature, max_tokens=max_tokens) / 2.0


# --- The sparse vector technique and Amin et al.'s switch to the public model ---------------


def sparse_vector_noise(
    *, sensitivity: float, epsilon: float, max_positives: int, threshold_share: float | None = None
) -> tuple[float, float]:
    """Laplace scales (threshold, query) of the sparse vector technique with at most c positives.

    Lyu, Su and Li 2017, "Understanding the Sparse Vector Technique for Differential Privacy"
    (PVLDB 10(6)), Alg. 1 (and its generalisation, Alg. 7): the noisy threshold T + Lap(Delta/eps1)
    is drawn ONCE; query i is answered "above" (positive) iff q_i + Lap(2 c Delta/eps2) >= the
    noisy threshold, with fresh query noise each time; the run stops after c positive answers. For
    queries of sensitivity Delta (not necessarily monotone) the whole interaction is
    (eps1 + eps2)-DP. (Monotone queries would allow c Delta/eps2; the threshold is not re-noised
    after a positive answer -- that is Dwork and Roth's variant, with other scales.)

    ``threshold_share`` = eps1/epsilon; by default the split eps1 : eps2 = 1 : (2c)^(2/3), which
    minimises the variance 2 (Delta/eps1)^2 + 2 (2 c Delta/eps2)^2 of the difference of the two
    noises (Lyu et al., Sec. 4.2).
    """
    delta_q = check_nonnegative("sensitivity", sensitivity)
    total = check_positive("epsilon", epsilon)
    c = check_count("max_positives", max_positives)
    share = _svt_share(c, threshold_share)
    return delta_q / (share * total), 2.0 * c * delta_q / ((1.0 - share) * total)


def _svt_share(c: int, threshold_share: float | None) -> float:
    """eps1 / epsilon: the given share, or the variance-optimal 1 / (1 + (2c)^(2/3))."""
    if threshold_share is None:
        return 1.0 / (1.0 + (2.0 * c) ** (2.0 / 3.0))
    share = check_rate("threshold_share", threshold_share)
    if share in (0.0, 1.0):
        raise InvalidParameterError("threshold_share must lie strictly between 0 and 1 (or None for the variance-optimal split)")
    return share


SVT_GRID_STEPS = 256  # the grid step g is the largest power of two <= Delta / 256


def sparse_vector_grid(*, sensitivity: float) -> tuple[float, int]:
    """Grid (g, K) of the discrete sparse vector technique: statistics become the integers ceil(s/g).

    g = 2^floor(log2(Delta / 256)) is a power of two (1 when Delta = 0), so s/g is exact in
    floating point and q(s) = ceil(s/g) is computed exactly. For statistics whose *computed*
    values move by at most Delta + g/2 between neighbours, |q(s) - q(s')| <= ceil((Delta + g/2)/g)
    <= ceil(Delta/g) + 1 = K (ceil(x) - ceil(x') <= ceil(x - x')), so the integer queries have
    sensitivity K, i.e. at most Delta + 2g <= Delta (1 + 1/128) in the statistic's units.
    """
    delta_q = check_nonnegative("sensitivity", sensitivity)
    if delta_q == 0.0:
        return 1.0, 1
    grid = 2.0 ** math.floor(math.log2(delta_q / SVT_GRID_STEPS))
    while grid > delta_q / SVT_GRID_STEPS:  # log2 may round up at a power of two
        grid /= 2.0
    return grid, math.ceil(delta_q / grid) + 1


def sparse_vector_discrete_noise(
    *, steps: int, epsilon: float, max_positives: int, threshold_share: float | None = None
) -> tuple[int, int]:
    """Integer scales (t1, t2) of the discrete Laplace noise of the sparse vector technique, in grid
    steps, for integer queries of sensitivity K = ``steps`` (:func:`sparse_vector_grid`).

    Lyu, Su and Li 2017, Alg. 1 with Lap_Z(t) (pmf proportional to exp(-|z|/t) on the integers) in
    place of the Laplace: threshold noise Lap_Z(t1), t1 = ceil(K/eps1); query noise Lap_Z(t2),
    t2 = ceil(2 c K/eps2), with eps1 = share * epsilon and eps2 = epsilon - eps1 in exact rational
    arithmetic, so K/t1 + 2 c K/t2 <= epsilon exactly. The proof of docs/privacy.md holds
    verbatim on the integers: the shift z -> z + K is a bijection of Z, p(z) <= e^(K/t1) p(z + K),
    and raising a Lap_Z(t2) tail's threshold by d <= 2K lowers it by at most e^(d/t2) <= e^(eps2/c).
    """
    k = check_count("steps", steps)
    total = Fraction(check_positive("epsilon", epsilon))
    c = check_count("max_positives", max_positives)
    share = Fraction(_svt_share(c, threshold_share))
    eps1, eps2 = share * total, (1 - share) * total
    return math.ceil(k / eps1), math.ceil(2 * c * k / eps2)


def amin_switch_sensitivity(*, clip: float, batch_size: int) -> float:
    """Sensitivity of the switch statistic s = max_y |zbar_y - clip(z_pub)_y|: 2C/B.

    zbar is the average of the B references' centred logits clipped to [-C, C]; replacing one
    reference moves every coordinate of zbar by at most 2C/B, and x -> max_y |x_y - c_y| is
    1-Lipschitz in the sup norm, so |s - s'| <= 2C/B whatever the prefix (the public row and
    the released tokens are the same on both sides).
    """
    return 2.0 * check_nonnegative("clip", clip) / check_count("batch_size", batch_size)


def amin_switch_noise(
    *, svt_epsilon: float, max_private_tokens: int, clip: float, batch_size: int, threshold_share: float | None = None
) -> tuple[float, float]:
    """Laplace scales (threshold, query) of Amin et al.'s switch: :func:`sparse_vector_noise` with
    Delta = :func:`amin_switch_sensitivity` = 2C/B and c = ``max_private_tokens``."""
    return sparse_vector_noise(
        sensitivity=amin_switch_sensitivity(clip=clip, batch_size=batch_size),
        epsilon=check_positive("svt_epsilon", svt_epsilon),
        max_positives=check_count("max_private_tokens", max_private_tokens),
        threshold_share=threshold_share,
    )


def amin_switch_discrete_noise(
    *, svt_epsilon: float, max_private_tokens: int, clip: float, batch_size: int, threshold_share: float | None = None
) -> tuple[float, int, int]:
    """The noise the switch actually draws: (g, t1, t2), grid step g (:func:`sparse_vector_grid` of
    Delta = 2C/B) and the integer discrete Laplace scales in grid steps
    (:func:`sparse_vector_discrete_noise`); in the statistic's units the scales are g t1 and g t2,
    slightly above :func:`amin_switch_noise`'s continuous ones."""
    grid, steps = sparse_vector_grid(sensitivity=amin_switch_sensitivity(clip=clip, batch_size=batch_size))
    t1, t2 = sparse_vector_discrete_noise(steps=steps, epsilon=check_positive("svt_epsilon", svt_epsilon),
                                          max_positives=check_count("max_private_tokens", max_private_tokens),
                                          threshold_share=threshold_share)
    return grid, t1, t2


def _switch_rho(svt: float, c: int, rho_tok: float) -> float:
    """The Ledger's zCDP sum for one PureDpEvent(svt) and c ZcdpEvent(rho_tok): the same terms."""
    return compose_zcdp([pure_dp_to_zcdp(epsilon=svt), rho_tok], [1, c])


def _switch_grid_epsilon(svt: float, c: int, rho_tok: float, delta: float) -> float:
    """The Ledger's grid bound for the same charges: the same terms per order, rounded up alike."""
    orders = np.asarray(DEFAULT_ORDERS, dtype=np.float64)  # (K,)
    terms = [pure_dp_to_rdp(epsilon=svt, orders=orders), c * (orders * rho_tok)]  # 2 x (K,)
    return grid_epsilon(terms, offset_columns(orders, delta))[0]


def amin_switch_epsilon(
    *, clip: float, batch_size: int, temperature: float, max_private_tokens: int, svt_epsilon: float, delta: float
) -> float:
    """Epsilon per reference of Amin et al. with the sparse-vector switch to the public model.

    One SVT run per text (:func:`sparse_vector_noise`, Delta = 2C/B): a positive answer (the
    noisy statistic at or above the noisy threshold) samples a private token, charged
    rho_tok = :func:`amin_rho_per_token`; a negative one samples the public model, which reads
    no reference; after c = ``max_private_tokens`` private tokens every further token is public.
    The SVT is svt_epsilon-DP as an interactive mechanism, hence (Steinke 2024, Thm. 4) RDP
    r_svt(a) <= min(svt_epsilon, a svt_epsilon^2/2) at every order; the private tokens are at most
    c adaptive rho_tok-zCDP releases, i.e. one interactive (c rho_tok)-zCDP mechanism. They run
    interleaved, and RDP of a fixed order composes concurrently as it does sequentially (Lyu 2022,
    "Composition theorems for interactive differential privacy"; Vadhan and Zhang 2023, STOC), so

        D_a <= r_svt(a) + a c rho_tok   for every a > 1.

    Two conversions of this curve, the smaller reported (both sound; the Ledger computes the same
    two for one PureDpEvent(svt_epsilon) and c ZcdpEvent(rho_tok) charges): zCDP with
    rho = svt_epsilon^2/2 + c rho_tok, converted exactly (:func:`zcdp_to_epsilon`), and the tight
    curve on ``DEFAULT_ORDERS`` (:func:`rdp_to_epsilon`). The bound depends on c, not T, and on
    public parameters only. A direct proof of the weaker D_a <= svt_epsilon + a c rho_tok is in
    docs/privacy.md.
    """
    svt = check_positive("svt_epsilon", svt_epsilon)
    c = check_count("max_private_tokens", max_private_tokens)
    delta = check_delta(delta)
    rho_tok = amin_rho_per_token(clip=clip, batch_size=batch_size, temperature=temperature)
    return min(zcdp_to_epsilon(rho=_switch_rho(svt, c, rho_tok), delta=delta), _switch_grid_epsilon(svt, c, rho_tok, delta))


def amin_switch_clip(
    *, epsilon: float, delta: float, batch_size: int, temperature: float, max_private_tokens: int, svt_epsilon: float
) -> float:
    """Largest clip C whose :func:`amin_switch_epsilon` meets ``epsilon`` (calibration).

    The epsilon grows with C, so C is found by brentq on [0, C_max], C_max = B tau sqrt(rho*/(2c))
    with rho* = :func:`epsilon_to_zcdp` (the private tokens alone already meet epsilon there), and
    checked feasible: the epsilon does not exceed the target and a Ledger charged one
    PureDpEvent(svt_epsilon) and c ZcdpEvent(rho_tok) accepts (rho <= rho* or the grid bound holds).
    Raises InvalidParameterError when the switch alone (C = 0) already spends ``epsilon``.
    """
    epsilon = check_positive("epsilon", epsilon)
    svt = check_positive("svt_epsilon", svt_epsilon)
    b = check_count("batch_size", batch_size)
    tau = check_positive("temperature", temperature)
    c = check_count("max_private_tokens", max_private_tokens)
    delta = check_delta(delta)
    rho_star = epsilon_to_zcdp(epsilon=epsilon, delta=delta)

    def eps_at(clip: float) -> float:
        return amin_switch_epsilon(clip=clip, batch_size=b, temperature=tau, max_private_tokens=c, svt_epsilon=svt, delta=delta)

    alone = eps_at(0.0)
    if alone >= epsilon:
        raise InvalidParameterError(
            f"the sparse-vector switch alone (svt_epsilon {svt:g}) already costs epsilon {alone:.4g} >= {epsilon:g}, "
            "leaving nothing for the private tokens; lower svt_epsilon or raise epsilon"
        )

    def feasible(clip: float) -> bool:
        rho_tok = amin_rho_per_token(clip=clip, batch_size=b, temperature=tau)
        ledger_ok = _switch_rho(svt, c, rho_tok) <= rho_star or _switch_grid_epsilon(svt, c, rho_tok, delta) <= epsilon
        return ledger_ok and eps_at(clip) <= epsilon

    high = b * tau * math.sqrt(rho_star / (2.0 * c))
    clip = high if eps_at(high) <= epsilon else brentq(lambda x: eps_at(x) - epsilon, 0.0, high, xtol=1e-15 * high, rtol=1e-15, maxiter=300)
    return float(_step_down_until(feasible, clip))


# --- DP-Decoding and DP-Prompt (pure DP baselines) -------------------------------------------


def dp_decoding_epsilon_per_token(*, lam: float, vocab_size: int) -> float:
    """Pure epsilon per token of DP-Decoding: q' = lam q + (1-lam)/V gives log(1 + lam V/(1-lam)).

    Majmudar et al. 2022: every probability lies in [(1-lam)/V, lam + (1-lam)/V], so the ratio
    between neighbours is at most 1 + lam V/(1-lam). Adjacency: any change of the private
    context; unit: the whole context. Rounded up: log1p's argument exactly (:func:`ceil_float`),
    then log1p (8 U).
    """
    lam = check_rate("lam", lam)
    if lam == 1.0:
        raise InvalidParameterError("lam must be < 1 (lam = 1 samples from the private model with no privacy)")
    v = check_count("vocab_size", vocab_size)
    return up(math.log1p(ceil_float(Fraction(lam) * v / (1 - Fraction(lam)))), units=LIBM_UNITS)


def dp_decoding_epsilon(*, lam: float, vocab_size: int, max_tokens: int) -> float:
    """Total pure epsilon of DP-Decoding: linear in T (basic composition), in exact arithmetic rounded up."""
    per_token = dp_decoding_epsilon_per_token(lam=lam, vocab_size=vocab_size)
    return exact_sum_up([per_token], [check_count("max_tokens", max_tokens)])


def dp_decoding_lam(*, epsilon: float, vocab_size: int, max_tokens: int) -> float:
    """Largest lam meeting ``epsilon`` over T tokens: lam = x/(1+x), x = (exp(eps/T) - 1)/V."""
    epsilon = check_nonnegative("epsilon", epsilon)
    v = check_count("vocab_size", vocab_size)
    tokens = check_count("max_tokens", max_tokens)
    x = math.expm1(epsilon / tokens) / v
    return _step_down_until(lambda lam: dp_decoding_epsilon(lam=lam, vocab_size=v, max_tokens=tokens) <= epsilon, x / (1.0 + x))


def dp_prompt_epsilon_per_token(*, clip_width: float, temperature: float) -> float:
    """Pure epsilon per token of DP-Prompt: 2 w / tau (Utpala et al. 2023, Thm. 1).

    Logits clipped to an interval of width w and sampled at temperature tau form an exponential
    mechanism with sensitivity w. Adjacency: any change of the private document. Exact, rounded up.
    """
    w = check_nonnegative("clip_width", clip_width)
    tau = check_positive("temperature", temperature)
    return ceil_float(2 * Fraction(w) / Fraction(tau))


def dp_prompt_epsilon(*, clip_width: float, temperature: float, max_tokens: int) -> float:
    """Total pure epsilon of DP-Prompt: linear in T (basic composition), in exact arithmetic rounded up."""
    per_token = dp_prompt_epsilon_per_token(clip_width=clip_width, temperature=temperature)
    return exact_sum_up([per_token], [check_count("max_tokens", max_tokens)])


def dp_prompt_temperature(*, epsilon: float, clip_width: float, max_tokens: int) -> float:
    """Smallest temperature meeting ``epsilon`` over T tokens: tau = 2 w T / eps."""
    epsilon = check_positive("epsilon", epsilon)
    w = check_positive("clip_width", clip_width)
    tokens = check_count("max_tokens", max_tokens)
    tau = 2.0 * w * tokens / epsilon
    while dp_prompt_epsilon(clip_width=w, temperature=tau, max_tokens=tokens) > epsilon:
        tau = np.nextafter(tau, math.inf)
    return float(tau)
