"""Renyi differential privacy: composition, conversion to (epsilon, delta), and amplification.

A mechanism is (a, r)-RDP if D_a(M(x) || M(x')) <= r for all neighbours x, x' (Mironov 2017,
Def. 4). RDP at a fixed order adds up under adaptive composition (Mironov 2017, Prop. 1), so an
accountant tracks a curve ``r(a)`` over a grid of orders and converts at the end, taking the best
order. Functions take and return numpy arrays aligned with ``orders``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy.special import gammaln, logsumexp

from tokendp.accounting._checks import check_delta, check_nonnegative, check_order, check_positive, check_rate
from tokendp.accounting._rounding import LIBM_UNITS, U, gamma, up, upper_sum
from tokendp.errors import InvalidParameterError

DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 3.5, 4.0, 4.5]
    + [float(a) for a in range(5, 65)]
    + [80.0, 96.0, 128.0, 192.0, 256.0, 512.0, 1024.0]
)
"""Orders for general RDP curves (the dp_accounting default grid, thinned below 5)."""

INTEGER_ORDERS: tuple[int, ...] = tuple(list(range(2, 65)) + [80, 96, 128, 192, 256, 512, 1024])
"""Integer orders, for the subsampling bounds that are exact (or proven) at integer orders only."""


def _orders_array(orders: Sequence[float]) -> np.ndarray:
    array = np.asarray(orders, dtype=np.float64)  # (K,)
    if array.ndim != 1 or array.size == 0:
        raise InvalidParameterError("orders must be a non-empty 1-D sequence of Renyi orders > 1")
    for order in array:
        check_order(float(order), name="every order")
    return array


def _integer_orders(orders: Sequence[int]) -> np.ndarray:
    array = _orders_array(orders)
    if not np.all(array == np.round(array)):
        raise InvalidParameterError(
            "subsampled RDP is computed at integer orders only (the binomial expansion); pass integer orders >= 2"
        )
    return array.astype(np.int64)


CONVERSION_UNITS = 16.0
"""Relative error, in units of U, of every term of an epsilon sum: the offset terms below (at most
10 U), products count * value (U): see :mod:`tokendp.accounting._rounding`."""


def conversion_offset(alpha: float | np.ndarray, delta: float) -> float | np.ndarray:
    """The order-dependent constant of the improved RDP -> (epsilon, delta) conversion.

    eps = r + log((a-1)/a) - (log delta + log a)/(a-1)   (Canonne, Kamath, Steinke 2020, Prop. 12;
    Balle et al. 2020, Thm. 21). This returns everything except ``r``, to float64 precision (for
    calibration and display; reported epsilons round the sum up: :func:`offset_terms`).
    """
    a = np.asarray(alpha, dtype=np.float64)
    offset = np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1.0)
    return float(offset) if offset.ndim == 0 else offset


def offset_terms(alpha: float, delta: float) -> tuple[float, float, float, float]:
    """The conversion offset of :func:`conversion_offset` as four terms, each within 10 U of the
    exact value it stands for (module ``_rounding``'s error model), for :func:`epsilon_sum`.

    log((a-1)/a) is log1p(-1/a) for a >= 2 (the argument within U, log1p's condition number
    1/((a-1) log(a/(a-1))) <= 1/log 2 there, plus 8 U), else log(a-1) - log(a) (a - 1 is exact
    for 1 < a < 2 by Sterbenz's lemma; each log within 8 U); the last term is then 0. Then
    -log(delta)/(a-1) and -log(a)/(a-1): a log within 8 U, a - 1 within U (exact for
    a <= 2^53), the division within U. Scalar ``math`` functions, so that the same order always
    gives the same terms, bit for bit (a vectorised log may differ from the scalar one by an ulp).
    """
    a = float(alpha)
    if a >= 2.0:
        head, tail = math.log1p(-1.0 / a), 0.0
    else:
        head, tail = math.log(a - 1.0), -math.log(a)
    return head, tail, -math.log(delta) / (a - 1.0), -math.log(a) / (a - 1.0)


def offset_columns(alphas: np.ndarray, delta: float) -> list[np.ndarray]:
    """:func:`offset_terms` at every order, as four arrays  # 4 x (K,)"""
    return [np.array(column, dtype=np.float64) for column in zip(*(offset_terms(float(a), delta) for a in alphas))]


def check_above_offset(epsilon: float, alpha: float, delta: float) -> None:
    """InvalidParameterError unless ``epsilon`` is above the conversion offset at ``alpha`` and
    ``delta`` (rounded up, :func:`epsilon_sum`), where any use of the private data costs more
    than the target. The message names the smallest epsilon that is accepted, to 4 digits."""
    floor = epsilon_sum([], offset_terms(alpha, delta))
    if epsilon > floor:
        return
    smallest = float(f"{floor:.4g}")
    while smallest <= floor:
        smallest = float(f"{math.nextafter(smallest, math.inf) + 10 ** (math.floor(math.log10(floor)) - 3):.4g}")
    raise InvalidParameterError(
        f"epsilon {epsilon:g} is not above {conversion_offset(alpha, delta):.6g}, the cost of converting RDP at "
        f"alpha={alpha:g} to delta={delta:g}; the smallest epsilon accepted at this alpha and delta is "
        f"{smallest:.4g}: raise epsilon or delta, or choose another alpha")


def epsilon_sum(rdp_terms: Sequence[float | np.ndarray], offsets: Sequence[float | np.ndarray]) -> float | np.ndarray:
    """An upper bound of sum(rdp_terms) + the conversion offset, under any summation order
    (:func:`tokendp.accounting._rounding.upper_sum`): the improved conversion of an RDP value made
    of ``rdp_terms`` (each within 16 U: given values, or products count * r), with ``offsets``
    from :func:`offset_terms` or :func:`offset_columns`. Elementwise over orders for arrays."""
    return upper_sum([*rdp_terms, *offsets], units=CONVERSION_UNITS)


def compose_rdp(*curves: Sequence[float] | np.ndarray) -> np.ndarray:
    """Adaptive composition: RDP curves on the same grid add (Mironov 2017, Prop. 1). The sum is
    rounded up, an upper bound of the exact sum under any order of addition (module ``_rounding``)."""
    if not curves:
        raise InvalidParameterError("compose_rdp needs at least one RDP curve")
    arrays = [np.asarray(c, dtype=np.float64) for c in curves]
    if any(a.shape != arrays[0].shape for a in arrays):
        raise InvalidParameterError("all RDP curves must be evaluated on the same orders (same shape)")
    return np.asarray(upper_sum(arrays))


def rdp_to_epsilon_and_order(*, rdp: Sequence[float] | float, orders: Sequence[float] | float, delta: float) -> tuple[float, float]:
    """Best (epsilon, order) over the grid by the improved conversion.

    For each order a with RDP r(a): eps(a) = r(a) + log((a-1)/a) - (log delta + log a)/(a-1)
    (Canonne-Kamath-Steinke 2020, Prop. 12; Balle et al. 2020, Thm. 21); the result is the
    minimum over the grid, each eps(a) rounded up (:func:`epsilon_sum`), so it is never below
    the exact value. Two exact refinements, both sound:

    * if r(a) = 0 at some order, D_a = 0 forces identical output distributions, so epsilon = 0
      (the conversion's constant would otherwise be reported for a mechanism that leaks nothing);
    * a negative minimum is reported as 0, since (eps, delta)-DP with eps < 0 implies (0, delta)-DP.

    Infinite RDP at an order (unknown or unbounded) simply never wins.
    """
    delta = check_delta(delta)
    alphas = _orders_array(np.atleast_1d(orders))  # (K,)
    values = np.atleast_1d(np.asarray(rdp, dtype=np.float64))  # (K,)
    if values.shape != alphas.shape:
        raise InvalidParameterError(f"rdp has {values.size} values but there are {alphas.size} orders; pass one per order")
    if np.any(np.isnan(values)) or np.any(values < 0):
        raise InvalidParameterError("RDP values must be >= 0 (or +inf); got a negative or NaN value")
    eps, best = grid_epsilon([values], offset_columns(alphas, delta))
    return eps, float(alphas[best])


def grid_epsilon(terms: Sequence[np.ndarray], offsets: Sequence[np.ndarray]) -> tuple[float, int]:
    """(epsilon, index of its order) for an RDP curve that is the sum of ``terms`` on a grid of
    orders with conversion ``offsets`` (:func:`offset_columns`): per order, the improved
    conversion rounded up (:func:`epsilon_sum`; each term within 16 U, e.g. a product count * r),
    minimised over the grid. 0 at an order where every term is 0 (D_a = 0: the output ignores
    the unit); a negative minimum is 0. A function of the terms' multiset, so a Ledger and an
    accountant that hold the same terms agree bit for bit."""
    zero = np.all([np.asarray(t) == 0 for t in terms], axis=0)  # (K,)
    if np.any(zero):
        return 0.0, int(np.argmax(zero))
    eps = epsilon_sum(terms, offsets)  # (K,)
    best = int(np.argmin(eps))
    return max(0.0, float(eps[best])), best


def rdp_to_epsilon(*, rdp: Sequence[float] | float, orders: Sequence[float] | float, delta: float) -> float:
    """Epsilon from an RDP curve; see :func:`rdp_to_epsilon_and_order`."""
    return rdp_to_epsilon_and_order(rdp=rdp, orders=orders, delta=delta)[0]


def _log_cosh(x: np.ndarray) -> np.ndarray:
    """log cosh(x) for x >= 0: log1p(2 sinh(x/2)^2), accurate near 0; x - log 2 + log1p(e^-2x) beyond."""
    small = np.minimum(x, 20.0)
    return np.where(x > 20.0, x - math.log(2.0) + np.log1p(np.exp(-2.0 * x)), np.log1p(2.0 * np.sinh(small / 2.0) ** 2))


_LOG_COSH_UNITS = 25.0  # log1p(2 sinh(x/2)^2): sinh 8 U, its square 17 U, log1p (condition <= 1) 8 U more


def pure_dp_to_rdp(*, epsilon: float, orders: Sequence[float]) -> np.ndarray:
    """The tight RDP curve of an epsilon-DP mechanism, rounded up.

    r(a) = eps - log((1 + e^-eps) / (1 + e^-(2a-1)eps)) / (a-1), attained by randomized response
    (Steinke 2024, "Tight RDP & zCDP bounds from pure DP", differentialprivacy.org, Thm. 4),
    evaluated as log(cosh((a-1/2)eps) / cosh(eps/2)) / (a-1), which keeps its precision for small
    eps. It is <= min(eps, a eps^2 / 2). Upper bound: log cosh is increasing, so its first
    argument is rounded up (a - 1/2 is exact for a < 2^52, the product within U); each log cosh
    is within 25 U and each division within U, and the difference is rounded up (module
    ``_rounding``). Below eps = 1e-100, where log cosh would underflow, the curve is a eps^2 / 2
    (equal to r(a) to first order), rounded up and at least the smallest normal float: a positive
    eps never yields exactly 0 (which the conversion would read as "no privacy loss").
    """
    epsilon = check_nonnegative("epsilon", epsilon)
    alphas = _orders_array(orders)  # (K,)
    if epsilon == 0:
        return np.zeros_like(alphas)
    if epsilon < 1e-100:
        return np.maximum(up(alphas * epsilon**2 / 2.0, units=2.0), np.finfo(np.float64).tiny)
    high = up((alphas - 0.5) * epsilon, units=1.0)  # (K,)
    terms = [_log_cosh(high) / (alphas - 1.0), -_log_cosh(np.float64(epsilon / 2.0)) / (alphas - 1.0)]  # 2 x (K,)
    return np.asarray(upper_sum(terms, units=_LOG_COSH_UNITS + 1.0))


def _log_expm1(x: np.ndarray) -> np.ndarray:
    """log(e^x - 1) for x >= 0, stable for small and large x (-inf at x = 0)."""
    with np.errstate(divide="ignore", over="ignore"):
        return np.where(x > 30.0, x + np.log1p(-np.exp(-x)), np.log(np.expm1(np.minimum(x, 30.0))))


def _binomial_moment_rdp(a: int, q: float, exponents: np.ndarray) -> float:
    """1/(a-1) log A for A = P(K <= 1) + sum_{k=2}^{a} P(K = k) e^{x_k}, K ~ Binomial(a, q), x_k >= 0,
    rounded up; ``exponents`` are upper bounds of the x_k (A grows with each).

    Since the binomial probabilities sum to 1, A - 1 = sum_{k>=2} P(K = k)(e^{x_k} - 1) >= 0; it is
    summed in log space and log A = log(1 + (A - 1)) taken with logaddexp, so a tiny but positive
    RDP never rounds to 0 (which the conversion would read as "no privacy loss").

    Rounding (module ``_rounding``'s error model): each log term s_k = log C(a,k) + k log q +
    (a-k) log1p(-q) + log(e^{x_k} - 1) is a sum of five parts, each within 9 U of its value plus
    9 U absolute (log of expm1), so s_k is within E_k = (9 U + gamma_5)(sum of |parts| + 1);
    logsumexp of n terms is within (9 + 2n) U + 8 U log n + U |result| (shift, exp, sum, log, add);
    log(1 + e^v) is increasing with slope < 1, so it is taken at v plus both errors, and is
    itself within 20 U; the division by the exact a - 1 within U more.
    """
    k = np.arange(2, a + 1, dtype=np.float64)  # (a-1,)
    parts = np.stack([np.full_like(k, gammaln(np.float64(a + 1))), -gammaln(k + 1), -gammaln(a - k + 1),
                      k * math.log(q), (a - k) * math.log1p(-q), _log_expm1(exponents)])  # (6, a-1)
    terms = np.sum(parts, axis=0)  # (a-1,) log P(K = k) + log(e^{x_k} - 1)
    live = np.isfinite(terms)  # x_k = 0 gives -inf: the term is exactly 0
    if not np.any(live):
        return 0.0
    log_excess = float(logsumexp(terms[live]))
    if math.isinf(log_excess):
        return math.inf
    n = int(np.count_nonzero(live))
    part_error = float(np.max(2.0 * ((LIBM_UNITS + 1.0) * U + gamma(6)) * (np.sum(np.abs(parts[:, live]), axis=0) + 1.0)))
    sum_error = 2.0 * ((9.0 + 2.0 * n) * U + 8.0 * U * math.log(n) + U * abs(log_excess))
    high = upper_sum([log_excess, part_error, sum_error])
    log_a = up(float(np.logaddexp(0.0, high)), units=20.0)
    return max(up(log_a / (a - 1), units=1.0), float(np.finfo(np.float64).tiny))


def poisson_subsampled_rdp(
    *, sampling_rate: float, base_rdp: Callable[[int], float], orders: Sequence[int] = INTEGER_ORDERS
) -> np.ndarray:
    """General upper bound for a Poisson-subsampled mechanism (Zhu & Wang 2019, Thm. 6).

    If M is (l, e(l))-RDP for integer l >= 2, then M o PoissonSample(q) satisfies, at integer a >= 2,

        e'(a) <= 1/(a-1) log[ (1-q)^(a-1) (a q - q + 1) + C(a,2) q^2 (1-q)^(a-2) e^{e(2)}
                               + 3 sum_{l=3}^{a} C(a,l) q^l (1-q)^(a-l) e^{(l-1) e(l)} ].

    The first term is P(K <= 1) for K ~ Binomial(a, q), so the bracket is evaluated as
    1 + sum_{l>=2} P(K = l)(w_l e^{(l-1) e(l)} - 1) with w_2 = 1, w_l = 3, in log space, and
    rounded up (:func:`_binomial_moment_rdp`).
    ``base_rdp`` returns the base mechanism's RDP at an integer order (may be +inf).
    Add/remove adjacency.
    """
    q = check_rate("sampling_rate", sampling_rate)
    alphas = _integer_orders(orders)  # (K,)
    if q == 0:
        return np.zeros(alphas.shape, dtype=np.float64)
    ells = np.arange(2, int(alphas.max()) + 1)  # (L,)
    base = np.array([float(base_rdp(int(ell))) for ell in ells], dtype=np.float64)  # (L,)
    if np.any(np.isnan(base)) or np.any(base < 0):
        raise InvalidParameterError("base_rdp must return RDP values >= 0 (or +inf) at every integer order >= 2")
    if q == 1:
        return base[alphas - 2]
    exponents = upper_sum([(ells - 1) * base, np.where(ells >= 3, math.log(3.0), 0.0)], units=LIBM_UNITS)  # (L,)
    return np.array([_binomial_moment_rdp(int(a), q, exponents[: a - 1]) for a in alphas])


def subsampled_gaussian_rdp(*, sampling_rate: float, noise_multiplier: float, orders: Sequence[int] = INTEGER_ORDERS) -> np.ndarray:
    """RDP of the Poisson-subsampled Gaussian mechanism (DP-SGD step), exact at integer orders.

    With sensitivity 1 and noise std sigma, at integer a (Mironov, Talwar, Zhang 2019, Sec. 3.3):
    r(a) = 1/(a-1) log sum_{k=0}^{a} C(a,k) (1-q)^(a-k) q^k exp((k^2 - k) / (2 sigma^2)).
    Add/remove adjacency, as in dp_accounting's RdpAccountant. Rounded up (the exponents, then
    the sum: :func:`_binomial_moment_rdp`).
    """
    q = check_rate("sampling_rate", sampling_rate)
    sigma = check_positive("noise_multiplier", noise_multiplier)
    alphas = _integer_orders(orders)  # (K,)
    if q == 0:
        return np.zeros(alphas.shape, dtype=np.float64)
    if q == 1:
        return up(alphas / (2 * sigma**2), units=2.0)
    k = np.arange(2, int(alphas.max()) + 1, dtype=np.float64)  # (L,)
    exponents = up((k * k - k) / (2 * sigma**2), units=2.0)  # (L,): sigma^2 and the division, within U each
    return np.array([_binomial_moment_rdp(int(a), q, exponents[: a - 1]) for a in alphas])


def dp_sgd_rdp(*, sampling_rate: float, noise_multipliers: Sequence[float], orders: Sequence[int] = INTEGER_ORDERS) -> np.ndarray:
    """RDP of DP-SGD with a per-step noise schedule: the sum over steps of the subsampled Gaussian.

    ``noise_multipliers`` holds one sigma per step (a schedule such as rise-and-reset); steps
    sharing a sigma are computed once. Composition: Mironov 2017, Prop. 1. Rounded up.
    """
    return np.asarray(upper_sum(_dp_sgd_terms(sampling_rate, noise_multipliers, orders), units=1.0))


def _dp_sgd_terms(sampling_rate: float, noise_multipliers: Sequence[float], orders: Sequence[int]) -> list[np.ndarray]:
    """n_s times the subsampled Gaussian's curve, one term per distinct sigma (each within U)."""
    sigmas = np.asarray(noise_multipliers, dtype=np.float64)  # (S,)
    if sigmas.ndim != 1 or sigmas.size == 0:
        raise InvalidParameterError("noise_multipliers must be a non-empty 1-D sequence, one sigma per step")
    values, counts = np.unique(sigmas, return_counts=True)
    return [int(n) * subsampled_gaussian_rdp(sampling_rate=sampling_rate, noise_multiplier=float(s), orders=orders)
            for s, n in zip(values, counts)]


def dp_sgd_epsilon(
    *, sampling_rate: float, noise_multipliers: Sequence[float], delta: float, orders: Sequence[int] = INTEGER_ORDERS
) -> float:
    """Epsilon of DP-SGD with a noise schedule: the curve of :func:`dp_sgd_rdp` converted as
    :func:`rdp_to_epsilon` does, its terms and offsets rounded up in one sum (:func:`grid_epsilon`),
    as a Ledger charged the same steps computes it.

    This is the RDP accountant (``--accountant rdp``, as Opacus's ``RDPAccountant``). DP-SGD's
    default, which ``tokendp finetune`` calibrates and reports with, is the tighter
    :func:`~tokendp.accounting.pld.dp_sgd_pld_epsilon` (1.515 where this gives 1.725 for q 0.01,
    sigma 1.1, 1,000 steps, delta 1e-5); :func:`~tokendp.accounting.dpsgd.dp_sgd_schedule_epsilon`
    takes either by name."""
    delta = check_delta(delta)
    terms = _dp_sgd_terms(sampling_rate, noise_multipliers, orders)
    return grid_epsilon(terms, offset_columns(_integer_orders(orders), delta))[0]
