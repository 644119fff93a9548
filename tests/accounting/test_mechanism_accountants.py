"""Per-mechanism accountants: closed forms, the docs/privacy.md anchor, calibration, validation."""

from __future__ import annotations

import math

import mpmath
import pytest

from tokendp import accounting as acc
from tokendp.errors import BudgetExceededError, InvalidParameterError


def _dp_fusion_mpmath(alpha, beta, m, tokens, delta):
    with mpmath.workdps(50):
        a = mpmath.mpf(alpha)
        r = mpmath.log(1 + (mpmath.e ** ((a - 1) * a * beta) - 1) / m) / (a - 1)
        return float(r), float(tokens * r + mpmath.log((a - 1) / a) - (mpmath.log(delta) + mpmath.log(a)) / (a - 1))


@pytest.mark.parametrize(("alpha", "beta", "m", "tokens", "delta"), [
    (2.0, 0.005, 1, 900, 1e-3), (1.5, 0.3, 4, 100, 1e-5), (10.0, 0.1, 8, 50, 1e-6), (3.0, 1e-7, 3, 2000, 1e-4), (2.0, 40.0, 5, 10, 1e-5),
])
def test_dp_fusion_matches_mpmath(alpha, beta, m, tokens, delta):
    r, eps = _dp_fusion_mpmath(alpha, beta, m, tokens, delta)
    assert acc.dp_fusion_rdp_per_token(alpha=alpha, beta=beta, groups=m) == pytest.approx(r, rel=1e-10)
    assert acc.dp_fusion_epsilon(alpha=alpha, beta=beta, groups=m, max_tokens=tokens, delta=delta) == pytest.approx(eps, rel=1e-10)


def test_dp_fusion_one_group_charges_the_cap():
    assert acc.dp_fusion_rdp_per_token(alpha=3.0, beta=0.02, groups=1) == pytest.approx(0.06, rel=1e-12)


def test_design_anchor_is_alpha_two():
    # docs/privacy.md, "DP-Fusion (document sanitization)", the anchor of "Composition and conversion":
    # one group, alpha*beta = 0.01, T = 900, delta = 1e-3 gives 14.5. Only alpha = 2 reproduces it:
    # 9 + log(1/2) - log(2e-3) = 14.52; other orders give different values (e.g. 11.5 at alpha = 3).
    eps = {a: acc.dp_fusion_epsilon(alpha=a, beta=0.01 / a, groups=1, max_tokens=900, delta=1e-3) for a in (1.5, 2.0, 3.0)}
    assert eps[2.0] == pytest.approx(14.5215, abs=5e-4)
    assert round(eps[2.0], 1) == 14.5
    assert round(eps[1.5], 1) != 14.5 and round(eps[3.0], 1) != 14.5


def test_dp_fusion_zero_beta_is_exactly_zero():
    assert acc.dp_fusion_epsilon(alpha=2.0, beta=0.0, groups=3, max_tokens=100, delta=1e-5) == 0.0
    # A positive beta, however small, is never reported as zero loss.
    assert acc.dp_fusion_epsilon(alpha=2.0, beta=1e-320, groups=8, max_tokens=1, delta=1e-5) > 0


def test_dp_fusion_monotone():
    base = {"alpha": 2.0, "beta": 0.01, "groups": 3, "max_tokens": 200, "delta": 1e-5}
    eps = acc.dp_fusion_epsilon(**base)
    assert acc.dp_fusion_epsilon(**base | {"beta": 0.02}) > eps
    assert acc.dp_fusion_epsilon(**base | {"max_tokens": 201}) > eps
    assert acc.dp_fusion_epsilon(**base | {"groups": 4}) < eps
    assert acc.dp_fusion_epsilon(**base | {"delta": 1e-6}) > eps


@pytest.mark.parametrize(("epsilon", "alpha", "m", "tokens"), [(14.5, 2.0, 1, 900), (3.0, 4.0, 8, 50), (50.0, 1.5, 2, 10), (1e4, 2.0, 6, 1)])
def test_dp_fusion_beta_round_trip(epsilon, alpha, m, tokens):
    beta = acc.dp_fusion_beta(epsilon=epsilon, alpha=alpha, groups=m, max_tokens=tokens, delta=1e-3)
    got = acc.dp_fusion_epsilon(alpha=alpha, beta=beta, groups=m, max_tokens=tokens, delta=1e-3)
    assert got <= epsilon
    assert got == pytest.approx(epsilon, rel=1e-9)


def test_dp_fusion_beta_refuses_unreachable_target():
    with pytest.raises(InvalidParameterError, match="raise epsilon or delta"):
        acc.dp_fusion_beta(epsilon=1.0, alpha=2.0, groups=1, max_tokens=10, delta=1e-5)


def test_invisibleink_closed_form_and_round_trip():
    rho_tok = acc.invisibleink_rho_per_token(clip=2.0, batch_size=4, temperature=1.5)
    assert rho_tok == pytest.approx(4.0 / (2 * 16 * 2.25), rel=1e-12)
    eps = acc.invisibleink_epsilon(clip=2.0, batch_size=4, temperature=1.5, max_tokens=100, delta=1e-6)
    assert eps == pytest.approx(acc.zcdp_to_epsilon(rho=100 * rho_tok, delta=1e-6), rel=1e-12)
    clip = acc.invisibleink_clip(epsilon=eps, delta=1e-6, batch_size=4, temperature=1.5, max_tokens=100)
    assert clip == pytest.approx(2.0, rel=1e-9)
    assert acc.invisibleink_epsilon(clip=clip, batch_size=4, temperature=1.5, max_tokens=100, delta=1e-6) <= eps


def test_invisibleink_clip_formula():
    rho_star = acc.epsilon_to_zcdp(epsilon=10.0, delta=1e-6)
    clip = acc.invisibleink_clip(epsilon=10.0, delta=1e-6, batch_size=8, temperature=1.2, max_tokens=500)
    assert clip == pytest.approx(8 * 1.2 * math.sqrt(2 * rho_star / 500), rel=1e-9)


def test_clip_is_a_finite_float_at_float64s_edges():
    """B tau past float64 and a budget whose rho underflows to 0 gave inf * 0 = nan (schemathesis found
    it through /v1/synthesize): the clip is then 0, and a clip past float64 is the largest float."""
    tiny = {"epsilon": 3.8e-274, "delta": 7e-121, "batch_size": 55656, "temperature": 4.8e307, "max_tokens": 8}
    assert acc.invisibleink_clip(**tiny) == 0.0 and acc.amin_clip(**tiny) == 0.0
    huge = {**tiny, "epsilon": 1.0, "delta": 1e-6}
    clip = acc.invisibleink_clip(**huge)
    assert math.isfinite(clip) and acc.invisibleink_epsilon(clip=clip, batch_size=55656, temperature=4.8e307,
                                                             max_tokens=8, delta=1e-6) <= 1.0


def test_amin_is_four_times_invisibleink_rho_and_its_clip_half():
    params = {"clip": 3.0, "batch_size": 16, "temperature": 1.0}
    assert acc.amin_rho_per_token(**params) == pytest.approx(4 * acc.invisibleink_rho_per_token(**params), rel=1e-12)
    target = {"epsilon": 5.0, "delta": 1e-6, "batch_size": 8, "temperature": 0.9, "max_tokens": 100}
    assert acc.amin_clip(**target) == acc.invisibleink_clip(**target) / 2


# --- the sparse vector technique and Amin et al.'s switch ----------------------------------------


def test_sparse_vector_noise_follows_lyu_su_li_alg1():
    """Threshold Lap(Delta/eps1) once, queries Lap(2 c Delta/eps2) (non-monotone), eps1 + eps2 = eps."""
    threshold, query = acc.sparse_vector_noise(sensitivity=0.375, epsilon=1.0, max_positives=10, threshold_share=0.5)
    assert threshold == pytest.approx(0.375 / 0.5) and query == pytest.approx(2 * 10 * 0.375 / 0.5)
    assert acc.amin_switch_sensitivity(clip=3.0, batch_size=16) == pytest.approx(0.375)
    assert acc.amin_switch_noise(svt_epsilon=1.0, max_private_tokens=10, clip=3.0, batch_size=16, threshold_share=0.5) == (threshold, query)


@pytest.mark.parametrize("c", [1, 4, 50])
def test_default_split_minimises_the_comparison_variance(c):
    """Default eps1 : eps2 = 1 : (2c)^(2/3) minimises Var(query noise - threshold noise) = 2 b1^2 + 2 b2^2."""
    def variance(share=None):
        b1, b2 = acc.sparse_vector_noise(sensitivity=1.0, epsilon=2.0, max_positives=c, threshold_share=share)
        return 2 * b1**2 + 2 * b2**2

    best = variance()
    b1, b2 = acc.sparse_vector_noise(sensitivity=1.0, epsilon=2.0, max_positives=c)
    assert 1.0 / b1 + 2 * c / b2 == pytest.approx(2.0)  # eps1 + eps2 = epsilon
    assert all(best <= variance(s) for s in (0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.99))


def _switch_epsilon_independent(svt, c, rho, delta):
    """min of the zCDP bound and the tight pure-DP RDP curve (Steinke 2024, Thm. 4, written from its
    randomized-response form) plus a c rho, converted at every DEFAULT_ORDERS order in mpmath."""
    best = acc.zcdp_to_epsilon(rho=svt**2 / 2 + c * rho, delta=delta)
    with mpmath.workdps(40):
        e = mpmath.mpf(svt)
        for order in acc.DEFAULT_ORDERS:
            a = mpmath.mpf(order)
            r = e - mpmath.log((1 + mpmath.exp(-e)) / (1 + mpmath.exp(-(2 * a - 1) * e))) / (a - 1)
            eps = r + a * c * rho + mpmath.log((a - 1) / a) - (mpmath.log(delta) + mpmath.log(a)) / (a - 1)
            best = min(best, float(eps))
    return best


@pytest.mark.parametrize(("clip", "b", "tau", "c", "svt", "delta"), [
    (3.0, 16, 1.0, 10, 1.0, 1e-6), (0.7, 8, 1.0, 50, 1.0, 1e-6), (0.8, 8, 1.0, 50, 0.1, 1e-6),
    (9.6, 100, 1.0, 200, 3.0, 1e-6), (0.15, 2, 0.7, 5, 0.05, 1e-3),
])
def test_amin_switch_epsilon_matches_independent_values_and_a_ledger(clip, b, tau, c, svt, delta):
    params = {"clip": clip, "batch_size": b, "temperature": tau}
    rho = acc.amin_rho_per_token(**params)
    eps = acc.amin_switch_epsilon(**params, max_private_tokens=c, svt_epsilon=svt, delta=delta)
    assert eps == pytest.approx(_switch_epsilon_independent(svt, c, rho, delta), rel=1e-10)
    rho_sum = acc.compose_zcdp([acc.pure_dp_to_zcdp(epsilon=svt), rho], [1, c])  # svt^2/2 + c rho, rounded up
    assert eps <= acc.zcdp_to_epsilon(rho=rho_sum, delta=delta)  # never above the zCDP sum
    assert eps > acc.amin_epsilon(**params, max_tokens=c, delta=delta)  # the switch is not free
    ledger = acc.Ledger({"ref": 1e6}, delta=delta)  # the SVT run once, then c private tokens
    ledger.charge({"ref": acc.PureDpEvent(svt)})
    for _ in range(c):
        ledger.charge({"ref": acc.ZcdpEvent(rho)})
    assert ledger.epsilon("ref") == pytest.approx(eps, rel=1e-12)


@pytest.mark.parametrize(("eps", "svt", "c", "b", "tau", "delta"), [
    (8.0, 1.0, 50, 8, 1.0, 1e-6), (8.0, 0.1, 50, 8, 1.0, 1e-6), (2.0, 0.5, 10, 4, 0.7, 1e-5), (1.0, 0.05, 1, 2, 1.0, 1e-3),
])
def test_amin_switch_clip_meets_epsilon_and_a_ledger_admits_exactly_c_tokens(eps, svt, c, b, tau, delta):
    clip = acc.amin_switch_clip(epsilon=eps, delta=delta, batch_size=b, temperature=tau, max_private_tokens=c, svt_epsilon=svt)
    assert isinstance(clip, float) and clip > 0
    got = acc.amin_switch_epsilon(clip=clip, batch_size=b, temperature=tau, max_private_tokens=c, svt_epsilon=svt, delta=delta)
    assert eps - 1e-9 < got <= eps
    ledger = acc.Ledger({0: eps}, delta=delta)
    ledger.charge({0: acc.PureDpEvent(svt)})
    token = acc.ZcdpEvent(acc.amin_rho_per_token(clip=clip, batch_size=b, temperature=tau))
    for _ in range(c):
        ledger.charge({0: token})
    with pytest.raises(BudgetExceededError):
        ledger.charge({0: token})


def test_amin_switch_clip_refuses_a_switch_that_spends_the_whole_budget():
    with pytest.raises(InvalidParameterError, match="switch alone"):
        acc.amin_switch_clip(epsilon=0.5, delta=1e-6, batch_size=8, temperature=1.0, max_private_tokens=5, svt_epsilon=1.0)
    for bad in ({"svt_epsilon": 0.0}, {"max_private_tokens": 0}, {"svt_epsilon": math.inf}):
        kwargs = {"clip": 1.0, "batch_size": 8, "temperature": 1.0, "max_private_tokens": 5, "svt_epsilon": 1.0, "delta": 1e-6} | bad
        with pytest.raises(InvalidParameterError):
            acc.amin_switch_epsilon(**kwargs)
    with pytest.raises(InvalidParameterError, match="threshold_share"):
        acc.sparse_vector_noise(sensitivity=1.0, epsilon=1.0, max_positives=2, threshold_share=1.0)


def test_dp_decoding_closed_form_and_inverse():
    assert acc.dp_decoding_epsilon_per_token(lam=0.5, vocab_size=100) == pytest.approx(math.log(101))
    assert acc.dp_decoding_epsilon(lam=0.5, vocab_size=100, max_tokens=7) == pytest.approx(7 * math.log(101))
    assert acc.dp_decoding_epsilon(lam=0.0, vocab_size=100, max_tokens=7) == 0.0
    lam = acc.dp_decoding_lam(epsilon=5.0, vocab_size=50_000, max_tokens=100)
    assert acc.dp_decoding_epsilon(lam=lam, vocab_size=50_000, max_tokens=100) == pytest.approx(5.0, rel=1e-9)
    assert acc.dp_decoding_epsilon(lam=lam, vocab_size=50_000, max_tokens=100) <= 5.0


def test_dp_prompt_closed_form_and_inverse():
    assert acc.dp_prompt_epsilon(clip_width=4.0, temperature=2.0, max_tokens=10) == pytest.approx(40.0)
    tau = acc.dp_prompt_temperature(epsilon=40.0, clip_width=4.0, max_tokens=10)
    assert tau == pytest.approx(2.0)
    assert acc.dp_prompt_epsilon(clip_width=4.0, temperature=tau, max_tokens=10) <= 40.0


FUSION = {"alpha": 2.0, "beta": 0.01, "groups": 2, "max_tokens": 10, "delta": 1e-5}
INK = {"clip": 1.0, "batch_size": 4, "temperature": 1.0, "max_tokens": 10, "delta": 1e-5}


@pytest.mark.parametrize(("function", "kwargs"), [
    (acc.dp_fusion_epsilon, FUSION | {"alpha": 1.0}),
    (acc.dp_fusion_epsilon, FUSION | {"alpha": 0.5}),
    (acc.dp_fusion_epsilon, FUSION | {"beta": -0.1}),
    (acc.dp_fusion_epsilon, FUSION | {"groups": 0}),
    (acc.dp_fusion_epsilon, FUSION | {"groups": 1.5}),
    (acc.dp_fusion_epsilon, FUSION | {"max_tokens": 0}),
    (acc.dp_fusion_epsilon, FUSION | {"delta": 0.0}),
    (acc.dp_fusion_epsilon, FUSION | {"delta": 1.0}),
    (acc.dp_fusion_epsilon, FUSION | {"beta": math.inf}),
    (acc.dp_fusion_epsilon, FUSION | {"max_tokens": True}),
    (acc.invisibleink_epsilon, INK | {"clip": -1.0}),
    (acc.invisibleink_epsilon, INK | {"batch_size": 0}),
    (acc.invisibleink_epsilon, INK | {"temperature": 0.0}),
    (acc.invisibleink_epsilon, INK | {"delta": -1e-5}),
    (acc.dp_decoding_epsilon, {"lam": 1.0, "vocab_size": 10, "max_tokens": 1}),
    (acc.dp_decoding_epsilon, {"lam": -0.1, "vocab_size": 10, "max_tokens": 1}),
    (acc.dp_prompt_epsilon, {"clip_width": -1.0, "temperature": 1.0, "max_tokens": 1}),
    (acc.dp_prompt_epsilon, {"clip_width": 1.0, "temperature": 1.0, "max_tokens": 0}),
])
def test_invalid_parameters_are_refused(function, kwargs):
    with pytest.raises(InvalidParameterError):
        function(**kwargs)


def test_parameters_are_keyword_only():
    with pytest.raises(TypeError):
        acc.dp_fusion_epsilon(2.0, 0.01, 2, 10, 1e-5)  # type: ignore[misc]
