"""DP-SGD noise schedules: ATDP's rise-and-reset multipliers and the calibration of sigma_0.

A schedule is ``sigma_t = sigma_0 * m_e(t)``: one multiplier ``m_e`` per epoch e, applied to every
step of that epoch. The multipliers are a function of public parameters and of jitter draws that
the caller makes before training, independently of the data; the privacy cost of the whole run
is then the composition of one Poisson-subsampled Gaussian per step, each at its own sigma
(docs/privacy.md, "DP-SGD and ATDP"), computed by one of two accountants (``ACCOUNTANTS``):

* ``"pld"`` (the default): the privacy loss distribution, discretised pessimistically and
  composed by FFT (:func:`~tokendp.accounting.pld.dp_sgd_pld_epsilon`, Google's dp-accounting);
  close to the exact epsilon (within about the grid width 1e-4 plus the composition's spread),
  the number Opacus's PRV accountant estimates;
* ``"rdp"``: the subsampled Gaussian's RDP at integer orders 2..1024, summed over the steps and
  converted (:func:`~tokendp.accounting.rdp.dp_sgd_epsilon`); looser (about 13% for q 0.01,
  sigma 1.1, 1,000 steps), and the one a step-by-step :class:`~tokendp.accounting.ledger.Ledger`
  charges.

Both are upper bounds of the run's epsilon; calibration uses the accountant that reports.

Rise and reset (ATDP, arXiv 2509.23246, Sec. 3; the paper gives no formula, this one is
tokendp's): m_0 = 1 and, for e >= 1,

    m_e = m_{e-1} (1 + gamma) (1 + u_e),   reset to m_e = 1 when that exceeds ``ceiling``,

with u_e in [-jitter, jitter] (uniform draws given by the caller). Every m_e lies in
[(1 - jitter), ceiling], so sigma never drops below (1 - jitter) sigma_0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import brentq

from tokendp.accounting._checks import check_count, check_delta, check_nonnegative, check_positive, check_rate
from tokendp.accounting.pld import MIN_NOISE_MULTIPLIER, dp_sgd_pld_epsilon
from tokendp.accounting.rdp import INTEGER_ORDERS, dp_sgd_epsilon
from tokendp.errors import InvalidParameterError

MAX_NOISE_MULTIPLIER = 1e4
"""Calibration searches sigma_0 up to this value; a target that needs more is refused."""

ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp")
"""DP-SGD accountants, the default first (module docstring)."""

DEFAULT_ACCOUNTANT = "pld"

_DESCRIPTIONS = {
    "pld": "PLD of the Poisson-subsampled Gaussian (Google dp-accounting, pessimistic connect-the-dots discretisation, "
           "grid 1e-4, FFT composition over the steps at each step's sigma)",
    "rdp": "RDP of the Poisson-subsampled Gaussian, exact at integer orders 2..1024, composed step by step at each step's "
           "sigma and converted at the best order",
}


def check_accountant(accountant: str) -> str:
    """``accountant`` if it names one of ``ACCOUNTANTS``, else a clear error."""
    if accountant not in ACCOUNTANTS:
        raise InvalidParameterError(f"unknown DP-SGD accountant {accountant!r}; choose one of {', '.join(ACCOUNTANTS)}")
    return accountant


def describe_accountant(accountant: str) -> str:
    """One line naming the accountant and its method, for certificates."""
    return _DESCRIPTIONS[check_accountant(accountant)]


def dp_sgd_schedule_epsilon(*, sampling_rate: float, noise_multipliers: Sequence[float], delta: float,
                            accountant: str = DEFAULT_ACCOUNTANT, orders: Sequence[int] = INTEGER_ORDERS) -> float:
    """Epsilon of DP-SGD with one sigma per step by ``accountant`` (``orders``: the RDP grid)."""
    if check_accountant(accountant) == "pld":
        return dp_sgd_pld_epsilon(sampling_rate=sampling_rate, noise_multipliers=noise_multipliers, delta=delta)
    return dp_sgd_epsilon(sampling_rate=sampling_rate, noise_multipliers=noise_multipliers, delta=delta, orders=orders)


def rise_and_reset(*, epochs: int, gamma: float, ceiling: float, jitter: float, draws: Sequence[float]) -> np.ndarray:
    """Multipliers m_0 .. m_{E-1} of the rise-and-reset schedule (module docstring).

    ``draws`` holds E - 1 numbers in [0, 1] (independent uniforms, drawn before training from a
    generator the data never touches); u_e = jitter (2 draws[e-1] - 1). ``gamma`` = 0 and
    ``jitter`` = 0 give DP-SGD's constant schedule.
    """
    epochs = check_count("epochs", epochs)
    gamma = check_nonnegative("gamma", gamma)
    jitter = check_nonnegative("jitter", jitter)
    if jitter >= 1:
        raise InvalidParameterError(f"jitter must be in [0, 1), got {jitter!r}; it is a relative change of the noise multiplier")
    ceiling = check_positive("ceiling", ceiling)
    if ceiling < 1:
        raise InvalidParameterError(f"ceiling must be >= 1 (a multiple of sigma_0), got {ceiling!r}")
    u = np.asarray(draws, dtype=np.float64)  # (E-1,)
    if u.shape != (epochs - 1,) or np.any(~np.isfinite(u)) or np.any(u < 0) or np.any(u > 1):
        raise InvalidParameterError(f"draws must be {epochs - 1} numbers in [0, 1] (one per epoch after the first)")
    multipliers = np.ones(epochs, dtype=np.float64)  # (E,)
    for e in range(1, epochs):
        rise = multipliers[e - 1] * (1.0 + gamma) * (1.0 + jitter * (2.0 * u[e - 1] - 1.0))
        multipliers[e] = 1.0 if rise > ceiling else rise
    return multipliers


def schedule_noise_multipliers(*, noise_multiplier: float, multipliers: Sequence[float], steps_per_epoch: int) -> np.ndarray:
    """sigma_t for every step: sigma_0 m_e repeated ``steps_per_epoch`` times per epoch."""
    sigma0 = check_positive("noise_multiplier", noise_multiplier)
    steps = check_count("steps_per_epoch", steps_per_epoch)
    m = np.asarray(multipliers, dtype=np.float64)  # (E,)
    if m.ndim != 1 or m.size == 0 or np.any(~np.isfinite(m)) or np.any(m <= 0):
        raise InvalidParameterError("multipliers must be a non-empty sequence of finite numbers > 0, one per epoch")
    return np.repeat(sigma0 * m, steps)  # (E * steps,)


def schedule_epsilon(*, noise_multiplier: float, multipliers: Sequence[float], steps_per_epoch: int, sampling_rate: float,
                     delta: float, accountant: str = DEFAULT_ACCOUNTANT, orders: Sequence[int] = INTEGER_ORDERS) -> float:
    """Epsilon of DP-SGD run for len(multipliers) epochs of ``steps_per_epoch`` steps, step t at
    sigma_0 m_e(t), by ``accountant`` (:func:`dp_sgd_schedule_epsilon`) at ``delta``."""
    sigmas = schedule_noise_multipliers(noise_multiplier=noise_multiplier, multipliers=multipliers, steps_per_epoch=steps_per_epoch)
    return dp_sgd_schedule_epsilon(sampling_rate=sampling_rate, noise_multipliers=sigmas, delta=delta, accountant=accountant,
                                   orders=orders)


def calibrate_noise_multiplier(*, epsilon: float, delta: float, sampling_rate: float, steps_per_epoch: int,
                               multipliers: Sequence[float], accountant: str = DEFAULT_ACCOUNTANT,
                               orders: Sequence[int] = INTEGER_ORDERS) -> float:
    """The smallest sigma_0 (to 1e-6 relative with RDP, 1e-5 with the PLD) whose schedule meets ``epsilon`` at ``delta`` by
    ``accountant``, the same one :func:`schedule_epsilon` reports with.

    Epsilon decreases in sigma_0 (each step's RDP does at every order, and each step's privacy
    loss distribution is dominated by that of a larger sigma), so the root is found by Brent's
    method on log sigma_0 and then checked with the reporting accountant: the value returned
    always meets the target. A target that needs sigma_0 > MAX_NOISE_MULTIPLIER is refused with
    what to change.
    """
    check_accountant(accountant)
    target = check_positive("epsilon", epsilon)
    delta = check_delta(delta)
    q = check_rate("sampling_rate", sampling_rate)
    if q == 0:
        raise InvalidParameterError("sampling_rate must be > 0 to train on any record")

    values: dict[float, float] = {}  # log sigma_0 -> excess: a PLD evaluation costs a fraction of a second

    def excess(log_sigma: float) -> float:
        if log_sigma not in values:
            values[log_sigma] = schedule_epsilon(noise_multiplier=math.exp(log_sigma), multipliers=multipliers,
                                                 steps_per_epoch=steps_per_epoch, sampling_rate=q, delta=delta,
                                                 accountant=accountant, orders=orders) - target
        return values[log_sigma]

    def unreachable() -> InvalidParameterError:
        return InvalidParameterError(
            f"epsilon {target:g} at delta {delta:g} is unreachable with {len(multipliers) * steps_per_epoch} steps at sampling rate "
            f"{q:.4g} (it needs a noise multiplier above {MAX_NOISE_MULTIPLIER:g}); train fewer epochs, use a smaller batch "
            "(a lower sampling rate), or allow a larger epsilon or delta")

    high = math.log(MAX_NOISE_MULTIPLIER)
    if accountant == "rdp":
        if excess(high) > 0:
            raise unreachable()
        low = math.log(1e-2)
    else:
        low, high = _pld_bracket(excess, unreachable, target=target, delta=delta, sampling_rate=q,
                                 steps_per_epoch=steps_per_epoch, multipliers=multipliers, high=high)
    if excess(low) <= 0:
        return math.exp(low)
    precise = accountant == "rdp"  # the PLD is a step function on its 1e-4 grid: a finer search buys nothing
    log_sigma = brentq(excess, low, high, xtol=1e-9 if precise else 1e-5, rtol=1e-9 if precise else 1e-5)
    sigma = math.exp(log_sigma)
    while excess(math.log(sigma)) > 0:  # the root may sit a hair above the target: step up until it is met
        sigma *= 1 + 1e-6
    return sigma


def _pld_bracket(excess, unreachable, *, target: float, delta: float, sampling_rate: float, steps_per_epoch: int,
                 multipliers: Sequence[float], high: float) -> tuple[float, float]:
    """log sigma_0 bounds [low, high] for the PLD search, with excess(high) <= 0.

    A PLD at a small sigma spans a wide range of losses (its grid grows as 1/sigma^2), so the
    search starts from the RDP calibration (cheap, and above the PLD's sigma_0 since RDP's
    epsilon is the larger) and steps down by factors of 1.25 until the target is missed; it
    never goes below the sigma_0 whose smallest sigma_t is MIN_NOISE_MULTIPLIER.
    """
    floor = math.log(MIN_NOISE_MULTIPLIER / float(np.min(np.asarray(multipliers, dtype=np.float64))))
    try:
        start = math.log(calibrate_noise_multiplier(epsilon=target, delta=delta, sampling_rate=sampling_rate,
                                                    steps_per_epoch=steps_per_epoch, multipliers=multipliers, accountant="rdp"))
    except InvalidParameterError:  # RDP needs more noise than the cap; the PLD may not
        if excess(high) > 0:
            raise unreachable() from None
        start = high
    top = max(start, floor)
    while excess(top) > 0:  # RDP's sigma_0 missing the PLD target would be a surprise; be safe anyway
        if top >= high:
            raise unreachable()
        top = min(high, top + math.log(1.25))
    bottom = top
    while bottom > floor:
        bottom = max(floor, bottom - math.log(1.25))
        if excess(bottom) > 0:
            break
    return bottom, top
