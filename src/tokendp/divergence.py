"""Rényi divergences in log space and the batched mollifier search of DP-Fusion.

The Rényi divergence of order a > 1 (Rényi 1961; Mironov 2017, Def. 3) is

    D_a(P || Q) = 1/(a-1) log sum_y P(y)^a Q(y)^(1-a).

It is computed from log-probabilities with ``logsumexp``, never by clamping probabilities
(clamping at 1e-10 hides divergences of 0.5 to 18 under a cap of 0.02; docs/privacy.md).
Inputs are treated as the distributions they represent: both are renormalised in log space, so the rounding of a ``log_softmax`` in float32 does not show up as
a divergence, and identical inputs give exactly 0.

:func:`mollify` finds, for every privacy group at once, the largest mixing weight
lambda in [0, 1] such that P_lambda = lambda P + (1 - lambda) Q stays within a cap of Q in the
symmetric divergence max(D_a(P_lambda || Q), D_a(Q || P_lambda)) (DP-Fusion, Sec. 3). The
returned weights meet their caps under exact arithmetic on every CPU and GPU: the bounds that
accept them hold for any summation order (docs/privacy.md, "Floating point").
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

import tokendp._device as _device
from tokendp.accounting._checks import check_order
from tokendp.errors import InvalidInputError, InvalidParameterError

__all__ = [
    "Mollification", "mollify", "mollify_checked", "mollify_detailed", "mollify_with_divergence", "normalisation_bound", "renyi_divergence",
    "symmetric_renyi_divergence",
]

_SEARCH_PASSES = 6
"""Batched passes over the vocabulary after the first one: a fixed number, with no host sync
(where reads are free, :func:`tokendp._device.reads_are_free`, the loop stops early once every
bracket is closed, which changes no result)."""


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


_U = 2.0**-53
"""Unit roundoff of float64: +, -, *, / and sqrt are exact to a factor (1 +- U)."""

_TAU = 8.0 * _U
"""Relative error assumed of exp, log and log1p in float64: 4 ulp, above what IEEE libraries
(1 ulp) and CUDA (at most 2 ulp) document."""

_RATIO_ERROR = 2.0 * _TAU + 760.0 * _U
"""Relative error of each computed ratio e = P/Q and weight Q = exp(log Q - logsumexp): a float64
difference of log-probabilities within U of exact (|difference| <= 745, beyond which exp under-
or overflows), then exp within TAU."""


def _gamma(n: int) -> float:
    """gamma_n = n U / (1 - n U): a float64 sum of n terms, added in ANY order, is within gamma_n
    times the sum of their absolute values (Higham 2002, Sec. 4.2). Nothing here depends on the
    order a CPU, BLAS, thread count or GPU happens to use."""
    nu = n * _U
    if nu >= 1e-3:
        raise InvalidInputError(f"a vocabulary of {n} tokens is beyond the float64 error bounds (at most 9e12)")
    return nu / (1.0 - nu)


_AIM32 = 1e-5
"""Float32 searches (orders other than 2) aim this far below the cap (relative), plus
:func:`_float32_margin`, so that the float64 certificate at the end rarely has to step down."""


def _float32_margin(alpha: float, cap: Tensor) -> Tensor:
    """Relative margin (..., m) a float32 search aims below the cap: an estimate of its rounding
    (not a proof; the float64 certificate of :func:`_certify` is the proof).

    Terms w^p = exp(p log w) carry about (a + 2) eps of error on sums near 1, so the excess
    sum_y Q w^p - 1 about (a + 2) eps (2 + excess): relative to the cap, 2 (a + 2) eps / ((a - 1) cap).
    """
    eps = torch.finfo(torch.float32).eps
    return 2.0 * eps * torch.sqrt((1.0 + cap) / cap) + 2.0 * (alpha + 2.0) * eps / ((alpha - 1.0) * cap)


@dataclass(frozen=True)
class _Float32Copies:
    """Float32 copies for a float32 search (orders other than 2), in the centred forms of
    :func:`_evaluate_float32`."""

    rho: Tensor  # (..., m, V) float32: P/Q
    r: Tensor  # (..., m, V) float32: rho - 1
    q: Tensor  # (..., V, 1) float32


@dataclass(frozen=True)
class _Problem:
    """One mollifier search for shapes (..., m, V) against (..., V), prepared once in float64.

    Q is the public distribution of ``logp_pub`` and P a group's private one; q_y are computed
    weights of Q and e_y = exp(logp_priv - logp_pub) computed ratios (so e = 1 exactly where a
    private row equals the public one), each within _RATIO_ERROR of exact. With
    c = 1 / sum_y q e, rho = c e = P/Q and w_y(lam) = (1 - lam) + lam rho_y = P_lam(y)/Q(y):

        D_a(P_lam || Q) = log S_a / (a-1),  D_a(Q || P_lam) = log S_(1-a) / (a-1),  S_p = sum_y Q w^p,

    sums of non-negative terms; at a = 2, S_2 = (1 - lam)^2 + 2 lam (1 - lam) A + lam^2 B with
    A = c sum_y q e and B = c^2 sum_y q e^2, and S_(-1) = sum_y q / w. Every sum accumulates in
    float64 in any order; :func:`_upper` turns a computed S_p into a rigorous bound on D.
    """

    alpha: float
    cap: Tensor  # (..., m) float64: every returned lam provably meets it
    level: Tensor  # (..., m) float64: what the search aims for (cap, or below it in float32)
    q: Tensor  # (..., V, 1) float64: weights of Q, summing to 1 up to rounding
    log_q: Tensor  # (..., V) float64: log Q, within _RATIO_ERROR of log q (relative, as probabilities)
    e: Tensor  # (..., m, V) float64: ratios e (1 where P = Q = 0)
    norm: Tensor  # (..., m) float64: c = 1 / sum_y q e, so rho = c e
    moments: Tensor  # (..., m, 2) float64: A and B (at other orders from _with_search_data; empty before)
    skew: Tensor  # (..., m) float64: sum_y Q (rho - 1)^3 at orders other than 2 (first guesses only)
    rho: Tensor | None  # (..., m, V) float64: rho = c e (orders other than 2; at 2 the passes use e)
    rho_range: Tensor  # (..., m, 2) float64: min and max of rho (orders other than 2; else empty)
    scale: float  # bound on |rho (exact) / rho (computed) - 1| (normalisation_bound)
    rel: float  # relative error of a sum of V non-negative weighted terms: weights, accumulation
    forced_zero: Tensor  # (..., m) bool: cap 0, or P puts mass where Q has none
    float32: _Float32Copies | None  # set when the search runs in float32 (orders other than 2)
    scratch: Tensor  # (..., m, V) float64 at a = 2 (else empty): a buffer one evaluation with K = 1 may overwrite

    @property
    def chi2(self) -> Tensor:
        """chi2(P || Q) = B - 2A + 1 (..., m) (cancels: only an estimate, for guesses)."""
        return (self.moments[..., 1] - 2.0 * self.moments[..., 0] + 1.0).clamp_min(0.0)


def _sum(x: Tensor) -> Tensor:
    """sum_y x(..., y) -> (...): every float64 sum a bound rests on goes through here or
    :func:`_q_sum`, in whatever order the library picks (the bounds allow any; the tests
    replace both by the worst any order could do)."""
    return x.sum(-1)


def _q_sum(x: Tensor, q: Tensor) -> Tensor:
    """sum_y Q(y) x(..., y) for x (..., m, K, V) or (..., m, V) and q (..., V, 1) -> (..., m, K) or (..., m)."""
    flat = x.reshape(*q.shape[:-2], -1, x.shape[-1])  # (..., m K, V)
    return torch.matmul(flat, q).reshape(x.shape[:-1]).to(torch.float64)


def _ratios(logp_priv: Tensor, logp_pub: Tensor) -> Tensor:
    """e = exp(logp_priv - logp_pub) # (..., m, V) float64, exactly 1 where the log-probabilities agree.

    In float64 from the inputs (float32 inputs convert exactly), within _RATIO_ERROR. NaN
    (P = Q = 0: the token plays no role) becomes 1; +inf (P > 0 = Q) stays and forces the group
    to lam = 0.
    """
    e = torch.empty(logp_priv.shape, dtype=torch.float64, device=logp_priv.device).copy_(logp_priv)  # never the input
    e.sub_(logp_pub.to(torch.float64).unsqueeze(-2)).exp_()  # (..., m, V)
    if not _device.reads_are_free(e) or bool((logp_pub == -math.inf).any()):  # NaN needs Q = 0 somewhere
        e.nan_to_num_(nan=1.0, posinf=math.inf)
    return e


def normalisation_bound(vocab: int) -> float:
    """``scale``: how far each computed rho = c e can be from the exact P/Q at V = ``vocab``.

    sum_y q e is a sum of V non-negative products of factors within _RATIO_ERROR, so within
    k = 2 _RATIO_ERROR + 2 U + gamma_V of exact (relative, any order); c = 1 / that sum within
    k / (1 - k), and e within _RATIO_ERROR.
    """
    k = 2.0 * _RATIO_ERROR + 2.0 * _U + _gamma(vocab + 4)
    return k / (1.0 - k) + _RATIO_ERROR + 3.0 * _U


_FLOAT32_LOG_MIN = math.log(torch.finfo(torch.float32).tiny)
"""Below this a float32 probability is subnormal (slow, and imprecise)."""


def _float32_search(logp_priv: Tensor, logp_pub: Tensor, alpha: float, cap: Tensor) -> bool:
    """Whether a search at an order other than 2 may run in float32, from public inputs only
    (the public distribution, the caps, alpha): so every group's result is the same whatever
    the other groups' private rows hold.

    Where reads are not free (accelerators) the answer is always False: the test reads the
    device, and a float32 search run where it fails (a public log-probability below the float32
    normal range, large or tiny caps) is certified but can land far below the optimum. The
    float64 search has no such case, and needs no certificate pass.
    """
    if alpha == 2.0 or logp_priv.dtype != torch.float32 or logp_pub.dtype != torch.float32:
        return False
    if not _device.reads_are_free(cap):
        return False
    active = cap[cap > 0]
    safe = (logp_pub.amin() >= _FLOAT32_LOG_MIN) & (_float32_margin(alpha, active) <= 1e-3).all()
    return bool(safe & ((alpha - 1.0) * active <= 1.0).all())


def _prepare(logp_priv: Tensor, logp_pub: Tensor, alpha: float, cap: Tensor) -> _Problem:
    """The float64 quantities of :class:`_Problem` that every evaluation needs: Q, the ratios
    and their normalisation (and at a = 2 the moments, with e^2 in the scratch buffer); at other
    orders rho and its range. :func:`_with_search_data` adds what only a search needs."""
    gamma = _gamma(logp_pub.shape[-1] + 4)
    logq = logp_pub.to(torch.float64)
    logq = logq - torch.logsumexp(logq, dim=-1, keepdim=True)  # (..., V)
    q = logq.exp()  # (..., V)
    total_q = _sum(q).unsqueeze(-1)  # (..., 1)
    q, logq = q.div_(total_q).unsqueeze(-1), logq.sub_(total_q.log())  # (..., V, 1): Q, and (..., V): log Q
    e = _ratios(logp_priv, logp_pub)  # (..., m, V)
    total = _q_sum(e, q)  # (..., m): sum_y q e = 1 + eps
    forced_zero = ~torch.isfinite(total) | (total <= 0) | (cap <= 0)  # (..., m)
    if not _device.reads_are_free(e) or bool(forced_zero.any()):
        e = torch.where(forced_zero.unsqueeze(-1), 1.0, e)  # such a group keeps lam = 0
        total = _q_sum(e, q)
    norm = 1.0 / total  # (..., m): c
    cap = torch.where(forced_zero, 0.0, cap)  # (..., m)
    rho, rho_range, scratch = None, norm.new_empty((*norm.shape, 0)), norm.new_empty(0)
    if alpha == 2.0:
        scratch = torch.mul(e, e)  # (..., m, V): e^2 now, reused for 1/w (a smaller working set stays in cache)
        moments = torch.stack((norm * total, norm * norm * _q_sum(scratch, q)), -1)  # (..., m, 2): A, B
    else:
        moments = rho_range
        rho = e * norm.unsqueeze(-1)  # (..., m, V)
        rho_range = torch.stack((rho.amin(-1), rho.amax(-1)), -1)
    rel = 3.0 * _RATIO_ERROR + 2.0 * gamma + 4.0 * _U
    return _Problem(alpha, cap, cap, q, logq, e, norm, moments, torch.zeros_like(norm), rho, rho_range,
                    normalisation_bound(logp_pub.shape[-1]), rel, forced_zero, None, scratch)


def _with_search_data(prob: _Problem, logp_priv: Tensor, logp_pub: Tensor,
                      public_cap: Tensor | None = None) -> _Problem:
    """At orders other than 2, ``prob`` with the search's extras: the moments A and B and the
    skew (first guesses), and the float32 copies and lower level when a float32 search may run
    (decided from ``public_cap``, default the caps, :func:`_float32_search`). The level never goes below half a
    group's cap (a cap far below the public ones may carry a larger float32 margin: the
    certificate then steps down, which costs optimality, never feasibility)."""
    if prob.alpha == 2.0:
        return prob
    r = prob.rho - 1.0  # (..., m, V)
    moments = torch.stack((torch.ones_like(prob.norm), _q_sum(prob.rho * prob.rho, prob.q)), -1)  # (..., m, 2): A = 1, B
    skew = _q_sum(r * r * r, prob.q)  # sum_y Q r^3: for the first guess only
    float32, level = None, prob.level
    if _float32_search(logp_priv, logp_pub, prob.alpha, prob.cap if public_cap is None else public_cap):
        r32 = r.to(torch.float32)
        float32 = _Float32Copies(r32 + 1.0, r32, prob.q.to(torch.float32))
        level = level * (1.0 - _AIM32 - _float32_margin(prob.alpha, prob.cap)).clamp_min(0.5)  # (..., m)
    return replace(prob, level=level, moments=moments, skew=skew, float32=float32)


@dataclass(frozen=True)
class _Evaluation:
    """Divergences and their slopes d/dlam at candidate weights, each (..., m, K) float64.

    From a float64 evaluation the divergences are rigorous upper bounds (:func:`_upper`); from
    a float32 one they are estimates. Slopes are NaN where not asked for (they only place
    candidates, so their rounding can cost optimality, never feasibility)."""

    forward: Tensor
    reverse: Tensor
    forward_slope: Tensor
    reverse_slope: Tensor


def _upper(prob: _Problem, s: Tensor, p: float, rounding: Tensor | float) -> Tensor:
    """A rigorous upper bound on D = log S_p / (a-1) (..., m, K) from a computed S_p.

    The exact S_p is at most the computed one times (1 + rel) (the weights q and the float64
    sum), (1 + scale)^|p| (w within a factor 1 +- scale, as rho) and (1 + ``rounding``) (the
    rounding of each term w^p); the last factor covers log1p's rounding and the division.
    """
    shift = torch.log1p(torch.as_tensor(rounding, dtype=torch.float64)) + math.log1p(prob.rel)
    shift = shift + abs(p) * math.log1p(prob.scale)
    return (torch.log(s) + shift).clamp_min(0.0) * (1.0 + 4.0 * _TAU) / (prob.alpha - 1.0)


def _evaluate_order2(prob: _Problem, lam: Tensor, *, slopes: bool = True) -> _Evaluation:
    """One float64 pass over V for K candidates per group at a = 2 (see :class:`_Problem`).

    S_2 is closed-form (terms within 8 U); S_(-1) = sum_y q / w with w = lam c (e + t),
    t = (1 - lam) / (lam c) (each 1/w within 6 U: a sum of non-negative terms, then products).
    Slopes: dS_2/dlam = 2 (A - 1) + 2 lam chi2 and dS_(-1)/dlam = sum_y q (1 - rho) / w^2.
    """
    a_sum, b_sum = prob.moments[..., :1], prob.moments[..., 1:]  # (..., m, 1)
    s_forward = (1.0 - lam) ** 2 + 2.0 * lam * (1.0 - lam) * a_sum + lam * lam * b_sum  # (..., m, K)
    slope_c = lam * prob.norm.unsqueeze(-1)  # (..., m, K): lam c, so w = lam c (e + t)
    t = ((1.0 - lam) / slope_c).unsqueeze(-1)  # (..., m, K, 1): inf at lam = 0
    out = prob.scratch.unsqueeze(-2) if lam.shape[-1] == 1 else None  # K = 1: reuse the buffer
    inv_w = torch.add(prob.e.unsqueeze(-2), t, out=out).reciprocal_()  # (..., m, K, V): lam c / w
    s_reverse = torch.where(lam > 0, _q_sum(inv_w, prob.q) / slope_c, 1.0)  # (..., m, K): sum_y q / w
    forward = _upper(prob, s_forward, 2.0, 8.0 * _U)
    reverse = _upper(prob, s_reverse, -1.0, 6.0 * _U)
    if not slopes:
        return _Evaluation(forward, reverse, forward + math.nan, reverse + math.nan)
    one_minus_rho = torch.mul(prob.e, -prob.norm.unsqueeze(-1)).add_(1.0).unsqueeze(-2)  # (..., m, 1, V)
    inv_w2 = inv_w.square_().div_((slope_c * slope_c).unsqueeze(-1))  # (..., m, K, V): 1 / w^2
    d_reverse = _q_sum(inv_w2.mul_(one_minus_rho), prob.q)  # dS_(-1)/dlam
    d_forward = 2.0 * (a_sum - 1.0) + 2.0 * lam * prob.chi2.unsqueeze(-1)
    return _Evaluation(forward, reverse, d_forward / s_forward, d_reverse / s_reverse)


def _power_rounding(prob: _Problem, lam: Tensor, p: float) -> Tensor:
    """Relative rounding (..., m, K) of each term w^p = exp(p log w) of S_p, in float64.

    w = (1 - lam) + (lam c) e is within 4 U (non-negative terms), l = log w within
    4 U + TAU |l| absolute, p l within |p| that plus U |p l|, and exp(p l) within TAU more:
    delta = TAU + |p| (5 U + (TAU + U) L) with L = max_y |log w_y| (from the range of rho).
    """
    low = (1.0 - lam) + lam * prob.rho_range[..., :1]  # (..., m, K): min_y w
    high = (1.0 - lam) + lam * prob.rho_range[..., 1:]  # max_y w
    big_l = torch.maximum(torch.log(high).abs(), torch.log(low).abs())  # inf where some w = 0
    return _TAU + abs(p) * (5.0 * _U + (_TAU + _U) * big_l)


def _is_quarter(exponent: float) -> bool:
    """Whether w^exponent comes from products and square roots: a positive multiple of 1/4
    (every order of the calibration grid, ``tokendp.fusion.ALPHA_GRID``, minus 1)."""
    return exponent > 0 and float(4.0 * exponent).is_integer() and exponent <= 1024


def _quarter_power(w: Tensor, exponent: float) -> tuple[Tensor, float]:
    """(w^exponent, c) for a positive multiple of 1/4, by square roots and square-and-multiply:
    no exp or log, a few elementwise passes.

    c bounds the roundings: the computed value is the exact power of the computed w times
    prod_i (1 + d_i)^(r_i) with |d_i| <= U and sum_i |r_i| <= c, so it is within gamma_ceil(c)
    (relative) of w^exponent, in any precision with its own U. A product rounds once and adds
    its factors' counts; a square root halves its input's count and adds :data:`_SQRT_COUNT`.
    """
    whole, quarters = divmod(round(4.0 * exponent), 4)
    result, count = None, 0.0
    if quarters:
        root = torch.sqrt(w)  # w^(1/2)
        if quarters == 2:
            result, count = root, _SQRT_COUNT
        else:
            fourth = torch.sqrt(root)  # w^(1/4)
            fourth_count = _SQRT_COUNT / 2.0 + _SQRT_COUNT
            result, count = ((fourth, fourth_count) if quarters == 1
                             else (root.mul_(fourth), _SQRT_COUNT + fourth_count + 1.0))
    base, base_count = w, 0.0
    while whole:
        if whole & 1:
            result, count = (base.clone(), base_count) if result is None else (result.mul_(base), count + base_count + 1.0)
        whole >>= 1
        if whole:
            base, base_count = base * base, 2.0 * base_count + 1.0
    return result, count


_SQRT_COUNT = 4.0
"""Roundings charged to a square root: 4 U, above the correctly rounded IEEE square root (U)
of CPUs and CUDA's double precision (vectorised float32 square roots on some CPUs are not
correctly rounded; the float32 search only estimates)."""


def _power_pair(w: Tensor, a: float, *, rigorous: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(w^(a-1), w^a, w^(1-a)) elementwise: from :func:`_quarter_power` when a - 1 is a multiple of 1/4, else exp/log.

    ``rigorous``: reciprocals of values below the smallest normal number become +inf, so a
    subnormal's lost digits can only raise a sum (S_p bounds stay upper bounds).
    """
    if _is_quarter(a - 1.0):
        lower, _ = _quarter_power(w, a - 1.0)  # w^(a-1)
    else:
        lower = torch.mul(torch.log(w), a - 1.0).exp_()
    reciprocal = torch.reciprocal(lower)
    if rigorous:
        reciprocal.masked_fill_(lower < torch.finfo(w.dtype).tiny, math.inf)
    return lower, torch.mul(lower, w), reciprocal


def _pair_rounding(prob: _Problem, lam: Tensor) -> tuple[Tensor | float, Tensor | float]:
    """Relative rounding of the terms w^a and w^(1-a) of :func:`_power_pair` in float64.

    Product path: w is within 4 U, carried to the power a - 1 (4 (a-1) roundings), c more for
    the chain, one for w^a = w^(a-1) w (and 4 more, w's own) or for the reciprocal; plus
    2^-1000, which covers terms that underflow (each below 2^-1022, and S_p >= 1 by Jensen's
    inequality, since E_Q[w] = 1 and x^p is convex for p >= 1 and p <= 0).
    Otherwise :func:`_power_rounding` of each exponent, plus one rounding for w^a = w^(a-1) w.
    """
    a = prob.alpha
    if _is_quarter(a - 1.0):
        chain = _quarter_count(a - 1.0)
        forward = _gamma_real(4.0 * a + chain + 1.0) + 2.0**-1000
        reverse = _gamma_real(4.0 * (a - 1.0) + chain + 1.0) + 2.0**-1000
        return forward, reverse
    lower = _power_rounding(prob, lam, a - 1.0)
    return lower + 6.0 * _U, lower + 2.0 * _U


@functools.lru_cache(maxsize=64)
def _quarter_count(exponent: float) -> float:
    """The rounding count c of :func:`_quarter_power` at ``exponent`` (computed on a 1-element tensor)."""
    return _quarter_power(torch.ones(1, dtype=torch.float64), exponent)[1]


def _gamma_real(count: float) -> float:
    """gamma_n (:func:`_gamma`) for n = ceil(count)."""
    return _gamma(math.ceil(count))


def _evaluate_general(prob: _Problem, lam: Tensor, *, slopes: bool = True) -> _Evaluation:
    """One float64 pass over V for K candidates per group at any order a > 1, with rigorous
    bounds (:func:`_upper`, :func:`_pair_rounding`): S_a = sum_y q w^a and S_(1-a) = sum_y q / w^(a-1),
    with slopes dS_a/dlam = a sum_y q w^(a-1) (rho - 1) and dS_(1-a)/dlam = (1-a) sum_y q (rho - 1) / w^a."""
    a = prob.alpha
    lam_w = lam.unsqueeze(-1)  # (..., m, K, 1)
    rho = prob.rho  # (..., m, V)
    w = torch.addcmul(1.0 - lam_w, rho.unsqueeze(-2), lam_w)  # (..., m, K, V)
    lower, power_a, power_1a = _power_pair(w, a, rigorous=True)  # w^(a-1), w^a, w^(1-a)   (..., m, K, V)
    s_forward, s_reverse = _q_sum(power_a, prob.q), _q_sum(power_1a, prob.q)  # (..., m, K)
    round_forward, round_reverse = _pair_rounding(prob, lam)
    forward = _upper(prob, s_forward, a, round_forward)
    reverse = _upper(prob, s_reverse, 1.0 - a, round_reverse)
    if not slopes:
        return _Evaluation(forward, reverse, forward + math.nan, reverse + math.nan)
    r = rho.unsqueeze(-2) - 1.0  # (..., m, 1, V)
    forward_slope = a * _q_sum(lower.mul_(r), prob.q) / s_forward
    reverse_slope = (1.0 - a) * _q_sum(power_1a.div_(w).mul_(r), prob.q) / s_reverse
    return _Evaluation(forward, reverse, forward_slope / (a - 1.0), reverse_slope / (a - 1.0))


def _evaluate_float32(prob: _Problem, lam: Tensor, *, slopes: bool = True) -> _Evaluation:
    """The float32 search's pass at orders a != 2: estimates, certified by :func:`_certify`.

    With z = lam r: phi_p(w) = w^p - 1 - p z >= 0 for p in (a, 1-a) (so no sum cancels),
    sum_y Q w^p = 1 + sum_y Q phi_p(w), and dS_p/dlam = p sum_y Q r w^(p-1); the powers come
    from :func:`_power_pair`.
    """
    a, src = prob.alpha, prob.float32
    lam_w = lam.to(torch.float32).unsqueeze(-1)  # (..., m, K, 1)
    r = src.r.unsqueeze(-2)  # (..., m, 1, V)
    z = lam_w * r  # (..., m, K, V)
    w = torch.addcmul(1.0 - lam_w, src.rho.unsqueeze(-2), lam_w)  # (..., m, K, V)
    lower, power_a, power_1a = _power_pair(w, a, rigorous=False)  # w^(a-1), w^a, w^(1-a)
    out = []
    for p, power, before in ((a, power_a, lower), (1.0 - a, power_1a, None)):
        excess = _q_sum(torch.add(power, z, alpha=-p).sub_(1.0), src.q)  # sum Q phi_p(w) = sum Q w^p - 1
        if slopes:
            before = before if before is not None else power.div_(w)  # w^(p-1)
            slope = p * _q_sum(before.mul_(r), src.q)
        else:
            slope = excess + math.nan
        out.append(((torch.log1p(excess) / (a - 1.0)).clamp_min(0.0), slope / ((1.0 + excess) * (a - 1.0))))
    (forward, forward_slope), (reverse, reverse_slope) = out
    return _Evaluation(forward, reverse, forward_slope, reverse_slope)


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


def _update(lo: _End, hi: _End, cand: _End, feasible: Tensor, active: Tensor) -> tuple[_End, _End]:
    """Move lo up to the largest feasible candidate and hi down to the smallest infeasible one,
    for the ``active`` groups (..., m) only: a closed group keeps its answer, so it never
    depends on how many passes the other groups need."""
    best_lo, i_lo = torch.where(feasible, cand.lam, -1.0).max(-1, keepdim=True)
    best_hi, i_hi = torch.where(feasible, math.inf, cand.lam).min(-1, keepdim=True)
    up = active & (best_lo.squeeze(-1) > lo.lam)
    down = active & ((best_hi.squeeze(-1) < hi.lam) | ((best_hi.squeeze(-1) == hi.lam) & torch.isnan(hi.g)))
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


_NOISE = 1e-8
"""Divergences below this are dominated by the rounding allowances of :func:`_upper` (about
1e-11): no use for a log-scale model."""


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


def _next_candidates(lo: _End, hi: _End, level: Tensor, *, final: bool, noisy: bool) -> tuple[Tensor, Tensor]:
    """K = 3 weights per group between the rigorous bounds of :func:`_bounds`, and the upper bound.

    Before the last pass: the lower bound, the estimate of :func:`_estimate` and the upper
    bound (which tightens the next chord and tangent). In the last pass the upper bound can no
    longer become the answer, so its place goes to the estimate moved slightly towards the
    lower bound, in case the estimate overshoots lam* by a hair. A ``noisy`` (float32) search
    hedges towards the last feasible weight instead: its rounding can put the chord root, like
    the estimate, a hair above lam*.
    """
    lower, upper = _bounds(lo, hi)
    est = _estimate(lo, hi, level)
    # No usable model (e.g. D ~ 0 up to a pole at lam = 1): bisect in logit(lam) instead.
    x_mid = (torch.logit(lower, eps=1e-9) + torch.logit(upper, eps=1e-9)) / 2
    est = torch.where(torch.isfinite(est), est, torch.sigmoid(x_mid))
    est = torch.minimum(torch.maximum(est, lower), upper)
    third = est - _HEDGE * (est - (lo.lam if noisy else lower)) if final else upper
    return torch.stack((lower, third, est), dim=-1), upper


_HEDGE = 0.02
"""In the last pass, the fraction of (estimate - lower bound) by which the hedge undercuts the estimate."""


def _taylor_guess(prob: _Problem, hi: Tensor) -> Tensor:
    """Initial weights from the expansions in lam (r = P/Q - 1, mu_k = sum_y Q r^k):

    D_a(P_lam || Q) ~ a/2 mu2 lam^2 + a(a-2)/6 mu3 lam^3,  D_a(Q || P_lam) ~ a/2 mu2 lam^2 - a(a+1)/6 mu3 lam^3.
    Only a starting point: every candidate is verified.
    """
    a = prob.alpha
    mu2, mu3 = prob.chi2, prob.skew
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


_STEP_DOWN = (1.0 - 1e-6, 1.0 - 1e-4, 1.0 - 1e-2, 0.9, 0.5, 0.1)
"""Fractions of a float32 search's answer tried, in one float64 pass, if the certificate fails."""


def _forward_root(prob: _Problem) -> Tensor:
    """At a = 2, the largest lam (..., m) whose forward bound (:func:`_upper`) meets the level:
    with S_2 = 1 + 2 lam (A - 1) + lam^2 chi2, the root of 2 lam (A - 1) + lam^2 chi2 = R,
    R = expm1(level / (1 + 4 TAU) - shift), a hair lower so rounding keeps it feasible. (If
    chi2's cancellation puts it off, the search only starts from a slightly worse bracket.)"""
    a_minus_1 = prob.moments[..., 0] - 1.0
    shift = math.log1p(8.0 * _U) + math.log1p(prob.rel) + 2.0 * math.log1p(prob.scale)
    room = torch.expm1(prob.level / (1.0 + 4.0 * _TAU) - shift).clamp_min(0.0)
    root = room / (a_minus_1 + torch.sqrt(a_minus_1 * a_minus_1 + prob.chi2 * room))  # stable form
    return (root * (1.0 - 1e-12)).nan_to_num(1.0, posinf=1.0).clamp(0.0, 1.0)


def _search(prob: _Problem, out_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """The batched search of :func:`mollify_with_divergence`: (lam, divergence) (..., m) float64."""
    a = prob.alpha
    zero = torch.zeros_like(prob.level)  # (..., m)
    on_cpu = _device.reads_are_free(zero)  # may read flags to stop early
    hi = torch.where(prob.forced_zero, 0.0, 1.0) + zero
    if a == 2.0:
        evaluate = _evaluate_order2
        hi = torch.minimum(hi, _forward_root(prob))
    else:
        evaluate = _evaluate_general if prob.float32 is None else _evaluate_float32
    hi = _round_down(hi, out_dtype)
    at_zero = zero.unsqueeze(-1)  # (..., m, 1): lam = 0 is feasible with D = 0 and slope 0
    g0, g0_slope = _slack(prob, _Evaluation(at_zero, at_zero, at_zero, at_zero))
    lo = _End(zero, zero, zero, g0.squeeze(-1), g0_slope.squeeze(-1))
    hi = _End(hi, *(zero + math.nan,) * 4)
    if a == 2.0:  # hi is the forward root: often the answer, closing the bracket at once
        candidates = hi.lam.unsqueeze(-1)  # (..., m, 1)
    else:
        guess = _taylor_guess(prob, hi.lam)
        candidates = torch.stack((guess, torch.sqrt(guess * hi.lam), hi.lam), dim=-1)  # (..., m, K)
    level = prob.level.unsqueeze(-1)  # (..., m, 1)
    active = ~prob.forced_zero  # (..., m): groups still searching
    for i in range(1 + _SEARCH_PASSES):
        lam = torch.minimum(torch.maximum(candidates, lo.lam.unsqueeze(-1)), hi.lam.unsqueeze(-1))
        lam = _round_down(lam, out_dtype)  # (..., m, K)
        quick = i == 0 and a == 2.0 and on_cpu
        ev = evaluate(prob, lam, slopes=not quick)
        feasible = (ev.forward <= level) & (ev.reverse <= level)
        if quick:
            if bool(feasible.all()):
                # The usual case: the forward root meets the reverse cap too, so it is the answer
                # for every group (hi was an upper bound); no bracket to keep.
                return lam[..., 0], torch.maximum(ev.forward, ev.reverse)[..., 0]
            ev = evaluate(prob, lam)  # with the slopes the bracket needs
        use_f = ev.forward >= ev.reverse
        div = torch.where(use_f, ev.forward, ev.reverse)
        slope = torch.where(use_f, ev.forward_slope, ev.reverse_slope)
        cand = _End(lam, div, slope, *_slack(prob, ev))
        lo, hi = _update(lo, hi, cand, feasible, active)
        active = active & (hi.lam - lo.lam > _CLOSED)
        candidates, upper = _next_candidates(lo, hi, prob.level, final=i == _SEARCH_PASSES - 1,
                                             noisy=prob.float32 is not None)
        # A group is done once the rigorous upper bound on its optimum is within _CLOSED of lo.
        active = active & (upper - lo.lam > _CLOSED)
        if on_cpu and not bool(active.any()):
            break  # reading a flag costs nothing on the CPU; on accelerators all passes run
    return lo.lam, lo.div


def _certify(prob: _Problem, lam: Tensor, out_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """(lam, divergence bound) (..., m): the float32 search's lam where a float64 evaluation with
    rigorous bounds confirms it, else the largest certified of :data:`_STEP_DOWN` times it, else 0."""
    bound = _symmetric_bound(prob, lam.unsqueeze(-1)).squeeze(-1)  # (..., m)
    ok = bound <= prob.cap
    if _device.reads_are_free(lam) and bool(ok.all()):
        return lam, bound
    steps = torch.tensor(_STEP_DOWN, dtype=torch.float64, device=lam.device)
    tries = _round_down(lam.unsqueeze(-1) * steps, out_dtype)  # (..., m, K)
    tries_bound = _symmetric_bound(prob, tries)
    best, index = torch.where(tries_bound <= prob.cap.unsqueeze(-1), tries, -1.0).max(-1, keepdim=True)
    fallback = best.squeeze(-1).clamp_min(0.0)
    fallback_bound = torch.where(best >= 0, tries_bound.gather(-1, index), 0.0).squeeze(-1)
    return torch.where(ok, lam, fallback), torch.where(ok, bound, fallback_bound)


def _symmetric_bound(prob: _Problem, lam: Tensor) -> Tensor:
    """Rigorous float64 upper bound (..., m, K) on the symmetric divergence at candidates lam."""
    ev = _evaluate_general(prob, lam, slopes=False)
    return torch.where(lam > 0, torch.maximum(ev.forward, ev.reverse), 0.0)


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


@dataclass(frozen=True)
class Mollification:
    """What :func:`mollify_detailed` found, and the distributions it certified.

    Q = exp(log_q) and P_i = Q norm_i e_i, each ratio within ``normalisation_bound(V)`` of exact
    (docs/privacy.md, "Floating point"); a mixture formed from these is the one the
    certificate speaks of.
    """

    lam: Tensor  # (..., m) in the dtype of logp_priv: every one meets its cap
    divergence: Tensor  # (..., m) float64: a rigorous upper bound on the symmetric divergence at lam (the filter charges it)
    log_q: Tensor  # (..., V) float64: log Q
    ratios: Tensor  # (..., m, V) float64: e_i = P_i / Q up to the factor norm_i
    norm: Tensor  # (..., m) float64


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
    return mollify_detailed(logp_priv, logp_pub, alpha=alpha, cap=cap).lam


def mollify_with_divergence(
    logp_priv: Tensor,  # (..., m, V)
    logp_pub: Tensor,  # (..., V)
    *,
    alpha: float,
    cap: float | Tensor,  # broadcastable to (..., m)
) -> tuple[Tensor, Tensor]:  # (..., m) in the dtype of logp_priv, (..., m) float64
    """Largest lam in [0, 1] per group with max(D_a(P_lam || Q), D_a(Q || P_lam)) <= cap.

    See :func:`mollify_detailed`; returns its ``lam`` and ``divergence``.
    """
    found = mollify_detailed(logp_priv, logp_pub, alpha=alpha, cap=cap)
    return found.lam, found.divergence


def mollify_detailed(
    logp_priv: Tensor,  # (..., m, V)
    logp_pub: Tensor,  # (..., V)
    *,
    alpha: float,
    cap: float | Tensor,  # broadcastable to (..., m)
) -> Mollification:
    """Largest lam in [0, 1] per group with max(D_a(P_lam || Q), D_a(Q || P_lam)) <= cap.

    P_lam = lam P + (1 - lam) Q, with P a group's private next-token distribution and Q the
    public one (DP-Fusion, Sec. 3; docs/privacy.md, "DP-Fusion"). Both divergences are
    non-decreasing in lam, so the feasible set is an interval [0, lam*]. The search runs for a
    fixed number of passes, each evaluating K candidate weights for every group in one batched
    pass over the vocabulary, and moves a bracket [lo, hi] by Newton steps (upper bounds) and
    chords (lower bounds) on a convex transform of the constraint (see :func:`_slack`).

    Every returned lam meets its cap under exact arithmetic, whatever order a CPU, BLAS or GPU
    sums in (docs/privacy.md, "Floating point"): at a = 2 each candidate is accepted only if a
    float64 bound that holds for every summation order says so; at other orders a float32
    search proposes lam and one such float64 pass certifies it (stepping down if it fails).
    lam is exactly representable in the dtype of ``logp_priv``; lam = 1 when P itself meets the
    cap, lam = 0 when cap = 0 or when P puts mass where Q has none. Each group's answer depends
    on its own row, the public row and the public parameters only, never on the other groups.
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
    return mollify_checked(logp_priv, logp_pub, alpha=a, cap=_as_cap(cap, group_shape).to(logp_priv.device))


def mollify_checked(
    logp_priv: Tensor,  # (..., m, V)
    logp_pub: Tensor,  # (..., V)
    *,
    alpha: float,
    cap: Tensor,  # (..., m) float64, finite and >= 0: the caller has checked
    public_cap: Tensor | None = None,  # broadcastable to (..., m): decides a float32 search (default cap)
) -> Mollification:
    """:func:`mollify_detailed` for caps the caller has validated where it built them (finite
    and >= 0; ``alpha`` a valid order), so that the decoding step reads nothing back from the
    device (:mod:`tokendp._device`). The results are those of :func:`mollify_detailed`.

    Whether the search runs in float32 is decided for the whole batch (:func:`_float32_search`),
    so it must depend on public data only: pass ``public_cap`` when the caps are not public (the
    Rényi filter's caps come from the ledgers; its public pacing caps decide instead), else a
    group's cap would move every other group's answer (docs/privacy.md, "DP-Fusion with a
    per-group Rényi filter", Lemma 1).
    """
    lead = torch.broadcast_shapes(logp_priv.shape[:-2], logp_pub.shape[:-1])
    group_shape = torch.Size((*lead, logp_priv.shape[-2]))
    logp_priv = logp_priv.expand(*group_shape, logp_priv.shape[-1])
    logp_pub = logp_pub.expand(*lead, logp_pub.shape[-1])
    cap = torch.broadcast_to(cap, group_shape)
    public_cap = None if public_cap is None else torch.broadcast_to(public_cap, group_shape)
    per_position = group_shape[-1] * logp_priv.shape[-1] * 8  # bytes of one position's float64 ratios
    positions = lead.numel()
    if not _device.reads_are_free(cap) or positions * per_position <= _SLICE_BYTES:
        return _mollify_slice(logp_priv, logp_pub, alpha=alpha, cap=cap, public_cap=public_cap)
    width = max(1, _SLICE_BYTES // per_position)  # positions per slice

    def flat(x: Tensor | None) -> Tensor | None:  # (*lead, ...) -> (positions, ...)
        return None if x is None else x.reshape(positions, *x.shape[len(lead):])

    priv, pub, caps, public = map(flat, (logp_priv, logp_pub, cap, public_cap))
    parts = [_mollify_slice(priv[s], pub[s], alpha=alpha, cap=caps[s], public_cap=None if public is None else public[s])
             for s in (slice(i, i + width) for i in range(0, positions, width))]
    joined = {f.name: torch.cat([getattr(part, f.name) for part in parts]) for f in dataclasses.fields(Mollification)}
    return Mollification(**{name: x.reshape(*lead, *x.shape[1:]) for name, x in joined.items()})


_SLICE_BYTES = 4 << 20
"""Where reads are free (the CPU), a search over many positions (teacher forcing, a batch of
documents) runs on slices of positions whose float64 ratios take at most this many bytes
(one position at least): the search's passes over (..., m, K, V) then stay in the cache
instead of streaming from memory (4x faster per position at order 3, V = 49,152 and m = 6;
docs/performance.md). Each position's answer is its own, so slicing changes only the work
(and the float32 decision of :func:`_float32_search`, made per slice from public data)."""


def _mollify_slice(logp_priv: Tensor, logp_pub: Tensor, *, alpha: float, cap: Tensor,
                   public_cap: Tensor | None) -> Mollification:
    """:func:`mollify_checked` on one slice of positions (shapes already broadcast)."""
    out_dtype = logp_priv.dtype
    prob = _prepare(logp_priv, logp_pub, alpha, cap.to(torch.float64))
    whole = _whole(prob)
    if whole is not None and (not _device.reads_are_free(whole) or not bool(whole.isfinite().all())):
        decide = None if public_cap is None else public_cap.to(torch.float64)
        prob = _with_search_data(prob, logp_priv, logp_pub, decide)
        lam, divergence = _search(prob, out_dtype)
        if prob.float32 is not None:
            lam, divergence = _certify(prob, lam, out_dtype)
        lam, divergence = torch.where(whole.isfinite(), 1.0, lam), torch.where(whole.isfinite(), whole, divergence)
    elif whole is not None:  # where reads are free, every group meets its cap at lam = 1: nothing to search
        lam, divergence = torch.ones_like(whole), whole
    else:
        lam, divergence = _search(prob, out_dtype)
    return Mollification(lam.to(out_dtype), divergence, prob.log_q, prob.e, prob.norm)


def _whole(prob: _Problem) -> Tensor | None:
    """At orders other than 2, the rigorous bound (..., m) on each group's divergence at lam = 1
    where it meets the cap, else NaN (and NaN for forced groups); None at a = 2, whose search
    starts from its closed-form forward root instead.

    P itself often meets the cap (on the rewriter, 94% of the groups of a step outside the
    spans), and then lam = 1 is the answer: one float64 pass instead of a search. The test is
    each group's own, so its answer never depends on the other groups."""
    if prob.alpha == 2.0:
        return None
    bound = _symmetric_bound(prob, torch.ones_like(prob.cap).unsqueeze(-1)).squeeze(-1)  # (..., m)
    return torch.where((bound <= prob.cap) & ~prob.forced_zero, bound, math.nan)
