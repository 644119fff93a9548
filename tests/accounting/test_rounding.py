"""Every epsilon, RDP and zCDP value the accountants report or charge is an upper bound of its
exact-arithmetic value (docs/privacy.md, "Rounding of reported epsilons"), checked against
mpmath at 60 digits on random and adversarial cases; calibrations meet their target exactly or
below, in exact arithmetic too.

The exact references take the float inputs as the exact rationals they are (``mpf(float)`` is
exact), so a failure means a rounding fell on the unsafe side, never a modelling difference.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import exact_privacy as ref

from tokendp import accounting as acc
from tokendp.accounting import Ledger, PureDpEvent, RdpEvent, ZcdpEvent
from tokendp.accounting._rounding import U, ceil_float, exact_sum_up, upper_sum
from tokendp.errors import BudgetExceededError, InvalidParameterError

DPS = 60


def _mixture_rdp(alpha: float, cap: mpmath.mpf, weight: mpmath.mpf) -> mpmath.mpf:
    a = ref.m(alpha)
    return mpmath.log1p(weight * mpmath.expm1((a - 1) * cap)) / (a - 1)


def _tight_pure_rdp(epsilon: float, alpha: float) -> mpmath.mpf:
    """log(cosh((a-1/2) eps) / cosh(eps/2)) / (a-1), with the digits a tiny eps needs (cosh(eps) - 1 ~ eps^2)."""
    with mpmath.workdps(DPS + 2 * max(0, int(-math.log10(epsilon)))):
        e, a = ref.m(epsilon), ref.m(alpha)
        return +(mpmath.log(mpmath.cosh((a - mpmath.mpf(0.5)) * e) / mpmath.cosh(e / 2)) / (a - 1))


def _at_least(computed: float, exact: mpmath.mpf, rel: float = 1e-12, scale: float = 0.0) -> None:
    """computed >= exact (never below), and close to it: within ``rel`` of |exact| + ``scale``
    (the magnitude of the terms that cancel in it)."""
    assert computed >= exact, (computed, exact)
    assert computed <= exact + rel * (abs(exact) + scale) + 1e-300, (computed, exact)


# ---------------------------------------------------------------------------- the helper
def test_upper_sum_bounds_the_exact_sum_of_terms_with_errors_whatever_their_order():
    """Terms within ``units`` U of their exact values (here: all at the edge, on the unsafe side),
    heavy cancellation, magnitudes 1e-300 to 1e300: the bound is >= the exact rational sum and
    does not depend on the order of the terms."""
    rng = np.random.default_rng(0)
    for case in range(2000):
        n = int(rng.integers(1, 12))
        terms = rng.standard_normal(n) * 10.0 ** rng.integers(-300, 300, n) if case % 3 else rng.standard_normal(n)
        if case % 5 == 0:  # a sum that cancels to almost nothing
            terms = np.append(terms, -np.sum(terms))
        units = float(rng.choice([0.0, 1.0, 16.0]))
        exact = sum(Fraction(float(t)) * (1 + Fraction(units) * Fraction(U) * (1 if t > 0 else -1)) for t in terms)
        bound = upper_sum(list(terms), units=units)
        assert Fraction(bound) >= exact
        assert upper_sum(list(rng.permutation(terms)), units=units) == bound


def test_exact_sums_are_exact_when_representable_and_rounded_up_otherwise():
    assert exact_sum_up([1.0], [3]) == 3.0 and exact_sum_up([0.5, 0.25]) == 0.75
    assert exact_sum_up([]) == 0.0 and upper_sum([]) == 0.0 and upper_sum([0.0, 0.0]) == 0.0
    third = exact_sum_up([0.1, 0.2])
    assert Fraction(third) >= Fraction(0.1) + Fraction(0.2) and Fraction(math.nextafter(third, 0)) < Fraction(0.1) + Fraction(0.2)
    assert ceil_float(Fraction(1, 3)) == math.nextafter(1 / 3, 1) and Fraction(ceil_float(Fraction(1, 3))) > Fraction(1, 3)
    assert exact_sum_up([math.inf, 1.0]) == math.inf
    # beyond the largest float (a beta of 1e284 at alpha 1e307 raised OverflowError, a 500 of /v1/account)
    huge = Fraction(sys.float_info.max) * 2
    assert ceil_float(huge) == math.inf and ceil_float(Fraction(sys.float_info.max) + 1) == math.inf
    assert ceil_float(-huge) == -sys.float_info.max


# ---------------------------------------------------------------------------- DP-Fusion and PMixED
def _dp_fusion_cases():
    rng = np.random.default_rng(1)
    cases = [
        (2.0, 0.005, 1, 900, 1e-3), (1.0001, 0.3, 4, 100, 1e-5), (64.0, 1e-300, 1000, 10**12, 1e-300),
        (1.25, 1e-12, 1, 10**15, 0.5), (3.0, 40.0, 5, 10, 1e-5), (1024.0, 1.0, 2, 1, 1e-10),
        (1.0001, 1e-300, 1000, 10, 1e-5), (1.0001, 1e-99, 10**6, 10**12, 1e-5),  # w (e^x - 1) below the normals
    ]
    for _ in range(300):
        cases.append((float(1 + 10 ** rng.uniform(-4, 2)), float(10 ** rng.uniform(-12, 1)), int(rng.integers(1, 1000)),
                      int(10 ** rng.uniform(0, 12)), float(10 ** rng.uniform(-300, -0.01))))
    # cancellation: delta near 1 makes the offset negative, and beta is set so that T r almost cancels it
    for _ in range(300):
        alpha, m, t, delta = float(rng.uniform(1.1, 8)), int(rng.integers(1, 9)), int(rng.integers(1, 5000)), float(
            rng.uniform(0.5, 0.999))
        with mpmath.workdps(DPS):
            r = -ref.offset(alpha, delta) / t * (1 + float(rng.uniform(-1e-9, 1e-9)))
            if r <= 0:
                continue
            cap = mpmath.log1p(m * mpmath.expm1((alpha - 1) * r)) / (alpha - 1)
        cases.append((alpha, float(cap / alpha), m, t, delta))
    return cases


def test_dp_fusion_rdp_and_epsilon_are_never_below_the_exact_values():
    with mpmath.workdps(DPS):
        for alpha, beta, m, t, delta in _dp_fusion_cases():
            r = _mixture_rdp(alpha, ref.m(alpha) * ref.m(beta), mpmath.mpf(1) / m)
            got_r = acc.dp_fusion_rdp_per_token(alpha=alpha, beta=beta, groups=m)
            assert got_r >= r and got_r <= r * (1 + 1e-13) + 1e-300
            # the cap the mechanism enforces is fl(alpha * beta): the charge covers it too
            assert got_r >= _mixture_rdp(alpha, ref.m(alpha * beta), mpmath.mpf(1) / m)
            got = acc.dp_fusion_epsilon(alpha=alpha, beta=beta, groups=m, max_tokens=t, delta=delta)
            exact = ref.rdp_epsilon(t * ref.m(got_r), alpha, delta)  # the exact conversion of what is charged
            assert got >= exact and got >= ref.rdp_epsilon(t * r, alpha, delta)
            assert got <= exact + 1e-13 * (t * got_r + abs(ref.offset(alpha, delta))) + 1e-300


def test_pmixed_weight_rdp_and_epsilon_are_never_below_the_exact_values():
    rng = np.random.default_rng(2)
    cases = [(1, 1.0), (80, 0.03), (1, 1 - 1e-12), (1000, 1e-12), (2, 0.5), (10**6, 0.999999)]
    cases += [(int(rng.integers(1, 10**4)), float(10 ** rng.uniform(-12, 0))) for _ in range(300)]
    with mpmath.workdps(DPS):
        for n, q in cases:
            w = -mpmath.expm1(n * mpmath.log1p(-ref.m(q))) / n
            got_w = acc.pmixed_sampled_weight(ensemble_size=n, sample_rate=q)
            _at_least(got_w, w, rel=1e-13)
            alpha, beta = float(rng.uniform(1.5, 64)), float(10 ** rng.uniform(-8, 1))
            r = _mixture_rdp(alpha, ref.m(beta), w)
            got_r = acc.pmixed_rdp_per_token(alpha=alpha, beta=beta, ensemble_size=n, sample_rate=q)
            assert got_r >= r and got_r <= r * (1 + 1e-12) + 1e-300
            t, delta = int(10 ** rng.uniform(0, 9)), float(10 ** rng.uniform(-20, -0.1))
            got = acc.pmixed_epsilon(alpha=alpha, beta=beta, ensemble_size=n, sample_rate=q, max_tokens=t, delta=delta)
            assert got >= ref.rdp_epsilon(t * r, alpha, delta)


# ---------------------------------------------------------------------------- zCDP: InvisibleInk, Amin et al.
def test_zcdp_conversion_is_never_below_the_exact_minimum():
    rng = np.random.default_rng(3)
    cases = [(1e-300, 1e-5), (1e-12, 0.5), (0.5, 1e-6), (1e6, 1e-300), (3.0, 0.999)]
    cases += [(float(10 ** rng.uniform(-14, 4)), float(10 ** rng.uniform(-300, -0.001))) for _ in range(300)]
    with mpmath.workdps(DPS):
        for rho, delta in cases:
            _at_least(acc.zcdp_to_epsilon(rho=rho, delta=delta), ref.zcdp_epsilon(ref.m(rho), delta), rel=1e-9)


@pytest.mark.parametrize("method", ["invisibleink", "amin"])
def test_synthesis_rho_and_epsilon_are_never_below_the_exact_values(method):
    rng = np.random.default_rng(4)
    per_token = acc.invisibleink_rho_per_token if method == "invisibleink" else acc.amin_rho_per_token
    epsilon = acc.invisibleink_epsilon if method == "invisibleink" else acc.amin_epsilon
    width = 2 if method == "invisibleink" else 4  # the bounded range is width * C / (B tau)
    with mpmath.workdps(DPS):
        for _ in range(200):
            clip, b, tau = float(10 ** rng.uniform(-6, 3)), int(rng.integers(1, 10**4)), float(10 ** rng.uniform(-2, 1))
            t, delta = int(10 ** rng.uniform(0, 9)), float(10 ** rng.uniform(-30, -0.5))
            rho_tok = (width * ref.m(clip) / (b * ref.m(tau))) ** 2 / 8
            got = per_token(clip=clip, batch_size=b, temperature=tau)
            _at_least(got, rho_tok, rel=1e-15)
            _at_least(epsilon(clip=clip, batch_size=b, temperature=tau, max_tokens=t, delta=delta),
                      ref.zcdp_epsilon(t * rho_tok, delta), rel=1e-9)


def test_amin_switch_epsilon_is_never_below_the_exact_value():
    rng = np.random.default_rng(5)
    orders = acc.DEFAULT_ORDERS
    with mpmath.workdps(DPS):
        for _ in range(40):
            clip, b, tau = float(10 ** rng.uniform(-3, 1)), int(rng.integers(1, 200)), float(rng.uniform(0.5, 2))
            c, svt, delta = int(rng.integers(1, 300)), float(10 ** rng.uniform(-2, 0.5)), float(10 ** rng.uniform(-9, -1))
            rho_tok = (4 * ref.m(clip) / (b * ref.m(tau))) ** 2 / 8
            zcdp = ref.zcdp_epsilon(ref.m(svt) ** 2 / 2 + c * rho_tok, delta)
            grid = min(ref.rdp_epsilon(_tight_pure_rdp(svt, a) + ref.m(a) * c * rho_tok, a, delta) for a in orders)
            got = acc.amin_switch_epsilon(clip=clip, batch_size=b, temperature=tau, max_private_tokens=c, svt_epsilon=svt,
                                          delta=delta)
            _at_least(got, min(zcdp, grid), rel=1e-9)


# ---------------------------------------------------------------------------- RDP curves and conversions
def test_rdp_conversion_is_never_below_the_exact_minimum_over_the_grid():
    rng = np.random.default_rng(6)
    orders = np.array(acc.DEFAULT_ORDERS)
    with mpmath.workdps(DPS):
        for case in range(200):
            rdp = 10 ** rng.uniform(-12, 3) * orders ** rng.uniform(0, 2)  # (K,)
            delta = float(10 ** rng.uniform(-30, -0.01)) if case % 2 else float(rng.uniform(0.5, 0.99))
            exact = min(ref.rdp_epsilon(ref.m(r), a, delta) for r, a in zip(rdp, orders))
            scale = max(r + abs(float(ref.offset(a, delta))) for r, a in zip(rdp, orders))
            _at_least(acc.rdp_to_epsilon(rdp=rdp, orders=orders, delta=delta), exact, rel=1e-12, scale=scale)


def test_tight_pure_dp_curve_is_never_below_the_exact_curve():
    orders = [1.0001, 1.25, 1.5, 2.0, 3.0, 10.0, 64.0, 1024.0, 1e6]
    with mpmath.workdps(DPS):
        for epsilon in [1e-300, 1e-101, 1e-99, 1e-12, 1e-4, 0.01, 0.5, 1.0, 3.0, 20.0, 300.0]:
            curve = acc.pure_dp_to_rdp(epsilon=epsilon, orders=orders)
            for value, a in zip(curve, orders):
                exact = _tight_pure_rdp(epsilon, a)
                assert value >= exact and value <= exact * (1 + 1e-10) + 1e-300


def _subsampled_gaussian_exact(q: float, sigma: float, a: int) -> mpmath.mpf:
    q_, s = ref.m(q), ref.m(sigma)
    total = mpmath.fsum(mpmath.binomial(a, k) * (1 - q_) ** (a - k) * q_**k * mpmath.exp((k * k - k) / (2 * s**2))
                        for k in range(a + 1))
    return mpmath.log(total) / (a - 1)


def test_subsampled_gaussian_and_dp_sgd_are_never_below_the_exact_values():
    rng = np.random.default_rng(7)
    orders = [2, 3, 5, 8, 16, 32, 64, 256]
    with mpmath.workdps(DPS):
        for q, sigma in [(0.04, 1.1), (1e-6, 0.5), (0.5, 10.0), (0.999, 3.0), (1.0, 2.0)] + [
                (float(10 ** rng.uniform(-5, -0.3)), float(rng.uniform(0.5, 5))) for _ in range(15)]:
            curve = acc.subsampled_gaussian_rdp(sampling_rate=q, noise_multiplier=sigma, orders=orders)
            for value, a in zip(curve, orders):
                exact = _subsampled_gaussian_exact(q, sigma, a)
                assert value >= exact and value <= exact * (1 + 1e-9) + 1e-300, (q, sigma, a)
        sigmas, q, delta = [1.1] * 30 + [1.4] * 30, 0.04, 1e-5
        exact = min(ref.rdp_epsilon(30 * _subsampled_gaussian_exact(q, 1.1, a) + 30 * _subsampled_gaussian_exact(q, 1.4, a),
                                a, delta) for a in orders)
        _at_least(acc.dp_sgd_epsilon(sampling_rate=q, noise_multipliers=sigmas, delta=delta, orders=orders), exact, rel=1e-9)


def test_poisson_subsampled_bound_is_never_below_the_exact_formula():
    base = lambda ell: 0.3 * ell  # noqa: E731 (a Gaussian-like curve)
    with mpmath.workdps(DPS):
        for q in (1e-4, 0.01, 0.3):
            for value, a in zip(acc.poisson_subsampled_rdp(sampling_rate=q, base_rdp=base, orders=[2, 3, 7, 20]),
                                [2, 3, 7, 20]):
                q_ = ref.m(q)
                total = (1 - q_) ** (a - 1) * (a * q_ - q_ + 1) + mpmath.binomial(a, 2) * q_**2 * (1 - q_) ** (a - 2) * mpmath.exp(
                    ref.m(base(2))) + 3 * mpmath.fsum(mpmath.binomial(a, ell) * q_**ell * (1 - q_) ** (a - ell) * mpmath.exp(
                        (ell - 1) * ref.m(base(ell))) for ell in range(3, a + 1))
                exact = mpmath.log(total) / (a - 1)
                assert value >= exact and value <= exact * (1 + 1e-9)


def test_pure_dp_baselines_are_never_below_the_exact_values():
    rng = np.random.default_rng(8)
    with mpmath.workdps(DPS):
        for _ in range(300):
            lam, v, t = float(rng.uniform(0, 0.9999)), int(rng.integers(1, 200_000)), int(10 ** rng.uniform(0, 9))
            exact = t * mpmath.log1p(ref.m(lam) * v / (1 - ref.m(lam)))
            _at_least(acc.dp_decoding_epsilon(lam=lam, vocab_size=v, max_tokens=t), exact, rel=1e-13)
            w, tau = float(10 ** rng.uniform(-3, 2)), float(10 ** rng.uniform(-2, 3))
            _at_least(acc.dp_prompt_epsilon(clip_width=w, temperature=tau, max_tokens=t), t * 2 * ref.m(w) / ref.m(tau), rel=1e-15)


# ---------------------------------------------------------------------------- the Ledger
def test_ledger_epsilons_are_never_below_the_exact_values():
    rng = np.random.default_rng(9)
    with mpmath.workdps(DPS):
        for _ in range(20):
            alpha, beta, m, delta = float(rng.uniform(1.1, 8)), float(10 ** rng.uniform(-6, -1)), int(rng.integers(1, 6)), 1e-5
            r = acc.dp_fusion_rdp_per_token(alpha=alpha, beta=beta, groups=m)
            t = int(rng.integers(1, 200))
            ledger = Ledger({"g": 1e9}, delta=delta)
            for _ in range(t):
                ledger.charge({"g": RdpEvent(alpha, r)})
            assert ledger.epsilon("g") == acc.dp_fusion_epsilon(alpha=alpha, beta=beta, groups=m, max_tokens=t, delta=delta)
            assert ledger.epsilon("g") >= ref.rdp_epsilon(t * ref.m(r), alpha, delta)
        rho, eps, k = 1e-3 / 3, 0.1, 7  # neither is a float sum of itself
        ledger = Ledger({"u": 1e9}, delta=1e-6)
        for _ in range(k):
            ledger.charge({"u": ZcdpEvent(rho)})
            ledger.charge({"u": PureDpEvent(eps)})
        _at_least(ledger.epsilon("u"), min(ref.zcdp_epsilon(k * ref.m(rho) + k * ref.m(eps) ** 2 / 2, 1e-6),
                                           min(ref.rdp_epsilon(k * ref.m(a) * ref.m(rho) + k * _tight_pure_rdp(eps, a), a, 1e-6)
                                               for a in acc.DEFAULT_ORDERS)), rel=1e-9)


def test_ledger_admits_exactly_what_an_exact_sum_allows():
    ledger = Ledger({"doc": 3.0}, delta=1e-6)
    for _ in range(3):
        ledger.charge({"doc": PureDpEvent(epsilon=1.0)})  # 3 x 1.0 is exactly 3.0: admitted
    assert ledger.epsilon("doc") == 3.0
    budget = 0.1 + 0.7  # the float sum rounds below the exact sum of the two floats
    assert Fraction(budget) < Fraction(0.1) + Fraction(0.7)
    tight = Ledger({"doc": budget}, delta=1e-6)
    tight.charge({"doc": PureDpEvent(epsilon=0.1)})
    with pytest.raises(BudgetExceededError):
        tight.charge({"doc": PureDpEvent(epsilon=0.7)})


# ---------------------------------------------------------------------------- calibration
def test_calibrated_parameters_meet_the_target_exactly_or_below():
    rng = np.random.default_rng(10)
    with mpmath.workdps(DPS):
        for _ in range(60):
            target, delta = float(10 ** rng.uniform(-0.5, 1.5)), float(10 ** rng.uniform(-10, -2))
            alpha, m, t = float(rng.uniform(1.5, 16)), int(rng.integers(1, 9)), int(10 ** rng.uniform(0, 6))
            try:
                beta = acc.dp_fusion_beta(epsilon=target, alpha=alpha, groups=m, max_tokens=t, delta=delta)
            except InvalidParameterError:  # the target is below the conversion's offset at this order
                continue
            got = acc.dp_fusion_epsilon(alpha=alpha, beta=beta, groups=m, max_tokens=t, delta=delta)
            assert got <= target and got > target - 1e-6 * target
            assert ref.rdp_epsilon(t * _mixture_rdp(alpha, ref.m(alpha) * ref.m(beta), mpmath.mpf(1) / m), alpha, delta) <= target
            n, q = int(rng.integers(1, 100)), float(rng.uniform(0.01, 1))
            pbeta = acc.pmixed_beta(epsilon=target + 5, alpha=alpha, ensemble_size=n, sample_rate=q, max_tokens=t, delta=delta)
            assert acc.pmixed_epsilon(alpha=alpha, beta=pbeta, ensemble_size=n, sample_rate=q, max_tokens=t,
                                      delta=delta) <= target + 5
            b, tau = int(rng.integers(1, 64)), float(rng.uniform(0.5, 2))
            for clip_fn, eps_fn in ((acc.invisibleink_clip, acc.invisibleink_epsilon), (acc.amin_clip, acc.amin_epsilon)):
                clip = clip_fn(epsilon=target, delta=delta, batch_size=b, temperature=tau, max_tokens=t)
                assert eps_fn(clip=clip, batch_size=b, temperature=tau, max_tokens=t, delta=delta) <= target
            rho_star = acc.epsilon_to_zcdp(epsilon=target, delta=delta)
            assert ref.zcdp_epsilon(ref.m(rho_star), delta) <= target
            lam = acc.dp_decoding_lam(epsilon=target, vocab_size=50_000, max_tokens=t)
            assert t * mpmath.log1p(ref.m(lam) * 50_000 / (1 - ref.m(lam))) <= target
            tau = acc.dp_prompt_temperature(epsilon=target, clip_width=4.0, max_tokens=t)
            assert t * 2 * mpmath.mpf(4) / ref.m(tau) <= target


def test_a_user_asking_epsilon_8_gets_a_report_of_at_most_8():
    for alpha in (3.0, 4.0, 8.0, 32.0):
        beta = acc.dp_fusion_beta(epsilon=8.0, alpha=alpha, groups=3, max_tokens=512, delta=1e-5)
        assert acc.dp_fusion_epsilon(alpha=alpha, beta=beta, groups=3, max_tokens=512, delta=1e-5) <= 8.0
    clip = acc.amin_switch_clip(epsilon=8.0, delta=1e-6, batch_size=8, temperature=1.0, max_private_tokens=50, svt_epsilon=1.0)
    assert acc.amin_switch_epsilon(clip=clip, batch_size=8, temperature=1.0, max_private_tokens=50, svt_epsilon=1.0,
                                   delta=1e-6) <= 8.0
    sigma = acc.calibrate_noise_multiplier(epsilon=8.0, delta=1e-5, sampling_rate=0.01, steps_per_epoch=100,
                                           multipliers=[1.0, 1.2, 1.0])
    assert acc.schedule_epsilon(noise_multiplier=sigma, multipliers=[1.0, 1.2, 1.0], steps_per_epoch=100,
                                sampling_rate=0.01, delta=1e-5) <= 8.0


def test_calibration_ends_quickly_next_to_the_conversion_offset():
    """A target at or just above the offset: refused (at most the offset rounded up, which any
    beta > 0 costs), or met at once, by a tiny beta or 0, never by a search that does not end."""
    import time

    offset = acc.conversion_offset(2.0, 1e-5)
    start, met = time.perf_counter(), 0
    for target in [offset * (1 + k * 1e-16) for k in range(0, 40)] + [offset * (1 + 1e-12)]:
        try:
            beta = acc.dp_fusion_beta(epsilon=target, alpha=2.0, groups=1, max_tokens=1000, delta=1e-5)
        except InvalidParameterError as err:
            assert "not above" in str(err) and target <= offset * (1 + 1e-13)
            continue
        met += 1
        assert acc.dp_fusion_epsilon(alpha=2.0, beta=beta, groups=1, max_tokens=1000, delta=1e-5) <= target
        pbeta = acc.pmixed_beta(epsilon=target, alpha=2.0, ensemble_size=4, sample_rate=0.5, max_tokens=1000, delta=1e-5)
        assert acc.pmixed_epsilon(alpha=2.0, beta=pbeta, ensemble_size=4, sample_rate=0.5, max_tokens=1000,
                                  delta=1e-5) <= target
    assert met >= 1 and time.perf_counter() - start < 5.0


@pytest.mark.parametrize("alpha, delta", [(3.0, 1e-5), (5.0, 1e-5), (2.0, 1e-3), (64.0, 1e-9), (1.01, 0.5)])
def test_a_too_small_epsilon_is_told_the_smallest_accepted_which_is_accepted(alpha, delta):
    """Issue 46: the refusal names the smallest epsilon that is accepted (4 digits), and it is."""
    import re

    from tokendp.accounting.filter import dp_fusion_filter_budget

    with pytest.raises(InvalidParameterError, match="smallest epsilon accepted") as err:
        dp_fusion_filter_budget(epsilon=0.001, alpha=alpha, delta=delta)
    smallest = float(re.search(r"accepted at this alpha and delta is ([0-9.e+-]+)", str(err.value)).group(1))
    assert dp_fusion_filter_budget(epsilon=smallest, alpha=alpha, delta=delta) > 0
    assert smallest <= acc.conversion_offset(alpha, delta) * (1 + 1e-3)
