"""DP-SGD schedules: rise and reset, calibration of sigma_0, the ledger's subsampled-Gaussian
event, and agreement with Opacus's RDP accountant at the same orders."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tokendp import accounting as acc
from tokendp.accounting import INTEGER_ORDERS, Ledger, SubsampledGaussianEvent
from tokendp.errors import BudgetExceededError, InvalidParameterError


def test_rise_and_reset_rises_then_resets_above_the_ceiling():
    m = acc.rise_and_reset(epochs=6, gamma=0.5, ceiling=2.0, jitter=0.0, draws=[0.5] * 5)
    np.testing.assert_allclose(m, [1.0, 1.5, 1.0, 1.5, 1.0, 1.5])  # 1.5 * 1.5 = 2.25 > 2: reset


def test_rise_and_reset_jitter_stays_in_its_band():
    rng = np.random.default_rng(0)
    m = acc.rise_and_reset(epochs=50, gamma=0.2, ceiling=3.0, jitter=0.1, draws=rng.uniform(size=49))
    assert m[0] == 1.0 and np.all(m >= 1.0 - 0.1 - 1e-12) and np.all(m <= 3.0)
    assert np.all(acc.rise_and_reset(epochs=4, gamma=0.0, ceiling=1.0, jitter=0.0, draws=[0.3] * 3) == 1.0)


@pytest.mark.parametrize("kwargs", [
    {"epochs": 0, "gamma": 0.1, "ceiling": 2.0, "jitter": 0.0, "draws": []},
    {"epochs": 3, "gamma": 0.1, "ceiling": 0.5, "jitter": 0.0, "draws": [0.1, 0.2]},
    {"epochs": 3, "gamma": 0.1, "ceiling": 2.0, "jitter": 1.0, "draws": [0.1, 0.2]},
    {"epochs": 3, "gamma": 0.1, "ceiling": 2.0, "jitter": 0.1, "draws": [0.1]},
    {"epochs": 3, "gamma": 0.1, "ceiling": 2.0, "jitter": 0.1, "draws": [0.1, 1.5]},
])
def test_rise_and_reset_rejects_bad_parameters(kwargs):
    with pytest.raises(InvalidParameterError):
        acc.rise_and_reset(**kwargs)


def test_schedule_epsilon_is_dp_sgd_over_the_repeated_schedule():
    m = [1.0, 1.3, 0.95]
    kw = {"noise_multiplier": 0.9, "multipliers": m, "steps_per_epoch": 20, "sampling_rate": 0.05, "delta": 1e-5}
    sigmas = [0.9] * 20 + [0.9 * 1.3] * 20 + [0.9 * 0.95] * 20
    assert acc.schedule_epsilon(**kw, accountant="rdp") == acc.dp_sgd_epsilon(sampling_rate=0.05, noise_multipliers=sigmas,
                                                                             delta=1e-5)
    pld = acc.dp_sgd_pld_epsilon(sampling_rate=0.05, noise_multipliers=sigmas, delta=1e-5)
    assert acc.schedule_epsilon(**kw) == pld  # the PLD is the default
    assert 0 < pld < acc.schedule_epsilon(**kw, accountant="rdp")


@pytest.mark.parametrize(("accountant", "target", "tight", "epochs"), [
    ("rdp", 0.5, 1e-4, 4), ("rdp", 3.0, 1e-4, 4), ("rdp", 8.0, 1e-4, 4), ("pld", 1.0, 1e-3, 2), ("pld", 3.0, 1e-3, 2)])
def test_calibration_meets_the_target_and_is_tight(accountant, target, tight, epochs):
    """Calibrated and checked with the accountant that reports; the PLD's epsilon moves on a
    1e-4 grid, so it is tight to 1e-3 in sigma (and each distinct sigma costs it a fraction of
    a second: two epochs)."""
    m = acc.rise_and_reset(epochs=4, gamma=0.3, ceiling=2.0, jitter=0.05, draws=[0.2, 0.9, 0.5])[:epochs]
    kw = {"multipliers": m, "steps_per_epoch": 50, "sampling_rate": 0.02, "delta": 1e-5, "accountant": accountant}
    sigma = acc.calibrate_noise_multiplier(epsilon=target, **kw)
    assert acc.schedule_epsilon(noise_multiplier=sigma, **kw) <= target
    assert acc.schedule_epsilon(noise_multiplier=sigma * (1 - tight), **kw) > target


def test_the_pld_needs_less_noise_than_rdp_for_the_same_target():
    kw = {"epsilon": 3.0, "multipliers": [1.0], "steps_per_epoch": 200, "sampling_rate": 0.01, "delta": 1e-5}
    pld, rdp = acc.calibrate_noise_multiplier(**kw), acc.calibrate_noise_multiplier(**kw, accountant="rdp")
    assert pld < rdp * 0.97
    with pytest.raises(InvalidParameterError, match="accountant"):
        acc.calibrate_noise_multiplier(**kw, accountant="prv")


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_unreachable_epsilon_is_refused_with_what_to_change(accountant):
    with pytest.raises(InvalidParameterError, match="unreachable"):
        acc.calibrate_noise_multiplier(epsilon=1e-4, delta=1e-9, sampling_rate=1.0, steps_per_epoch=10_000, multipliers=[1.0] * 50,
                                       accountant=accountant)


def test_ledger_charges_dp_sgd_steps_exactly():
    sigmas = [1.1] * 30 + [1.4] * 30
    total = acc.dp_sgd_epsilon(sampling_rate=0.04, noise_multipliers=sigmas, delta=1e-5)
    ledger = Ledger({"record": total}, delta=1e-5, orders=INTEGER_ORDERS)
    for sigma in sigmas:
        ledger.charge({"record": SubsampledGaussianEvent(sampling_rate=0.04, noise_multiplier=sigma)})
    assert ledger.epsilon("record") == pytest.approx(total, rel=1e-12)
    with pytest.raises(BudgetExceededError):
        ledger.charge({"record": SubsampledGaussianEvent(sampling_rate=0.04, noise_multiplier=1.4)})
    restored = Ledger.from_state_dict(json.loads(json.dumps(ledger.state_dict())))
    assert restored.epsilon("record") == pytest.approx(total, rel=1e-12)
    assert restored.events("record") == {SubsampledGaussianEvent(sampling_rate=0.04, noise_multiplier=1.1): 30,
                                         SubsampledGaussianEvent(sampling_rate=0.04, noise_multiplier=1.4): 30}


def test_ledger_on_the_default_grid_ignores_fractional_orders():
    ledger = Ledger({"r": 100.0}, delta=1e-5)
    for _ in range(10):
        ledger.charge({"r": SubsampledGaussianEvent(sampling_rate=0.1, noise_multiplier=1.0)})
    expected = acc.dp_sgd_epsilon(sampling_rate=0.1, noise_multipliers=[1.0] * 10, delta=1e-5)
    assert ledger.epsilon("r") == pytest.approx(expected, rel=1e-12)


def test_opacus_rdp_accountant_agrees_at_the_same_orders():
    opacus_rdp = pytest.importorskip("opacus.accountants.rdp")
    accountant = opacus_rdp.RDPAccountant()
    sigmas = [1.0] * 40 + [1.25] * 40 + [0.9] * 40
    for sigma in sigmas:
        accountant.step(noise_multiplier=sigma, sample_rate=0.03)
    ours = acc.dp_sgd_epsilon(sampling_rate=0.03, noise_multipliers=sigmas, delta=1e-5)
    assert accountant.get_epsilon(delta=1e-5, alphas=list(INTEGER_ORDERS)) == pytest.approx(ours, rel=1e-9)
    # Opacus's default grid adds fractional orders, so it can only be as low or a little lower.
    assert accountant.get_epsilon(delta=1e-5) <= ours * (1 + 1e-9)
    assert accountant.get_epsilon(delta=1e-5) >= 0.95 * ours
