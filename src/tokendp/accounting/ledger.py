"""A privacy ledger: one budget per protected unit, check-then-commit charging.

A unit is any hashable name (a privacy group label, a reference id, a shard). Each unit holds an
epsilon budget at the ledger's delta. Charges arrive as ``{unit: event}`` once per released token;
the ledger computes the would-be epsilon of every charged unit and either commits all charges
or raises :class:`~tokendp.errors.BudgetExceededError` having committed none (house rule 3 of
docs/design.md; docs/privacy.md, "The ledger").

Per unit the ledger stores how many times each (frozen, hashable) event was charged. A unit's
epsilon is the smallest of the bounds that apply to its events, all sound:

* pure only: basic composition, the sum of the epsilons (delta = 0 <= delta);
* no single-order RDP event: zCDP, rho = sum of rho + sum of eps^2/2 for pure events (Bun and
  Steinke 2016, Prop. 1.4, Lemma 2.3), converted exactly (:func:`~tokendp.accounting.zcdp.zcdp_to_epsilon`);
* always: the RDP curve on a grid of orders (ZcdpEvent: a rho at every order; PureDpEvent: its tight
  curve; RdpEvent(a, r): r at order a only, unknown (+inf) elsewhere; SubsampledGaussianEvent: the
  exact curve at the grid's integer orders, unknown at the others), converted by
  :func:`~tokendp.accounting.rdp.rdp_to_epsilon`. Orders of RdpEvents join the grid, so
  T charges of ``RdpEvent(alpha, r)`` give exactly T r + the conversion offset at alpha, the
  value of :func:`~tokendp.accounting.mechanisms.dp_fusion_epsilon`.

Every sum is rounded up (:mod:`tokendp.accounting._rounding`): the pure sum, the zCDP rho
(:func:`~tokendp.accounting.zcdp.compose_zcdp`) and the grid's per-order sums
(:func:`~tokendp.accounting.rdp.epsilon_sum`) are upper bounds of their exact values under any
order of addition, and, being functions of the multiset of terms, equal the accountants' values
bit for bit for the same charges. A unit is admitted only if such an upper bound meets its budget.

The check is cheap (no optimisation per token): the zCDP bound is checked by comparing rho with
the largest rho allowed by the budget, computed once per unit; the grid bound is one vector sum.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from tokendp.accounting._checks import check_delta, check_nonnegative
from tokendp.accounting._rounding import exact_sum_up
from tokendp.accounting.events import PrivacyEvent, PureDpEvent, RdpEvent, SubsampledGaussianEvent, ZcdpEvent
from tokendp.accounting.rdp import DEFAULT_ORDERS, grid_epsilon, offset_columns, pure_dp_to_rdp, subsampled_gaussian_rdp
from tokendp.accounting.zcdp import compose_zcdp, epsilon_to_zcdp, pure_dp_to_zcdp, zcdp_to_epsilon
from tokendp.errors import BudgetExceededError, InvalidInputError, InvalidParameterError

_FORMAT = "tokendp.ledger/1"
_EVENT_TYPES = (PureDpEvent, RdpEvent, ZcdpEvent, SubsampledGaussianEvent)


class Ledger:
    """Per-unit privacy budgets with check-then-commit composition.

    Args:
        budgets: unit -> epsilon budget (>= 0) at ``delta``. Units must be str or int for
            :meth:`state_dict` to be JSON-serialisable.
        delta: the delta every unit's epsilon refers to, in (0, 1).
        orders: the grid of Renyi orders for the RDP bound; the orders of charged RdpEvents are
            added to it (and removed again if the charge is refused).
    """

    def __init__(self, budgets: Mapping[Hashable, float], *, delta: float, orders: Sequence[float] = DEFAULT_ORDERS) -> None:
        self._delta = check_delta(delta)
        self._budgets = {unit: check_nonnegative(f"budget of unit {unit!r}", eps) for unit, eps in budgets.items()}
        self._rho_limits = {unit: epsilon_to_zcdp(epsilon=eps, delta=self._delta) for unit, eps in self._budgets.items()}
        self._counts: dict[Hashable, Counter[PrivacyEvent]] = {unit: Counter() for unit in self._budgets}
        self._base_orders = sorted({float(a) for a in orders})
        self._set_orders(self._base_orders)

    # --- public API --------------------------------------------------------------------------

    @property
    def delta(self) -> float:
        return self._delta

    @property
    def budgets(self) -> dict[Hashable, float]:
        return dict(self._budgets)

    def charge(self, charges: Mapping[Hashable, PrivacyEvent]) -> None:
        """Charge one event per listed unit: all are committed, or none (BudgetExceededError)."""
        for unit, event in charges.items():
            if unit not in self._budgets:
                raise InvalidInputError(f"unit {unit!r} has no budget in this ledger; give it one when building the Ledger")
            if not isinstance(event, _EVENT_TYPES):
                raise InvalidInputError(
                    f"unknown privacy event type {type(event).__name__} for unit {unit!r}; "
                    "charge a PureDpEvent, RdpEvent, ZcdpEvent or SubsampledGaussianEvent"
                )
        previous_orders = self._orders
        new_orders = {float(e.alpha) for e in charges.values() if isinstance(e, RdpEvent)} - set(previous_orders.tolist())
        if new_orders:
            self._set_orders(sorted(set(previous_orders.tolist()) | new_orders))
        refused = []
        for unit, event in charges.items():
            counts = self._counts[unit].copy()
            counts[event] += 1
            if not self._within_budget(unit, counts):
                refused.append(unit)
        if refused:
            if new_orders:
                self._set_orders(previous_orders)
            raise BudgetExceededError(
                f"charging this step would exceed the budget of unit(s) {refused!r} (delta={self._delta:g}); "
                "nothing was charged: stop generating or release only public output"
            )
        for unit, event in charges.items():
            self._counts[unit][event] += 1

    def epsilon(self, unit: Hashable) -> float:
        """The epsilon spent so far by ``unit`` at the ledger's delta."""
        if unit not in self._budgets:
            raise InvalidInputError(f"unit {unit!r} has no budget in this ledger")
        return self._epsilon(self._counts[unit])

    def events(self, unit: Hashable) -> dict[PrivacyEvent, int]:
        """The events charged to ``unit`` so far, with how many times each (e.g. for another
        accountant to compose the same steps)."""
        if unit not in self._budgets:
            raise InvalidInputError(f"unit {unit!r} has no budget in this ledger")
        return dict(self._counts[unit])

    def spent(self) -> dict[Hashable, float]:
        """unit -> epsilon spent so far (at the ledger's delta)."""
        return {unit: self._epsilon(counts) for unit, counts in self._counts.items()}

    def state_dict(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot: delta, orders, budgets and charged event counts."""
        units = []
        for unit, budget in self._budgets.items():
            if isinstance(unit, bool) or not isinstance(unit, (str, int)):
                raise InvalidInputError(f"unit {unit!r} is not a str or int and cannot be saved in a JSON state")
            events = [dict(_event_to_dict(event), count=count) for event, count in self._counts[unit].items()]
            units.append({"unit": unit, "budget": budget, "events": events})
        return {"format": _FORMAT, "delta": self._delta, "orders": list(self._base_orders), "units": units}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` snapshot (budgets, delta, orders and charges) in place."""
        if not isinstance(state, Mapping) or state.get("format") != _FORMAT:
            raise InvalidInputError(f"not a ledger state (expected format {_FORMAT!r})")
        try:
            restored = Ledger({u["unit"]: u["budget"] for u in state["units"]}, delta=state["delta"], orders=state["orders"])
            for u in state["units"]:
                for record in u["events"]:
                    count = record["count"]
                    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                        raise InvalidInputError("event counts in a ledger state must be integers >= 1")
                    restored._counts[u["unit"]][_event_from_dict(record)] += count
            event_orders = {float(e.alpha) for counts in restored._counts.values() for e in counts if isinstance(e, RdpEvent)}
            restored._set_orders(sorted(set(restored._base_orders) | event_orders))
        except (KeyError, TypeError, InvalidParameterError) as error:
            raise InvalidInputError(f"malformed ledger state: {error}") from error
        self.__dict__.update(restored.__dict__)

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> Ledger:
        ledger = cls({}, delta=0.5)
        ledger.load_state_dict(state)
        return ledger

    # --- internals ---------------------------------------------------------------------------

    def _set_orders(self, orders: Sequence[float]) -> None:
        alphas = np.unique(np.asarray(orders, dtype=np.float64))  # (K,)
        if alphas.size == 0 or not np.all(np.isfinite(alphas)) or np.any(alphas <= 1):
            raise InvalidParameterError("ledger orders must be a non-empty sequence of finite Renyi orders > 1")
        self._orders = alphas
        # Scalar evaluation per order so that the value at alpha matches dp_fusion_epsilon bit for bit.
        self._offsets = offset_columns(alphas, self._delta)  # 4 x (K,)
        self._curves: dict[PrivacyEvent, np.ndarray] = {}

    def _curve(self, event: PrivacyEvent) -> np.ndarray:
        """The event's RDP on the grid (cached per event)."""
        curve = self._curves.get(event)
        if curve is None:
            if isinstance(event, ZcdpEvent):
                curve = self._orders * event.rho
            elif isinstance(event, PureDpEvent):
                curve = pure_dp_to_rdp(epsilon=event.epsilon, orders=self._orders)
            elif isinstance(event, SubsampledGaussianEvent):
                curve = _subsampled_gaussian_curve(event, self._orders)
            elif event.rdp == 0:  # D_a = 0 means the output ignores the unit: no loss at any order
                curve = np.zeros_like(self._orders)
            else:
                curve = np.where(self._orders == float(event.alpha), event.rdp, math.inf)
            self._curves[event] = curve
        return curve

    def _grid_epsilon(self, counts: Counter[PrivacyEvent]) -> float:
        terms = [count * self._curve(event) for event, count in counts.items()]  # each (K,), within U of its value
        return grid_epsilon(terms, self._offsets)[0]

    @staticmethod
    def _rho(counts: Counter[PrivacyEvent]) -> float | None:
        """zCDP rho of the unit's events (rounded up), or None if a single-order RDP event rules zCDP out."""
        rhos, times = [], []
        for event, count in counts.items():
            if isinstance(event, ZcdpEvent):
                rhos.append(event.rho)
            elif isinstance(event, PureDpEvent):
                rhos.append(pure_dp_to_zcdp(epsilon=event.epsilon))
            elif isinstance(event, SubsampledGaussianEvent) or event.rdp != 0:
                return None
            else:
                continue  # an RdpEvent of 0: no loss at any order
            times.append(count)
        return compose_zcdp(rhos, times)

    @staticmethod
    def _pure_sum(counts: Counter[PrivacyEvent]) -> float | None:
        """Basic composition of pure events, in exact arithmetic rounded up."""
        if not all(isinstance(event, PureDpEvent) for event in counts):
            return None
        return exact_sum_up([event.epsilon for event in counts], list(counts.values()))

    def _within_budget(self, unit: Hashable, counts: Counter[PrivacyEvent]) -> bool:
        budget = self._budgets[unit]
        pure = self._pure_sum(counts)
        if pure is not None and pure <= budget:
            return True
        rho = self._rho(counts)
        if rho is not None and rho <= self._rho_limits[unit]:
            return True
        return self._grid_epsilon(counts) <= budget

    def _epsilon(self, counts: Counter[PrivacyEvent]) -> float:
        if not counts:
            return 0.0
        bounds = [self._grid_epsilon(counts)]
        pure = self._pure_sum(counts)
        if pure is not None:
            bounds.append(pure)
        rho = self._rho(counts)
        if rho is not None:
            bounds.append(zcdp_to_epsilon(rho=rho, delta=self._delta))
        return min(bounds)


def _subsampled_gaussian_curve(event: SubsampledGaussianEvent, orders: np.ndarray) -> np.ndarray:
    """The exact curve at the integer orders of the grid, +inf (unknown) at the others."""
    integer = orders == np.round(orders)  # (K,)
    curve = np.full(orders.shape, math.inf)  # (K,)
    if np.any(integer):
        curve[integer] = subsampled_gaussian_rdp(sampling_rate=event.sampling_rate, noise_multiplier=event.noise_multiplier,
                                                 orders=orders[integer].astype(np.int64).tolist())
    return curve


def _event_to_dict(event: PrivacyEvent) -> dict[str, Any]:
    if isinstance(event, PureDpEvent):
        return {"type": "pure", "epsilon": event.epsilon}
    if isinstance(event, SubsampledGaussianEvent):
        return {"type": "subsampled-gaussian", "sampling_rate": event.sampling_rate, "noise_multiplier": event.noise_multiplier}
    if isinstance(event, ZcdpEvent):
        return {"type": "zcdp", "rho": event.rho}
    return {"type": "rdp", "alpha": event.alpha, "rdp": event.rdp}


def _event_from_dict(record: Mapping[str, Any]) -> PrivacyEvent:
    kind = record.get("type")
    if kind == "pure":
        return PureDpEvent(epsilon=record["epsilon"])
    if kind == "zcdp":
        return ZcdpEvent(rho=record["rho"])
    if kind == "rdp":
        return RdpEvent(alpha=record["alpha"], rdp=record["rdp"])
    if kind == "subsampled-gaussian":
        return SubsampledGaussianEvent(sampling_rate=record["sampling_rate"], noise_multiplier=record["noise_multiplier"])
    raise InvalidInputError(f"unknown event type {kind!r} in ledger state; expected 'pure', 'zcdp', 'rdp' or 'subsampled-gaussian'")
