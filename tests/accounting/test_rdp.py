"""RDP conversions, composition and amplification against independent computations."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

from tokendp.accounting import (
    DEFAULT_ORDERS,
    INTEGER_ORDERS,
    compose_rdp,
    dp_sgd_epsilon,
    dp_sgd_rdp,
    poisson_subsampled_rdp,
    pure_dp_to_rdp,
    rdp_to_epsilon,
    rdp_to_epsilon_and_order,
    subsampled_gaussian_rdp,
)
from tokendp.errors import InvalidParameterError

RTOL = 1e-4


@pytest.mark.parametrize("rdp_scale", [0.5, 3.0, 40.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-5, 1e-2])
def test_conversion_matches_dp_accounting(rdp_scale, delta):
    orders = np.array(DEFAULT_ORDERS)
    curve = rdp_scale * orders / 10.0  # a zCDP-like curve, far from the KL shortcut dp_accounting takes near 0
    expected, expected_order = dpa_rdp.compute_epsilon(orders, curve, delta)
    eps, order = rdp_to_epsilon_and_order(rdp=curve, orders=orders, delta=delta)
    assert eps == pytest.approx(expected, rel=RTOL)
    assert order == expected_order


def test_conversion_closed_form_at_one_order():
    # eps = r + log((a-1)/a) - (log delta + log a)/(a-1) at a = 3, r = 2, delta = 1e-6.
    expected = 2 + math.log(2 / 3) - (math.log(1e-6) + math.log(3)) / 2
    assert rdp_to_epsilon(rdp=2.0, orders=3.0, delta=1e-6) == pytest.approx(expected, rel=1e-12)


def test_zero_rdp_at_any_order_means_zero_epsilon():
    assert rdp_to_epsilon(rdp=[math.inf, 0.0], orders=[2.0, 3.0], delta=1e-5) == 0.0


def test_infinite_rdp_never_wins():
    assert rdp_to_epsilon(rdp=[math.inf, 1.0], orders=[2.0, 4.0], delta=1e-5) == pytest.approx(
        rdp_to_epsilon(rdp=1.0, orders=4.0, delta=1e-5)
    )


def test_negative_conversion_is_reported_as_zero():
    # Large delta and order make the conversion constant negative; epsilon is never negative.
    assert rdp_to_epsilon(rdp=1e-3, orders=50.0, delta=0.9) == 0.0


def test_composition_adds_curves():
    np.testing.assert_allclose(compose_rdp([1.0, 2.0], [0.5, 0.25], [0.0, 1.0]), [1.5, 3.25])
    with pytest.raises(InvalidParameterError):
        compose_rdp([1.0, 2.0], [1.0])


@pytest.mark.parametrize("bad", [{"delta": 0.0}, {"delta": 1.0}, {"orders": [1.0]}, {"rdp": [-1.0]}])
def test_conversion_rejects_bad_parameters(bad):
    kwargs = {"rdp": [1.0], "orders": [2.0], "delta": 1e-5} | bad
    with pytest.raises(InvalidParameterError):
        rdp_to_epsilon(**kwargs)


def _randomized_response_rdp(eps: float, alpha: float) -> mpmath.mpf:
    """D_alpha between Bernoulli(e^eps/(1+e^eps)) and Bernoulli(1/(1+e^eps)), in 50-digit arithmetic."""
    with mpmath.workdps(50):
        p = mpmath.e**eps / (1 + mpmath.e**eps)
        total = p**alpha * (1 - p) ** (1 - alpha) + (1 - p) ** alpha * p ** (1 - alpha)
        return mpmath.log(total) / (alpha - 1)


@pytest.mark.parametrize("eps", [1e-9, 1e-3, 0.1, 1.0, 5.0, 40.0])
def test_pure_dp_curve_is_randomized_response_and_below_simple_bounds(eps):
    orders = [1.25, 2.0, 3.5, 10.0, 100.0]
    curve = pure_dp_to_rdp(epsilon=eps, orders=orders)
    for alpha, value in zip(orders, curve):
        assert value == pytest.approx(float(_randomized_response_rdp(eps, alpha)), rel=RTOL)
        assert value <= min(eps, alpha * eps**2 / 2) * (1 + 1e-12)


def test_subsampled_gaussian_matches_dp_accounting_at_integer_orders():
    orders = list(INTEGER_ORDERS)
    for q, sigma in [(0.01, 1.0), (0.1, 0.8), (0.001, 3.0), (0.5, 2.0)]:
        expected = dpa_rdp._compute_rdp_poisson_subsampled_gaussian(q, sigma, orders)
        np.testing.assert_allclose(subsampled_gaussian_rdp(sampling_rate=q, noise_multiplier=sigma, orders=orders), expected, rtol=RTOL)


def test_dp_sgd_schedule_matches_rdp_accountant():
    orders = list(INTEGER_ORDERS)
    schedule = [1.2] * 300 + [0.9] * 100 + [2.0] * 50
    accountant = dpa_rdp.RdpAccountant(orders=orders)
    for sigma, count in [(1.2, 300), (0.9, 100), (2.0, 50)]:
        accountant.compose(PoissonSampledDpEvent(0.02, GaussianDpEvent(sigma)), count)
    for delta in (1e-5, 1e-8):
        assert dp_sgd_epsilon(sampling_rate=0.02, noise_multipliers=schedule, delta=delta, orders=orders) == pytest.approx(
            accountant.get_epsilon(delta), rel=RTOL
        )


def test_subsampled_gaussian_edge_rates():
    orders = [2, 5, 32]
    np.testing.assert_allclose(subsampled_gaussian_rdp(sampling_rate=1.0, noise_multiplier=2.0, orders=orders), np.array(orders) / 8.0)
    np.testing.assert_array_equal(subsampled_gaussian_rdp(sampling_rate=0.0, noise_multiplier=2.0, orders=orders), 0.0)
    with pytest.raises(InvalidParameterError):
        subsampled_gaussian_rdp(sampling_rate=0.1, noise_multiplier=1.0, orders=[2.5])


def _zhu_wang_mpmath(q: float, base, alpha: int) -> float:
    """Zhu & Wang 2019 Thm. 6 evaluated term by term in 60-digit arithmetic."""
    with mpmath.workdps(60):
        q = mpmath.mpf(q)
        total = (1 - q) ** (alpha - 1) * (alpha * q - q + 1)
        total += mpmath.binomial(alpha, 2) * q**2 * (1 - q) ** (alpha - 2) * mpmath.e ** base(2)
        for ell in range(3, alpha + 1):
            total += 3 * mpmath.binomial(alpha, ell) * q**ell * (1 - q) ** (alpha - ell) * mpmath.e ** ((ell - 1) * base(ell))
        return float(mpmath.log(total) / (alpha - 1))


@pytest.mark.parametrize("q", [1e-4, 0.01, 0.3])
def test_poisson_subsampled_generic_matches_mpmath(q):
    def base(ell):
        return 0.3 * ell + 0.2  # an arbitrary RDP curve, e.g. a mollified ensemble member

    orders = [2, 3, 7, 20, 64]
    got = poisson_subsampled_rdp(sampling_rate=q, base_rdp=base, orders=orders)
    expected = [_zhu_wang_mpmath(q, base, a) for a in orders]
    np.testing.assert_allclose(got, expected, rtol=RTOL)


def test_generic_bound_dominates_exact_gaussian_and_handles_extremes():
    sigma = 1.5
    orders = [2, 4, 16, 128]

    def gaussian(ell):
        return ell / (2 * sigma**2)

    generic = poisson_subsampled_rdp(sampling_rate=0.05, base_rdp=gaussian, orders=orders)
    exact = subsampled_gaussian_rdp(sampling_rate=0.05, noise_multiplier=sigma, orders=orders)
    assert np.all(generic >= exact * (1 - 1e-12))
    np.testing.assert_allclose(generic[0], exact[0], rtol=1e-12)  # no factor 3 at order 2
    np.testing.assert_allclose(poisson_subsampled_rdp(sampling_rate=1.0, base_rdp=gaussian, orders=orders), [gaussian(a) for a in orders])
    huge = poisson_subsampled_rdp(sampling_rate=1e-6, base_rdp=lambda ell: 50.0 * ell, orders=[256])
    assert np.isfinite(huge).all()


def test_dp_sgd_rdp_requires_a_schedule():
    with pytest.raises(InvalidParameterError):
        dp_sgd_rdp(sampling_rate=0.1, noise_multipliers=[])


def test_tiny_subsampled_rdp_stays_positive_and_accurate():
    q, sigma, alpha = 1e-9, 20.0, 4
    with mpmath.workdps(80):
        total = sum(
            mpmath.binomial(alpha, k) * mpmath.mpf(q) ** k * (1 - mpmath.mpf(q)) ** (alpha - k) * mpmath.e ** (mpmath.mpf(k * k - k) / (2 * sigma**2))
            for k in range(alpha + 1)
        )
        expected = float(mpmath.log(total) / (alpha - 1))
    got = subsampled_gaussian_rdp(sampling_rate=q, noise_multiplier=sigma, orders=[alpha])[0]
    assert got > 0
    assert got == pytest.approx(expected, rel=RTOL)
    generic = poisson_subsampled_rdp(sampling_rate=q, base_rdp=lambda ell: ell / (2 * sigma**2), orders=[2])[0]
    assert generic == pytest.approx(subsampled_gaussian_rdp(sampling_rate=q, noise_multiplier=sigma, orders=[2])[0], rel=1e-12)


def test_vanishing_losses_never_round_to_zero():
    assert np.all(pure_dp_to_rdp(epsilon=1e-200, orders=[1.25, 2.0, 64.0]) > 0)
    assert subsampled_gaussian_rdp(sampling_rate=1e-300, noise_multiplier=5.0, orders=[2])[0] > 0
    assert rdp_to_epsilon(rdp=pure_dp_to_rdp(epsilon=1e-200, orders=[2.0]), orders=[2.0], delta=1e-5) > 0
