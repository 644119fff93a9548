"""Rényi divergences in log space and the batched mollifier search of DP-Fusion.

The Rényi divergence of order a > 1 (Rényi 1961; Mironov 2017, Def. 3) is

    D_a(P || Q) = 1/(a-1) log sum_y P(y)^a Q(y)^(1-a).

It is computed from log-probabilities with ``logsumexp``, never by clamping probabilities
(clamping at 1e-10 hides divergences of 0.5 to 18 under a cap of 0.02; see DESIGN.md,
"Privacy math"). Inputs are treated as the distributions they represent: both are
renormalised in log space, so the rounding of a ``log_softmax`` in float32 does not show up as
a divergence, and identical inputs give exactly 0.

:func:`mollify` finds, for every privacy group at once, the largest mixing weight
lambda in [0, 1] such that P_lambda = lambda P + (1 - lambda) Q stays within a cap of Q in the
symmetric divergence max(D_a(P_lambda || Q), D_a(Q || P_lambda)) (DP-Fusion, Sec. 3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from tokendp.accounting._checks import check_order
from tokendp.errors import InvalidInputError, InvalidParameterError

__all__ = ["mollify", "mollify_with_divergence", "renyi_divergence", "symmetric_renyi_divergence"]

_SEARCH_PASSES = 6
"""Batched passes over the vocabulary after the first one: a fixed number, with no host sync
(on the CPU the loop stops early once every bracket is closed, which changes no result)."""


_CLOSED = 1e-6
"""A group is done when the rigorous upper bound on lam* (:func:`_bounds`) is at most this far
above lo: the answer lo is then that close to the optimum."""


def _check_log_probs(name: str, logp: Tensor) -> None:
    if not isinstance(logp, Tensor) or not logp.is_floating_point():
        raise InvalidInputError(f"{name} must be a floating-point tensor of log-probabilities")
    if logp.dim() < 1 or logp.shape[-1] < 1:
        raise InvalidInputError(f"{name} must have a non-empty vocabulary axis, got shape {tuple(logp.shape)}")


def renyi_divergence(logp: Tensor, logq: Tensor, alpha: float) -> Tensor:
    """D_alpha(P || Q) from log-probabilities ``logp``, ``logq`` of shape (..., V), broadcasting.

    Returns a tensor of the broadcast leading shape (...), in the promoted dtype of the inputs.
    With t_y = log P(y) + (a-1)(log P(y) - log Q(y)) = a log P(y) + (1-a) log Q(y):

        D_a = [logsumexp(t) - logsumexp(log P)] / (a-1) - [logsumexp(log P) - logsumexp(log Q)],

    which is the divergence of the normalised distributions (Mironov 2017, Def. 3). It is
    +inf when P(y) > 0 = Q(y) for some y, terms with P(y) = 0 contribute nothing, identical
    inputs give exactly 0, and the result is clamped at 0 (D_a >= 0; rounding can give -1e-9).
    """
    a = check_order(alpha)
    _check_log_probs("logp", logp)
    _check_log_probs("logq", logq)
    logp, logq = torch.broadcast_tensors(logp, logq)
    dtype = torch.promote_types(logp.dtype, logq.dtype)
    logp, logq = logp.to(dtype), logq.to(dtype)
    p_zero = logp == -math.inf
    q_zero = logq == -math.inf
    t = logp + (a - 1.0) * (logp - logq)  # (..., V)
    t = torch.where(q_zero, math.inf, t)
    t = torch.where(p_zero, -math.inf, t)
    lse_p = torch.logsumexp(logp, dim=-1)  # (...)
    lse_q = torch.logsumexp(logq, dim=-1)  # (...)
    divergence = (torch.logsumexp(t, dim=-1) - lse_p) / (a - 1.0) - (lse_p - lse_q)
    return divergence.clamp_min(0.0)


def symmetric_renyi_divergence(logp: Tensor, logq: Tensor, alpha: float) -> Tensor:
    """max(D_alpha(P || Q), D_alpha(Q || P)) for log-probabilities of shape (..., V), broadcasting."""
    return torch.maximum(renyi_divergence(logp, logq, alpha), renyi_divergence(logq, logp, alpha))


_MARGIN = {torch.float32: 1e-5, torch.float64: 2e-6}
"""Relative safety margin per work dtype: a weight is accepted only if its computed divergences
are <= cap (1 - margin). It covers the rounding of the sums (products with Q in float32 are
good to about 1.3e-6 relative); float32 passes add :func:`_float32_margin`."""


def _float32_margin(alpha: float, cap: Tensor) -> Tensor:
    """Extra relative margin (..., m) for float32 passes, from two bounds on their rounding.

    r = e - 1 carries the rounding of e = exp(log P/Q), at most about eps e per token: the
    computed quantities are those of a P' with |P' - P| <= eps P per token, which moves
    chi2-type sums by at most 2 eps sum_y Q |r| e <= 2 eps sqrt(chi2 (1 + chi2)), i.e. by
    2 eps sqrt((1 + cap) / cap) relative to sums of the size of the cap (chi2 >= cap
    wherever the cap binds). At orders a != 2, l = log w carries an absolute error of about
    eps (w itself is rounded), so each term of sum_y Q phi_p(w) is off by at most about
    (|p| + 2) eps (w^p + 1 + |p z|) and the excess sum_y Q w^p - 1 by (a + 2) eps (2 + excess):
    relative to the cap, 2 (a + 2) eps / ((a - 1) cap).
    """
    eps = torch.finfo(torch.float32).eps
    margin = 2.0 * eps * torch.sqrt((1.0 + cap) / cap)
    if alpha != 2.0:
        margin = margin + 2.0 * (alpha + 2.0) * eps / ((alpha - 1.0) * cap)
    return margin


@dataclass(frozen=True)
class _Problem:
    """One mollifier search for shapes (..., m, V) against (..., V), preprocessed once.

    With P and Q renormalised, e_y = P(y)/Q(y), r_y = e_y - 1 (so sum_y Q r = 0) and
    w_y(lam) = (1 - lam) + lam e_y = P_lam(y)/Q(y) (a sum of non-negative terms, so it keeps
    full relative precision, and is exactly 1 - lam where P(y) = 0):

        D_a(P_lam || Q) = log sum_y Q w^a / (a-1),   D_a(Q || P_lam) = log sum_y Q w^(1-a) / (a-1).

    Written with phi_p(w) = w^p - 1 - p (w - 1) >= 0 (convexity of w^p for p > 1 and p < 0),
    sum_y Q w^p = 1 + sum_y Q phi_p(w): no sum cancels. At a = 2 both are rational:

        D_2(P_lam || Q) = log1p(lam^2 chi2),  chi2 = sum_y Q r^2   (closed form),
        D_2(Q || P_lam) = log1p(lam^2 sum_y Q r^2 / w_y),

    with non-negative terms throughout. Every order runs in float32 when the rounding margin
    allows it, else in float64 (see :func:`_prepare`).
    """

    alpha: float
    level: Tensor  # (..., m) float64: accepted divergence, cap (1 - margin)
    e: Tensor  # (..., m, V) work dtype: P/Q (0 where P = 0)
    r: Tensor  # (..., m, V) work dtype: e - 1 (its rounding is covered by the margin)
    qr2: Tensor  # (..., m, V) work dtype: Q r^2 (finite where r^2 alone would overflow)
    q: Tensor  # (..., V, 1) work dtype: Q
    moments: Tensor  # (..., m, 2) float64: sum_y Q r^2 (= chi2) and sum_y Q r^3
    forced_zero: Tensor  # (..., m) bool: cap 0, or P puts mass where Q has none


def _q_sum(x: Tensor, q: Tensor) -> Tensor:
    """sum_y Q(y) x(..., y) for x (..., m, K, V) or (..., m, V) and q (..., V, 1) -> (..., m, K) or (..., m)."""
    flat = x.reshape(*q.shape[:-2], -1, x.shape[-1])  # (..., m K, V)
    return torch.matmul(flat, q).reshape(x.shape[:-1]).to(torch.float64)


def _prepare(logp_priv: Tensor, logp_pub: Tensor, alpha: float, cap: Tensor) -> _Problem:
    """The weights of :class:`_Problem`, in float32 when that is safe, else in float64.

    Float32 needs every public probability normal (so Q > 0 and P/Q is finite), no overflow in
    chi2, and a rounding margin (:func:`_float32_margin`) below 1e-3, so that the answer moves
    by less than that. At a != 2 every power w^p of a feasible weight must also stay in range:
    Q w^p <= e^((a-1) cap) with Q >= 2^-126 gives w^p <= 2^126 e^((a-1) cap), so (a-1) cap <= 1
    suffices. One host sync per call decides; otherwise the same passes run in float64 (where
    overflow needs a divergence above about 600 / (a-1)).
    """
    if logp_priv.dtype == torch.float32 and logp_pub.dtype == torch.float32:
        prob = _weights(logp_priv, logp_pub, alpha, cap, torch.float32)
        active = cap[~prob.forced_zero]
        safe = (logp_pub.amin() >= _FLOAT32_LOG_MIN) & torch.isfinite(prob.moments[..., 0]).all()
        safe &= (_float32_margin(alpha, active) <= 1e-3).all()
        if alpha != 2.0:
            safe &= ((alpha - 1.0) * active <= 1.0).all()
        if bool(safe):
            return prob
    return _weights(logp_priv, logp_pub, alpha, cap, torch.float64)


_FLOAT32_LOG_MIN = math.log(torch.finfo(torch.float32).tiny)
"""Below this a float32 probability is subnormal (slow, and imprecise)."""


def _weights(logp_priv: Tensor, logp_pub: Tensor, alpha: float, cap: Tensor, dtype: torch.dtype) -> _Problem:
    """e, r, Q and the moments in ``dtype``: a few passes over (..., m, V), two of them products with Q."""
    logq = logp_pub.to(dtype)
    logq = logq - torch.logsumexp(logq, dim=-1, keepdim=True)  # (..., V): renormalised Q
    q = logq.exp().unsqueeze(-1)  # (..., V, 1)
    diff = logp_priv.to(dtype) - logq.unsqueeze(-2)  # (..., m, V): log P/Q
    if dtype == torch.float64:
        # NaN: P(y) = Q(y) = 0, a token that plays no role. +inf: P(y) > 0 = Q(y) (or P/Q
        # beyond float64's range): the group's sums become inf or NaN and it is forced to
        # lam = 0 (D(P_lam || Q) is infinite for every lam > 0). In float32, Q > 0 is checked.
        diff.nan_to_num_(nan=0.0, posinf=math.inf)
    e = diff.exp_()  # (..., m, V): P/Q of the unnormalised P
    r = e - 1.0  # (..., m, V): exact given e where e is in [1/2, 2] (Sterbenz)
    excess = _q_sum(r, q).unsqueeze(-1).to(dtype)  # (..., m, 1): sum_y P - 1, without cancellation
    e.mul_(1.0 / (1.0 + excess))  # renormalises P
    r = torch.sub(e, 1.0, out=r)  # (..., m, V): sum_y Q r = 0 up to rounding
    qr2 = (r * q.sqrt().transpose(-1, -2)).square_()  # (..., m, V): (sqrt(Q) r)^2, finite where r^2 is not
    chi2 = qr2.sum(-1).to(torch.float64)  # (..., m)
    mu3 = torch.zeros_like(chi2) if alpha == 2.0 else (qr2 * r).sum(-1).to(torch.float64)  # (..., m)
    forced_zero = ~torch.isfinite(chi2) | (cap <= 0)  # (..., m)
    margin = _MARGIN[dtype]
    if dtype == torch.float32:
        margin = margin + _float32_margin(alpha, cap)  # (..., m)
    level = torch.where(forced_zero, 0.0, cap * (1.0 - margin))  # (..., m)
    return _Problem(alpha, level, e, r, qr2, q, torch.stack((chi2, mu3), dim=-1), forced_zero)


@dataclass(frozen=True)
class _Evaluation:
    """Divergences and their slopes d/dlam at candidate weights, each (..., m, K) float64."""

    forward: Tensor
    reverse: Tensor
    forward_slope: Tensor
    reverse_slope: Tensor


def _evaluate_order2(prob: _Problem, lam: Tensor) -> _Evaluation:
    """One pass over V for K candidates per group at a = 2 (see :class:`_Problem`).

    s = sum_y (Q r^2) / w and t = sum_y (Q r^2 / w) r / w, formed from Q r^2 so that no factor
    overflows (1/w <= 1/(1-lam), |r|/w <= max(1/lam, 1/(1-lam))).
    """
    lam_w = lam.to(prob.r.dtype).unsqueeze(-1)  # (..., m, K, 1)
    inv_w = torch.mul(prob.e.unsqueeze(-2), lam_w).add_(1.0 - lam_w).reciprocal_()  # (..., m, K, V): 1 / w
    term = inv_w * prob.qr2.unsqueeze(-2)  # (..., m, K, V): Q r^2 / w
    s = term.sum(-1).to(torch.float64)  # sum Q r^2 / w   (..., m, K)
    t = term.mul_(inv_w).mul_(prob.r.unsqueeze(-2)).sum(-1).to(torch.float64)  # sum Q r^3 / w^2
    chi2 = prob.moments[..., :1]  # (..., m, 1)
    excess = lam * lam * s  # sum Q / w - 1
    forward = torch.log1p(lam * lam * chi2)
    forward_slope = 2.0 * lam * chi2 / (1.0 + lam * lam * chi2)
    reverse_slope = (2.0 * lam * s - lam * lam * t) / (1.0 + excess)
    return _Evaluation(forward, torch.log1p(excess), forward_slope, reverse_slope)


def _evaluate_general(prob: _Problem, lam: Tensor) -> _Evaluation:
    """One pass over V for K candidates per group at any order a > 1 (see :class:`_Problem`).

    With z = lam r and l = log w, for p in (a, 1-a): phi_p(w) = w^p - 1 - p z with
    w^p = exp(p l), and the slope d/dlam sum_y Q w^p = p sum_y Q r w^p / w (its rounding can
    only cost optimality, never feasibility: slopes only place candidates).
    """
    a = prob.alpha
    lam_w = lam.to(prob.r.dtype).unsqueeze(-1)  # (..., m, K, 1)
    r = prob.r.unsqueeze(-2)  # (..., m, 1, V)
    z = lam_w * r  # (..., m, K, V)
    w = torch.mul(prob.e.unsqueeze(-2), lam_w).add_(1.0 - lam_w)  # (..., m, K, V)
    log_w = w.log()
    out = []
    for p in (a, 1.0 - a):
        power = torch.mul(log_w, p).exp_()  # w^p   (..., m, K, V)
        excess = _q_sum(torch.sub(power, z, alpha=p).sub_(1.0), prob.q)  # sum Q phi_p(w) = sum Q w^p - 1
        slope = p * _q_sum(power.div_(w).mul_(r), prob.q)  # d/dlam sum Q w^p   (..., m, K)
        out.append((torch.log1p(excess) / (a - 1.0), slope / ((1.0 + excess) * (a - 1.0))))
    (forward, forward_slope), (reverse, reverse_slope) = out
    return _Evaluation(forward.clamp_min(0.0), reverse.clamp_min(0.0), forward_slope, reverse_slope)


def _slack(prob: _Problem, ev: _Evaluation) -> tuple[Tensor, Tensor]:
    """g = max(g_F, g_R) and its slope d/dlam at candidates (..., m, K); feasible iff g <= 0.

    g_F = exp((a-1)/a D_F) - exp((a-1)/a c) and g_R = exp(-c) - exp(-D_R). The transformed
    quantities are power means of w(lam) = P_lam/Q under Q: M_a(w) = exp((a-1)/a D_F) is convex
    (a >= 1) and M_(1-a)(w) = exp(-D_R) is concave (1 - a < 1), and w is affine in lam. So g is
    convex and non-decreasing: the root of every tangent is an upper bound on the largest
    feasible lam, and the root of every chord across the constraint is a lower bound.
    """
    k = (prob.alpha - 1.0) / prob.alpha
    level = prob.level.unsqueeze(-1)  # (..., m, 1)
    g_f = torch.expm1(k * ev.forward) - torch.expm1(k * level)
    g_r = torch.expm1(-level) - torch.expm1(-ev.reverse)
    slope_f = k * torch.exp(k * ev.forward) * ev.forward_slope
    slope_r = torch.exp(-ev.reverse) * ev.reverse_slope
    use_f = g_f >= g_r
    return torch.where(use_f, g_f, g_r), torch.where(use_f, slope_f, slope_r)


@dataclass(frozen=True)
class _End:
    """One end of the bracket, each field (..., m) float64 (NaN where never evaluated).

    lam: the weight; div, slope: the symmetric divergence and its d/dlam (of the larger
    direction); g, g_slope: the transformed slack of :func:`_slack` and its d/dlam.
    """

    lam: Tensor
    div: Tensor
    slope: Tensor
    g: Tensor
    g_slope: Tensor


def _pick(mask: Tensor, index: Tensor, values: _End, old: _End) -> _End:
    """Per group, the candidate ``index`` of ``values`` (..., m, K) where ``mask``, else ``old``."""
    fields = {}
    for name in ("lam", "div", "slope", "g", "g_slope"):
        new = getattr(values, name).gather(-1, index).squeeze(-1)
        fields[name] = torch.where(mask, new, getattr(old, name))
    return _End(**fields)


def _update(lo: _End, hi: _End, cand: _End, feasible: Tensor) -> tuple[_End, _End]:
    """Move lo up to the largest feasible candidate and hi down to the smallest infeasible one."""
    best_lo, i_lo = torch.where(feasible, cand.lam, -1.0).max(-1, keepdim=True)
    best_hi, i_hi = torch.where(feasible, math.inf, cand.lam).min(-1, keepdim=True)
    up = best_lo.squeeze(-1) > lo.lam
    down = (best_hi.squeeze(-1) < hi.lam) | ((best_hi.squeeze(-1) == hi.lam) & torch.isnan(hi.g))
    return _pick(up, i_lo, cand, lo), _pick(down, i_hi, cand, hi)


def _bounds(lo: _End, hi: _End) -> tuple[Tensor, Tensor]:
    """Rigorous bounds on lam* from the convex slack g: chord root (lower), tangent roots (upper)."""
    good_hi = torch.isfinite(hi.g) & (hi.g > 0) & torch.isfinite(hi.g_slope) & (hi.g_slope > 0)
    tan_hi = torch.where(good_hi, hi.lam - hi.g / hi.g_slope, hi.lam)
    good_lo = torch.isfinite(lo.g_slope) & (lo.g_slope > 0)
    tan_lo = torch.where(good_lo, lo.lam - lo.g / lo.g_slope, math.inf)
    upper = torch.minimum(torch.minimum(tan_hi, tan_lo), hi.lam).clamp_min(lo.lam)
    crosses = torch.isfinite(hi.g) & (hi.g > 0)
    chord = torch.where(crosses, lo.lam - lo.g * (hi.lam - lo.lam) / (hi.g - lo.g), lo.lam)
    lower = torch.minimum(chord.nan_to_num(0.0).clamp_min(lo.lam), upper)
    return lower, upper


_NOISE = 1e-12
"""Divergences below this are rounding noise in float64 sums near 1: no use for a log-scale model."""


def _logit_point(end: _End, level: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(x, y, dy/dx, valid) with x = logit(lam) and y = log(D / level)."""
    x = torch.log(end.lam) - torch.log1p(-end.lam)
    y = torch.log(end.div) - torch.log(level)
    dy = end.slope / end.div * end.lam * (1.0 - end.lam)
    valid = (end.lam > 0) & (end.lam < 1) & (end.div > _NOISE) & torch.isfinite(y) & torch.isfinite(dy) & (dy > 0)
    return x, y, dy, valid


def _estimate(lo: _End, hi: _End, level: Tensor) -> Tensor:
    """A point estimate of lam*: a Newton step on log D against logit(lam) from the end whose
    divergence is closer to the cap; NaN if neither end gives a usable model.

    Near 0, D ~ a/2 chi2 lam^2, and near a pole at 1, D ~ B / (1 - lam): in both regimes
    log D is close to linear in logit(lam).
    """
    x_lo, y_lo, dy_lo, ok_lo = _logit_point(lo, level)
    x_hi, y_hi, dy_hi, ok_hi = _logit_point(hi, level)
    newton_lo = x_lo - y_lo / dy_lo
    newton_hi = x_hi - y_hi / dy_hi
    closer_hi = y_hi.abs() < y_lo.abs()
    newton = torch.where(ok_hi & (closer_hi | ~ok_lo), newton_hi, torch.where(ok_lo, newton_lo, math.nan))
    return torch.sigmoid(newton)


def _next_candidates(lo: _End, hi: _End, level: Tensor, *, final: bool) -> tuple[Tensor, Tensor]:
    """K = 3 weights per group between the rigorous bounds of :func:`_bounds`, and the upper bound.

    Before the last pass: the lower bound, the estimate of :func:`_estimate` and the upper
    bound (which tightens the next chord and tangent). In the last pass the upper bound can no
    longer become the answer, so its place goes to the estimate moved slightly towards the
    lower bound, in case the estimate overshoots lam* by a hair.
    """
    lower, upper = _bounds(lo, hi)
    est = _estimate(lo, hi, level)
    # No usable model (e.g. D ~ 0 up to a pole at lam = 1): bisect in logit(lam) instead.
    x_mid = (torch.logit(lower, eps=1e-9) + torch.logit(upper, eps=1e-9)) / 2
    est = torch.where(torch.isfinite(est), est, torch.sigmoid(x_mid))
    est = torch.minimum(torch.maximum(est, lower), upper)
    third = est - _HEDGE * (est - lower) if final else upper
    return torch.stack((lower, third, est), dim=-1), upper


_HEDGE = 0.02
"""In the last pass, the fraction of (estimate - lower bound) by which the hedge undercuts the estimate."""


def _taylor_guess(prob: _Problem, hi: Tensor) -> Tensor:
    """Initial weights from the expansions in lam (r = P/Q - 1, mu_k = sum_y Q r^k):

    D_a(P_lam || Q) ~ a/2 mu2 lam^2 + a(a-2)/6 mu3 lam^3,  D_a(Q || P_lam) ~ a/2 mu2 lam^2 - a(a+1)/6 mu3 lam^3.
    Only a starting point: every candidate is verified.
    """
    a = prob.alpha
    mu2, mu3 = prob.moments.unbind(-1)
    guesses = []
    for cubic in (a * (a - 2.0) / 6.0, -a * (a + 1.0) / 6.0):
        lam = torch.sqrt(prob.level / (0.5 * a * mu2))
        for _ in range(3):
            lam = torch.sqrt(prob.level / torch.clamp_min(0.5 * a * mu2 + cubic * mu3 * lam.clamp_max(1.0), 0.25 * a * mu2))
        guesses.append(lam.nan_to_num(0.0, posinf=1.0))
    return torch.minimum(torch.minimum(*guesses), hi)


def _round_down(lam: Tensor, dtype: torch.dtype) -> Tensor:
    """The largest value of ``dtype`` that is <= lam, returned as float64."""
    if dtype == torch.float64:
        return lam
    rounded = lam.to(dtype)
    rounded = torch.where(rounded.to(torch.float64) > lam, torch.nextafter(rounded, torch.zeros_like(rounded)), rounded)
    return rounded.to(torch.float64)


def _as_cap(cap: float | Tensor, shape: torch.Size) -> Tensor:
    if isinstance(cap, Tensor):
        cap64 = cap.to(torch.float64)
    elif isinstance(cap, (int, float)) and not isinstance(cap, bool):
        cap64 = torch.tensor(float(cap), dtype=torch.float64)
    else:
        raise InvalidParameterError(f"cap must be a number or a tensor, got {type(cap).__name__}")
    try:
        cap64 = torch.broadcast_to(cap64, shape)
    except RuntimeError as exc:
        raise InvalidParameterError(f"cap of shape {tuple(cap64.shape)} does not broadcast to the groups' shape {tuple(shape)}") from exc
    # One check per call (not per iteration) of a tensor the caller supplies.
    if not bool(((cap64 >= 0) & torch.isfinite(cap64)).all()):
        raise InvalidParameterError("cap must be finite and >= 0 (it is alpha * beta); pass a non-negative beta")
    return cap64


def mollify(
    logp_priv: Tensor,  # (..., m, V)
    logp_pub: Tensor,  # (..., V)
    *,
    alpha: float,
    cap: float | Tensor,  # broadcastable to (..., m)
) -> Tensor:  # (..., m)
    """Largest lam in [0, 1] per group with max(D_a(P_lam || Q), D_a(Q || P_lam)) <= cap.

    See :func:`mollify_with_divergence`, which also returns the divergence at lam.
    """
    return mollify_with_divergence(logp_priv, logp_pub, alpha=alpha, cap=cap)[0]


def mollify_with_divergence(
    logp_priv: Tensor,  # (..., m, V)
    logp_pub: Tensor,  # (..., V)
    *,
    alpha: float,
    cap: float | Tensor,  # broadcastable to (..., m)
) -> tuple[Tensor, Tensor]:  # (..., m) in the dtype of logp_priv, (..., m) float64
    """Largest lam in [0, 1] per group with max(D_a(P_lam || Q), D_a(Q || P_lam)) <= cap.

    P_lam = lam P + (1 - lam) Q, with P a group's private next-token distribution and Q the
    public one (DP-Fusion, Sec. 3; DESIGN.md "Privacy math"). Both divergences are
    non-decreasing in lam, so the feasible set is an interval [0, lam*]. The search runs for a
    fixed number of passes, each evaluating K candidate weights for every group in one batched
    pass over the vocabulary, and moves a bracket [lo, hi] by Newton steps (upper bounds) and
    chords (lower bounds) on a convex transform of the constraint (see :func:`_slack`).

    The returned lam is always a weight whose divergences were computed to be <= cap (never a
    bracket midpoint), exactly representable in the dtype of ``logp_priv``; lam = 1 when P
    itself meets the cap, lam = 0 when cap = 0 or when P puts mass where Q has none (then
    D_a(P_lam || Q) is infinite for every lam > 0). D_a(Q || P_lam) is finite for every
    lam < 1 since P_lam >= (1 - lam) Q. At a = 2 the forward root is closed-form,
    lam = sqrt(expm1(cap) / chi2(P || Q)). Terms that overflow float64 (a divergence above
    about 600 / (a - 1)) count as infeasible, which can only lower lam.

    Also returns the symmetric divergence at lam as computed by the search (0 at lam = 0): a
    diagnostic that costs nothing extra.
    """
    a = check_order(alpha)
    _check_log_probs("logp_priv", logp_priv)
    _check_log_probs("logp_pub", logp_pub)
    if logp_priv.dim() < 2 or logp_priv.shape[-1] != logp_pub.shape[-1]:
        raise InvalidInputError(
            f"logp_priv must be (..., m, V) and logp_pub (..., V) with the same V; got {tuple(logp_priv.shape)} and {tuple(logp_pub.shape)}"
        )
    lead = torch.broadcast_shapes(logp_priv.shape[:-2], logp_pub.shape[:-1])
    group_shape = torch.Size((*lead, logp_priv.shape[-2]))
    logp_priv = logp_priv.expand(*group_shape, logp_priv.shape[-1])
    logp_pub = logp_pub.expand(*lead, logp_pub.shape[-1])
    out_dtype = logp_priv.dtype
    prob = _prepare(logp_priv, logp_pub, a, _as_cap(cap, group_shape).to(logp_priv.device))
    evaluate = _evaluate_order2 if a == 2.0 else _evaluate_general
    zero = torch.zeros(group_shape, dtype=torch.float64, device=logp_priv.device)
    hi = torch.where(prob.forced_zero, 0.0, 1.0) + zero
    if a == 2.0:
        hi = torch.minimum(hi, torch.sqrt(torch.expm1(prob.level) / prob.moments[..., 0]).nan_to_num(1.0))
    hi = _round_down(hi, out_dtype)
    at_zero = zero.unsqueeze(-1)  # (..., m, 1): lam = 0 is feasible with D = 0 and slope 0
    g0, g0_slope = _slack(prob, _Evaluation(at_zero, at_zero, at_zero, at_zero))
    lo = _End(zero, zero, zero, g0.squeeze(-1), g0_slope.squeeze(-1))
    hi = _End(hi, *(zero + math.nan,) * 4)
    if a == 2.0:  # hi is the closed-form forward root: often the answer, closing the bracket at once
        candidates = hi.lam.unsqueeze(-1)  # (..., m, 1)
    else:
        guess = _taylor_guess(prob, hi.lam)
        candidates = torch.stack((guess, torch.sqrt(guess * hi.lam), hi.lam), dim=-1)  # (..., m, K)
    level = prob.level.unsqueeze(-1)  # (..., m, 1)
    for i in range(1 + _SEARCH_PASSES):
        lam = torch.minimum(torch.maximum(candidates, lo.lam.unsqueeze(-1)), hi.lam.unsqueeze(-1))
        lam = _round_down(lam, out_dtype)  # (..., m, K)
        ev = evaluate(prob, lam)
        use_f = ev.forward >= ev.reverse
        div = torch.where(use_f, ev.forward, ev.reverse)
        feasible = (ev.forward <= level) & (ev.reverse <= level)
        on_cpu = lam.device.type == "cpu"
        if i == 0 and a == 2.0 and on_cpu and bool(feasible.all()):
            # The usual case: the closed-form forward root meets the reverse cap too, so it is
            # the answer for every group (hi was an upper bound); no bracket to keep.
            return lam[..., 0].to(out_dtype), div[..., 0]
        slope = torch.where(use_f, ev.forward_slope, ev.reverse_slope)
        cand = _End(lam, div, slope, *_slack(prob, ev))
        lo, hi = _update(lo, hi, cand, feasible)
        if on_cpu and bool((hi.lam - lo.lam <= _CLOSED).all()):
            break
        candidates, upper = _next_candidates(lo, hi, prob.level, final=i == _SEARCH_PASSES - 1)
        if on_cpu and bool((upper - lo.lam <= _CLOSED).all()):
            # Every group is within _CLOSED of its optimum, so further passes could move no
            # answer by more. Reading a flag costs nothing on the CPU; on accelerators all
            # passes run.
            break
    return lo.lam.to(out_dtype), lo.div
