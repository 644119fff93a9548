"""The PLD accountant of DP-SGD: Opacus's numbers, pessimism against closed forms and optimistic
estimates, determinism over the order of steps, and the inputs it refuses."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from tokendp import accounting as acc
from tokendp.accounting.pld import FFT_SLACK, MIN_NOISE_MULTIPLIER, pld_delta_target
from tokendp.errors import InvalidParameterError

pytest.importorskip("dp_accounting")

# Opacus 1.6.0, computed with:
#   a = opacus.accountants.PRVAccountant(); a.history = [(sigma, q, steps)]
#   low, estimate, upper = a._get_dprv(eps_error=0.01, delta_error=delta / 1000).compute_epsilon(delta, delta / 1000, 0.01)
#   (a.get_epsilon(delta) returns `upper`), and RDPAccountant with the same history, default orders.
# columns: q, sigma, steps, delta, PRV low, PRV estimate, PRV upper, Opacus RDP
OPACUS = [
    (0.01, 1.1, 1000, 1e-5, 1.5053, 1.5154, 1.5255, 1.7118),
    (0.004, 0.8, 5000, 1e-6, 2.8971, 2.9073, 2.9175, 3.3925),
    (0.05, 2.0, 600, 1e-5, 2.7844, 2.7945, 2.8047, 3.0512),
    (0.1, 1.0, 200, 1e-3, 7.0855, 7.0962, 7.1069, 8.1842),
]


@pytest.mark.parametrize(("q", "sigma", "steps", "delta", "low", "estimate", "upper", "opacus_rdp"), OPACUS)
def test_matches_opacus_prv_accountant(q, sigma, steps, delta, low, estimate, upper, opacus_rdp):
    """Inside Opacus's PRV error band, within 1e-3 of its estimate, and below both RDP numbers
    (issue 29: the RDP accountant's 1.725 against the PRV's 1.525 at q 0.01, sigma 1.1)."""
    ours = acc.dp_sgd_pld_epsilon(sampling_rate=q, noise_multipliers=[sigma] * steps, delta=delta)
    assert low <= ours <= upper and abs(ours - estimate) < 1e-3
    assert ours < opacus_rdp - 0.1  # recorded to 4 digits; tokendp's RDP (integer orders only) is as high or higher
    assert opacus_rdp <= acc.dp_sgd_epsilon(sampling_rate=q, noise_multipliers=[sigma] * steps, delta=delta) + 1e-4


def test_matches_opacus_prv_accountant_live():
    accountants = pytest.importorskip("opacus.accountants")
    prv = accountants.PRVAccountant()
    sigmas = [1.0] * 300 + [1.3] * 300
    for sigma in sigmas:
        prv.step(noise_multiplier=sigma, sample_rate=0.02)
    ours = acc.dp_sgd_pld_epsilon(sampling_rate=0.02, noise_multipliers=sigmas, delta=1e-5)
    upper = prv.get_epsilon(delta=1e-5)  # Opacus's upper bound, eps_error 0.01 above its estimate
    assert upper - 0.021 <= ours <= upper


def _gaussian_delta(epsilon: float, mu: float) -> float:
    """Exact delta(epsilon) of the Gaussian mechanism with sensitivity/sigma = mu (Balle and Wang
    2018, Thm. 8): Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2), in 50-digit arithmetic."""
    with mpmath.workdps(50):
        e, m = mpmath.mpf(epsilon), mpmath.mpf(mu)
        return float(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2))


@pytest.mark.parametrize(("sigma", "steps", "delta"), [(30.0, 1000, 1e-5), (5.0, 50, 1e-6), (2.0, 3, 1e-3), (60.0, 4000, 1e-8)])
def test_is_an_upper_bound_where_the_exact_value_is_known(sigma, steps, delta):
    """q = 1: T Gaussian steps are one Gaussian with mu = sqrt(T)/sigma; the exact delta at the
    reported epsilon must not exceed delta, and the report must be close to the exact epsilon
    (within 1e-3, or 1e-2 at a delta so small that the FFT slack of 1e-10 is 1% of it)."""
    ours = acc.dp_sgd_pld_epsilon(sampling_rate=1.0, noise_multipliers=[sigma] * steps, delta=delta)
    mu = math.sqrt(steps) / sigma
    assert _gaussian_delta(ours, mu) <= delta
    assert _gaussian_delta(ours - (1e-3 if delta >= 1e-6 else 1e-2), mu) > delta


@pytest.mark.parametrize(("q", "sigma", "steps"), [(0.01, 1.1, 1000), (0.3, 3.0, 100), (0.001, 0.5, 2000)])
def test_is_above_the_optimistic_estimate(q, sigma, steps):
    """dp-accounting's optimistic discretisation (privacy buckets, coarser) bounds the exact
    epsilon from below."""
    pld = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    optimistic = pld.from_gaussian_mechanism(standard_deviation=sigma, sampling_prob=q, pessimistic_estimate=False,
                                             use_connect_dots=False)
    lower = optimistic.self_compose(steps).get_epsilon_for_delta(1e-5)
    ours = acc.dp_sgd_pld_epsilon(sampling_rate=q, noise_multipliers=[sigma] * steps, delta=1e-5)
    assert lower <= ours <= lower + 0.1


def test_a_schedule_is_a_multiset_of_steps():
    sigmas = [0.9] * 40 + [1.2] * 40 + [1.0] * 40
    shuffled = list(np.random.default_rng(0).permutation(sigmas))
    first = acc.dp_sgd_pld_epsilon(sampling_rate=0.05, noise_multipliers=sigmas, delta=1e-5)
    assert acc.dp_sgd_pld_epsilon(sampling_rate=0.05, noise_multipliers=shuffled, delta=1e-5) == first
    # more noise on some steps costs less; fewer steps cost less
    assert acc.dp_sgd_pld_epsilon(sampling_rate=0.05, noise_multipliers=[0.9] * 120, delta=1e-5) > first
    assert acc.dp_sgd_pld_epsilon(sampling_rate=0.05, noise_multipliers=sigmas[:80], delta=1e-5) < first


def test_edge_cases_and_refusals():
    assert acc.dp_sgd_pld_epsilon(sampling_rate=0.0, noise_multipliers=[1.0] * 10, delta=1e-5) == 0.0
    assert pld_delta_target(1e-5) < 1e-5
    with pytest.raises(InvalidParameterError, match="rdp"):
        acc.dp_sgd_pld_epsilon(sampling_rate=0.01, noise_multipliers=[1.0], delta=FFT_SLACK)
    with pytest.raises(InvalidParameterError, match="rdp"):
        acc.dp_sgd_pld_epsilon(sampling_rate=0.01, noise_multipliers=[MIN_NOISE_MULTIPLIER / 2], delta=1e-5)
    for bad in ([], [1.0, -1.0], [[1.0]], [math.nan]):
        with pytest.raises(InvalidParameterError):
            acc.dp_sgd_pld_epsilon(sampling_rate=0.01, noise_multipliers=bad, delta=1e-5)
    with pytest.raises(InvalidParameterError):
        acc.dp_sgd_pld_epsilon(sampling_rate=1.5, noise_multipliers=[1.0], delta=1e-5)
    assert acc.describe_accountant("pld").startswith("PLD") and acc.describe_accountant("rdp").startswith("RDP")
