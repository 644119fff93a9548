"""DP-SGD's epsilon from its privacy loss distribution (PLD), the default DP-SGD accountant.

The numerics are Google's ``dp-accounting`` (``dp_accounting.pld``), not tokendp's: one step of
DP-SGD is the Poisson-subsampled Gaussian (sensitivity 1, noise std sigma, sampling rate q) under
add/remove adjacency; its PLD pair (add and remove) is discretised on a grid of width
``discretization`` by the connect-the-dots construction in its *pessimistic* mode (Doroshenko,
Ghazi, Kamath, Kumar, Manurangsi, "Connect the Dots: Tighter Discrete Approximations of Privacy
Loss Distributions", PETS 2022: the pessimistic discretised pair dominates the exact one, so
every hockey-stick divergence it gives is an upper bound), the steps are composed by FFT
convolution (Koskela, Jalko, Honkela, AISTATS 2020; Meiser and Mohammadi 2018), with the mass
cut from the tails of the noise (mass e^-50) and of each composition (1e-15) moved to the
infinite loss, and epsilon is the smallest one whose hockey-stick divergence of the composed pair
is at most the delta asked for (Balle and Wang 2018 / Sommer et al. 2019 for the PLD form of
delta(epsilon)). Epsilon of the whole run (docs/privacy.md, "DP-SGD and ATDP"):

    eps = min { e : max(H_e(P_add), H_e(P_remove)) <= delta - slack },
    slack = FFT_SLACK + RELATIVE_SLACK * delta,

the slack covering the floating-point error of the FFT convolution, which the discretisation's
pessimism does not: an FFT's output is off by about 1e-17 per grid point here (measured as the
negative masses it returns where the exact masses are ~0: at most 1.5e-17 per point and 1e-12 in
all over 4.8e5 points, for q 0.01 to 1, sigma 0.8 to 30 and 1,000 to 10,000 steps), so 1e-10 is a
hundredfold margin; the relative part covers the rounding of the final sums and logarithm. A
delta too small for that slack (below 2 FFT_SLACK) is refused: use the RDP accountant there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tokendp.accounting._checks import check_delta, check_positive, check_rate
from tokendp.errors import InvalidParameterError

DISCRETIZATION = 1e-4
"""Width of the privacy-loss grid (dp-accounting's default): epsilon is pessimistic to about this."""

FFT_SLACK = 1e-10
"""Absolute delta withheld for the FFT's rounding (module docstring)."""

RELATIVE_SLACK = 1e-6
"""Relative delta withheld for the rounding of the final sums and logarithm."""

MIN_NOISE_MULTIPLIER = 0.1
"""The smallest sigma the PLD accountant takes: its grid spans about 1/(2 sigma^2) + 10/sigma in
steps of 1e-4, so it grows as 1/sigma^2 (1.5 million points at 0.1). Such a sigma gives an
epsilon in the hundreds for any usual q; the RDP accountant takes any sigma."""


def pld_delta_target(delta: float) -> float:
    """The delta the composed PLD is asked for: ``delta`` less the slack of the module docstring."""
    delta = check_delta(delta)
    if delta < 2 * FFT_SLACK:
        raise InvalidParameterError(f"delta {delta:g} is too small for the PLD accountant (its floating-point slack is "
                                    f"{FFT_SLACK:g}); use the RDP accountant (--accountant rdp) for a delta below {2 * FFT_SLACK:g}")
    return delta - FFT_SLACK - RELATIVE_SLACK * delta


def dp_sgd_pld_epsilon(*, sampling_rate: float, noise_multipliers: Sequence[float], delta: float,
                       discretization: float = DISCRETIZATION) -> float:
    """Epsilon of DP-SGD with one sigma per step, by the pessimistic PLD (module docstring).

    Steps that share a sigma are composed at once (``self_compose``), the distinct sigmas in
    increasing order, so that a schedule and a ledger holding the same steps get the same value
    bit for bit. A rate of 0 samples no record: epsilon 0. +inf if no finite epsilon meets delta.
    Needs ``dp-accounting`` (``pip install "tokendp[train]"``).
    """
    q = check_rate("sampling_rate", sampling_rate)
    target = pld_delta_target(delta)
    width = check_positive("discretization", discretization)
    sigmas = np.asarray(noise_multipliers, dtype=np.float64)  # (S,)
    if sigmas.ndim != 1 or sigmas.size == 0 or np.any(~np.isfinite(sigmas)) or np.any(sigmas <= 0):
        raise InvalidParameterError("noise_multipliers must be a non-empty 1-D sequence of finite sigmas > 0, one per step")
    if float(sigmas.min()) < MIN_NOISE_MULTIPLIER:
        raise InvalidParameterError(f"the PLD accountant takes noise multipliers >= {MIN_NOISE_MULTIPLIER:g} (its grid grows as "
                                    f"1/sigma^2), got {float(sigmas.min()):g}; use the RDP accountant (--accountant rdp)")
    if q == 0:
        return 0.0
    from tokendp._optional import require

    pld = require("dp_accounting.pld.privacy_loss_distribution", "train", "the PLD accountant of DP-SGD",
                  why="(or use the RDP accountant)", package="dp-accounting")
    values, counts = np.unique(sigmas, return_counts=True)
    composed = None
    for sigma, count in zip(values.tolist(), counts.tolist()):
        step = pld.from_gaussian_mechanism(standard_deviation=sigma, sampling_prob=q, pessimistic_estimate=True,
                                           value_discretization_interval=width)
        block = step.self_compose(int(count)) if count > 1 else step
        composed = block if composed is None else composed.compose(block)
    epsilon = float(composed.get_epsilon_for_delta(target))
    return math.inf if not math.isfinite(epsilon) else max(0.0, epsilon)
