"""Composition of a protected unit's charges across requests, by RDP curves.

Each admitted request leaves one :class:`Charge` per protected unit it read: the worst-case
Renyi-DP curve of everything that request may release about the unit, from public parameters
only, fixed before generation:

* ``rdp``: DP-Fusion over T tokens at order alpha gives D_alpha <= value = T r_i
  (:func:`tokendp.accounting.dp_fusion_rdp_per_token`). Renyi divergence is non-decreasing in
  its order (van Erven and Harremoes 2014, Thm. 3), so the same value bounds every order
  a <= alpha; above alpha nothing is known (+inf).
* ``zcdp``: rho-zCDP (InvisibleInk, Amin et al.: rho = T rho_tok) is RDP a * rho at every order.

A value of 0 means the output ignores the unit (beta_i = 0, or a public-only method): 0 at
every order.

Requests compose adaptively, so the curves add order by order (Mironov 2017, Prop. 1); the
unit's epsilon at the tenant's delta is the improved conversion minimised over a grid
(:func:`tokendp.accounting.rdp_to_epsilon`: the ledger's conversion) made of
:data:`tokendp.accounting.DEFAULT_ORDERS` and every charged alpha. With k requests at one
order this is k T r + offset(alpha): the conversion's offset is paid once, where adding the
requests' epsilons would pay it k times (and would hold only at delta k times larger).

When every charge is zCDP, the rhos add (Bun and Steinke 2016, Lemma 2.3) and the exact
conversion (:func:`tokendp.accounting.zcdp_to_epsilon`, minimised over all orders, not a grid)
is used if it is smaller, as the ledger does; so a lone zCDP charge costs exactly the epsilon
its request was calibrated for.

The epsilon is rounded up, never down: the curves a rho gives (a * rho) are rounded up, the
curves added with :func:`tokendp.accounting.compose_rdp` and the rhos with
:func:`tokendp.accounting.compose_zcdp` (upper bounds under any order of addition), and both
conversions round up (docs/privacy.md, "Rounding of reported epsilons").
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from tokendp.accounting import DEFAULT_ORDERS, compose_rdp, compose_zcdp, rdp_to_epsilon, upper_sum, zcdp_to_epsilon


@dataclass(frozen=True)
class Charge:
    """One request's worst-case cost to one unit (see the module docstring)."""

    kind: Literal["rdp", "zcdp"]
    value: float
    alpha: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("rdp", "zcdp") or not (math.isfinite(self.value) and self.value >= 0):
            raise ValueError(f"invalid charge {self!r}")
        if self.kind == "rdp" and not (self.alpha is not None and math.isfinite(self.alpha) and self.alpha > 1):
            raise ValueError(f"an rdp charge needs its order alpha > 1, got {self.alpha!r}")

    def curve(self, orders: np.ndarray) -> np.ndarray:
        """RDP at each order, rounded up  # (K,)"""
        if self.value == 0:
            return np.zeros_like(orders)
        if self.kind == "zcdp":
            return np.asarray(upper_sum([orders * self.value], units=1.0))  # the product within U
        return np.where(orders <= self.alpha, self.value, math.inf)


def grid(charges: Iterable[Charge]) -> np.ndarray:
    """The default orders and every charged alpha  # (K,)"""
    return np.unique(np.array([*DEFAULT_ORDERS, *(c.alpha for c in charges if c.alpha is not None)],
                              dtype=np.float64))


def epsilon(charges: Iterable[Charge], *, delta: float) -> float:
    """The unit's epsilon at ``delta`` after all ``charges`` (0 with none)."""
    charges = list(charges)
    if not charges:
        return 0.0
    orders = grid(charges)  # (K,)
    total = compose_rdp(*(c.curve(orders) for c in charges))  # (K,)
    bound = rdp_to_epsilon(rdp=total, orders=orders, delta=delta)
    if all(c.kind == "zcdp" or c.value == 0 for c in charges):
        rho = compose_zcdp([c.value for c in charges if c.kind == "zcdp"])
        bound = min(bound, zcdp_to_epsilon(rho=rho, delta=delta))
    return bound
