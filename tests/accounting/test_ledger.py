"""Ledger: check-then-commit, exact DP-Fusion totals, zCDP and pure paths, state round trip."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from tokendp import accounting as acc
from tokendp.accounting import Ledger, PureDpEvent, RdpEvent, ZcdpEvent
from tokendp.errors import BudgetExceededError, InvalidInputError, InvalidParameterError


def test_dp_fusion_charges_match_the_accountant_exactly():
    params = {"alpha": 2.0, "beta": 0.005, "groups": 3, "delta": 1e-3}
    budget = acc.dp_fusion_epsilon(**params, max_tokens=900)
    event = RdpEvent(alpha=2.0, rdp=acc.dp_fusion_rdp_per_token(alpha=2.0, beta=0.005, groups=3))
    ledger = Ledger({"PERSON": budget, "DATE": budget, "CODE": budget}, delta=1e-3)
    for _ in range(900):
        ledger.charge({"PERSON": event, "DATE": event})
    assert ledger.spent()["PERSON"] == pytest.approx(budget, rel=1e-9, abs=0)
    assert ledger.spent()["CODE"] == 0.0
    with pytest.raises(BudgetExceededError):
        ledger.charge({"PERSON": event})


def test_order_outside_the_grid_is_added_and_exact():
    event = RdpEvent(alpha=2.7, rdp=0.01)
    ledger = Ledger({"g": 1e6}, delta=1e-4, orders=[2.0, 3.0])
    for _ in range(50):
        ledger.charge({"g": event})
    assert ledger.epsilon("g") == pytest.approx(acc.rdp_to_epsilon(rdp=0.5, orders=2.7, delta=1e-4), rel=1e-12)


def test_calibrated_dp_fusion_spends_exactly_its_budget():
    beta = acc.dp_fusion_beta(epsilon=8.0, alpha=4.0, groups=2, max_tokens=300, delta=1e-5)
    event = RdpEvent(alpha=4.0, rdp=acc.dp_fusion_rdp_per_token(alpha=4.0, beta=beta, groups=2))
    ledger = Ledger({"a": 8.0}, delta=1e-5)
    for _ in range(300):
        ledger.charge({"a": event})  # the 300th token must still fit: no rounding refusal
    with pytest.raises(BudgetExceededError):
        ledger.charge({"a": event})


def test_calibrated_invisibleink_spends_exactly_its_budget():
    clip = acc.invisibleink_clip(epsilon=6.0, delta=1e-6, batch_size=4, temperature=1.0, max_tokens=200)
    event = ZcdpEvent(rho=acc.invisibleink_rho_per_token(clip=clip, batch_size=4, temperature=1.0))
    ledger = Ledger({ref: 6.0 for ref in range(4)}, delta=1e-6)
    for _ in range(200):
        ledger.charge({ref: event for ref in range(4)})
    assert ledger.epsilon(0) == pytest.approx(6.0, rel=1e-9)
    assert ledger.epsilon(0) <= 6.0
    with pytest.raises(BudgetExceededError):
        ledger.charge({0: event})


def test_refusal_commits_nothing():
    ledger = Ledger({"small": 1.0, "large": 100.0}, delta=1e-5)
    ledger.charge({"large": ZcdpEvent(rho=0.5)})
    before = ledger.state_dict()
    with pytest.raises(BudgetExceededError, match="small"):
        ledger.charge({"large": ZcdpEvent(rho=0.01), "small": ZcdpEvent(rho=5.0)})
    assert ledger.state_dict() == before
    with pytest.raises(BudgetExceededError, match="small"):
        ledger.charge({"large": RdpEvent(alpha=2.7, rdp=0.01), "small": RdpEvent(alpha=2.7, rdp=50.0)})
    assert ledger.state_dict() == before
    assert ledger.spent()["large"] == pytest.approx(acc.zcdp_to_epsilon(rho=0.5, delta=1e-5))


def test_pure_events_use_basic_composition_when_it_is_best():
    ledger = Ledger({"doc": 3.0}, delta=1e-6)
    for _ in range(3):
        ledger.charge({"doc": PureDpEvent(epsilon=1.0)})
    assert ledger.epsilon("doc") == pytest.approx(3.0)
    with pytest.raises(BudgetExceededError):
        ledger.charge({"doc": PureDpEvent(epsilon=0.01)})


def test_many_small_pure_events_use_the_rdp_curve():
    ledger = Ledger({"doc": 100.0}, delta=1e-6)
    for _ in range(1000):
        ledger.charge({"doc": PureDpEvent(epsilon=0.01)})
    assert ledger.epsilon("doc") < 10.0 * 0.5  # far below the basic sum of 10


def test_mixed_events_compose():
    ledger = Ledger({"u": 50.0}, delta=1e-5)
    ledger.charge({"u": ZcdpEvent(rho=0.1)})
    ledger.charge({"u": PureDpEvent(epsilon=0.5)})
    orders = list(acc.DEFAULT_ORDERS)
    curve = [0.1 * a + r for a, r in zip(orders, acc.pure_dp_to_rdp(epsilon=0.5, orders=orders))]
    zcdp_bound = acc.zcdp_to_epsilon(rho=0.1 + 0.5**2 / 2, delta=1e-5)
    grid_bound = acc.rdp_to_epsilon(rdp=curve, orders=orders, delta=1e-5)
    assert ledger.epsilon("u") == pytest.approx(min(zcdp_bound, grid_bound), rel=1e-12)
    ledger.charge({"u": RdpEvent(alpha=4.0, rdp=0.2)})
    rdp_at_4 = 4 * 0.1 + acc.pure_dp_to_rdp(epsilon=0.5, orders=[4.0])[0] + 0.2
    assert ledger.epsilon("u") == pytest.approx(acc.rdp_to_epsilon(rdp=rdp_at_4, orders=4.0, delta=1e-5), rel=1e-12)


def test_single_order_events_at_two_orders_cannot_compose():
    ledger = Ledger({"u": 1e9}, delta=1e-5)
    ledger.charge({"u": RdpEvent(alpha=2.0, rdp=0.1)})
    with pytest.raises(BudgetExceededError):
        ledger.charge({"u": RdpEvent(alpha=3.0, rdp=0.1)})


def test_zero_events_cost_nothing():
    ledger = Ledger({"u": 0.0}, delta=1e-5)
    ledger.charge({"u": RdpEvent(alpha=2.0, rdp=0.0)})
    ledger.charge({"u": ZcdpEvent(rho=0.0)})
    assert ledger.spent() == {"u": 0.0}
    with pytest.raises(BudgetExceededError):
        ledger.charge({"u": ZcdpEvent(rho=1e-9)})


@dataclass(frozen=True)
class _MysteryEvent:
    cost: float


def test_unknown_unit_or_event_is_an_error_and_commits_nothing():
    ledger = Ledger({"u": 10.0}, delta=1e-5)
    with pytest.raises(InvalidInputError, match="no budget"):
        ledger.charge({"u": ZcdpEvent(rho=0.1), "v": ZcdpEvent(rho=0.1)})
    with pytest.raises(InvalidInputError, match="unknown privacy event"):
        ledger.charge({"u": _MysteryEvent(cost=1.0)})  # type: ignore[dict-item]
    assert ledger.spent() == {"u": 0.0}


def test_state_dict_round_trip_through_json():
    ledger = Ledger({"PERSON": 20.0, 7: 5.0, "ORG": 50.0}, delta=1e-4)
    for _ in range(10):
        ledger.charge({"PERSON": RdpEvent(alpha=2.0, rdp=0.3), 7: ZcdpEvent(rho=0.01), "ORG": RdpEvent(alpha=2.7, rdp=0.2)})
    ledger.charge({7: PureDpEvent(epsilon=0.2), "PERSON": RdpEvent(alpha=2.0, rdp=0.1)})
    ledger.charge({"PERSON": RdpEvent(alpha=2.0, rdp=0.1)})
    state = json.loads(json.dumps(ledger.state_dict()))
    restored = Ledger.from_state_dict(state)
    assert restored.spent() == ledger.spent()
    assert restored.budgets == ledger.budgets and restored.delta == ledger.delta
    other = Ledger({"x": 1.0}, delta=0.1)
    other.load_state_dict(state)
    assert other.spent() == ledger.spent()
    restored.charge({7: ZcdpEvent(rho=0.01)})
    ledger.charge({7: ZcdpEvent(rho=0.01)})
    assert restored.spent() == ledger.spent()


@pytest.mark.parametrize("state", [
    {"format": "other"},
    {"format": "tokendp.ledger/1", "delta": 1e-5, "orders": [2.0], "units": [{"unit": "u", "budget": 1.0, "events": [{"type": "laplace", "count": 1}]}]},
    {"format": "tokendp.ledger/1", "delta": 1e-5, "orders": [2.0], "units": [{"unit": "u", "budget": 1.0, "events": [{"type": "zcdp", "rho": 0.1, "count": 0}]}]},
    {"format": "tokendp.ledger/1", "delta": 2.0, "orders": [2.0], "units": []},
])
def test_malformed_state_is_refused(state):
    ledger = Ledger({"u": 1.0}, delta=1e-5)
    with pytest.raises(InvalidInputError):
        ledger.load_state_dict(state)
    assert ledger.budgets == {"u": 1.0}


def test_bad_budgets_and_unserialisable_units():
    with pytest.raises(InvalidParameterError):
        Ledger({"u": -1.0}, delta=1e-5)
    with pytest.raises(InvalidParameterError):
        Ledger({"u": 1.0}, delta=0.0)
    with pytest.raises(InvalidInputError):
        Ledger({("a", 1): 1.0}, delta=1e-5).state_dict()
