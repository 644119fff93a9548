"""zCDP conversion and its inverse against dp_accounting and mpmath."""

from __future__ import annotations

import math

import mpmath
import pytest
from dp_accounting import ZCDpEvent
from dp_accounting.rdp import RdpAccountant

from tokendp.accounting import bounded_range_to_zcdp, epsilon_to_zcdp, pure_dp_to_zcdp, zcdp_optimal_order, zcdp_to_epsilon
from tokendp.errors import InvalidParameterError

CASES = [(1e-3, 1e-5), (0.05, 1e-6), (0.5, 1e-5), (2.0, 1e-3), (30.0, 1e-8)]
FINE_ORDERS = [1 + k / 200 for k in range(1, 4000)] + list(range(21, 2000))


@pytest.mark.parametrize(("rho", "delta"), CASES)
def test_matches_dp_accounting_on_a_fine_grid(rho, delta):
    accountant = RdpAccountant(orders=FINE_ORDERS)
    accountant.compose(ZCDpEvent(rho))
    assert zcdp_to_epsilon(rho=rho, delta=delta) == pytest.approx(accountant.get_epsilon(delta), rel=2e-3)


@pytest.mark.parametrize(("rho", "delta"), CASES)
def test_matches_mpmath_minimisation(rho, delta):
    with mpmath.workdps(40):
        def objective(a):
            return a * rho + mpmath.log((a - 1) / a) - (mpmath.log(delta) + mpmath.log(a)) / (a - 1)

        a_star = mpmath.findroot(lambda a: rho * (a - 1) ** 2 + mpmath.log(a) + mpmath.log(delta), 1 + math.sqrt(math.log(1 / delta) / rho) / 2)
        expected = float(objective(a_star))
    assert zcdp_optimal_order(rho=rho, delta=delta) == pytest.approx(float(a_star), rel=1e-6)
    assert zcdp_to_epsilon(rho=rho, delta=delta) == pytest.approx(expected, rel=1e-9)


def test_zero_rho_is_zero_epsilon():
    assert zcdp_to_epsilon(rho=0.0, delta=1e-5) == 0.0
    assert epsilon_to_zcdp(epsilon=0.0, delta=1e-5) == 0.0


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 8.0, 100.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-4])
def test_inverse_round_trip_and_feasibility(epsilon, delta):
    rho = epsilon_to_zcdp(epsilon=epsilon, delta=delta)
    assert zcdp_to_epsilon(rho=rho, delta=delta) <= epsilon
    assert zcdp_to_epsilon(rho=rho, delta=delta) == pytest.approx(epsilon, rel=1e-9)
    assert zcdp_to_epsilon(rho=rho * (1 + 1e-6), delta=delta) > epsilon


def test_monotone_in_rho_and_delta():
    rhos = [1e-4 * 1.5**k for k in range(30)]
    values = [zcdp_to_epsilon(rho=r, delta=1e-6) for r in rhos]
    assert all(b > a for a, b in zip(values, values[1:]))
    assert zcdp_to_epsilon(rho=1.0, delta=1e-8) > zcdp_to_epsilon(rho=1.0, delta=1e-4)


def test_simple_conversions():
    assert pure_dp_to_zcdp(epsilon=2.0) == 2.0
    assert bounded_range_to_zcdp(eta=2.0) == 0.5


@pytest.mark.parametrize(("rho", "delta"), [(5e-324, 5e-324), (5e-324, 1e-5), (1e-3, 5e-324), (1e300, 0.44)])
def test_extreme_rho_and_delta_convert_without_overflow(rho, delta):
    """Found by schemathesis through /v1/account and /v1/synthesize (issue 36): a subnormal rho
    overflowed the first bracket, a delta below 1 / the largest float the second (1/delta - 1), and
    a huge rho rounded the bracket's end to no sign change: brentq raised, the server answered 500."""
    assert 1 <= zcdp_optimal_order(rho=rho, delta=delta) < math.inf
    assert 0 <= zcdp_to_epsilon(rho=rho, delta=delta) < math.inf
    assert zcdp_to_epsilon(rho=epsilon_to_zcdp(epsilon=1.36e308, delta=delta), delta=delta) <= 1.36e308


@pytest.mark.parametrize("bad", [{"rho": -1.0}, {"rho": math.nan}, {"delta": 0.0}, {"delta": 1.5}])
def test_rejects_bad_parameters(bad):
    with pytest.raises(InvalidParameterError):
        zcdp_to_epsilon(**({"rho": 1.0, "delta": 1e-5} | bad))
