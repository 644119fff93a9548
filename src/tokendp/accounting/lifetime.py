"""The vault's lifetime per-unit Rényi filter: its order, its budget, and the arithmetic of the
reservations that releases draw on (docs/privacy.md, "The vault: one lifetime filter per unit").

Each unit u (a person, or one (document, label) pair) has ONE filter at a fixed order alpha with
budget B_u, spent across every release, reader and restart. A release reserves, in one write
transaction, r_u = min(B_rel, B_u - spent_u - outstanding_u) rounded down (B_rel: what the
release's own filter may use, from its public epsilon), runs the per-group filter of
:mod:`tokendp.accounting.filter` with r_u as unit u's budget, and commits what it actually
spent (r_u minus what its filter left, rounded up). Invariant, on every path and under any
interleaving of concurrent releases:

    exact sum of every charge ever made to u  <=  spent_u + outstanding_u  <=  B_u,

so the filter theorem (Feldman and Zrnic 2021, Thm. 3.1) applied to the whole adaptive sequence
of releases makes everything released about u (alpha, B_u)-RDP. All values are exact rationals
rounded in the safe direction (:func:`~tokendp.accounting._rounding.ceil_float`): remaining
budgets down, spends up.
"""

from __future__ import annotations

import math
from fractions import Fraction

from tokendp.accounting._checks import check_nonnegative
from tokendp.accounting._rounding import ceil_float
from tokendp.accounting.filter import dp_fusion_filter_alpha, dp_fusion_filter_budget
from tokendp.errors import InvalidParameterError

__all__ = ["lifetime_alpha", "lifetime_budget", "lifetime_reservation", "lifetime_spent"]


def lifetime_alpha(*, epsilon: float, delta: float) -> float:
    """The vault's order for a lifetime ``epsilon`` at ``delta``: the per-group filter's own rule
    (:func:`~tokendp.accounting.dp_fusion_filter_alpha`: the smallest grid order that keeps at
    least 0.3 epsilon as RDP budget), since a unit's lifetime filter spends like a document's.
    Public parameters only; refused when no order qualifies (epsilon too small for delta)."""
    return dp_fusion_filter_alpha(epsilon=epsilon, delta=delta)


def lifetime_budget(*, epsilon: float, delta: float, alpha: float) -> float:
    """B, each unit's lifetime RDP budget at ``alpha``: the largest budget whose certificate
    (:func:`~tokendp.accounting.dp_fusion_filter_epsilon`) is at most ``epsilon``; 0 for 0."""
    return dp_fusion_filter_budget(epsilon=epsilon, alpha=alpha, delta=delta)


def lifetime_reservation(*, budget: float, spent: float, outstanding: float, release: float) -> float:
    """r = min(``release``, B - spent - outstanding), rounded down, and 0 when nothing remains.

    ``budget`` B: the unit's lifetime budget; ``spent``: the upper bound of its committed
    charges; ``outstanding``: the sum of the reservations of releases still open (in flight, or
    cut off by a crash: those count as spent); ``release``: what this release's filter may use
    (its B_rel, public). r depends on the unit's own ledger and public parameters only.
    """
    for name, value in (("budget", budget), ("spent", spent), ("outstanding", outstanding), ("release", release)):
        check_nonnegative(name, value)
    room = Fraction(budget) - Fraction(spent) - Fraction(outstanding)
    if room <= 0:
        return 0.0
    return min(float(release), -ceil_float(-room))  # -ceil(-x) = floor(x) to a float


def lifetime_spent(*, spent: float, reserved: float, left: float) -> float:
    """The unit's committed spend after a release that reserved ``reserved`` and whose filter
    left ``left`` of it: spent + (reserved - left), rounded up. The filter's ledger keeps
    ``left`` at or below the reservation minus the exact sum of its charges
    (:class:`~tokendp.mechanisms.RenyiFilter`), so reserved - left bounds what the release spent.
    """
    for name, value in (("spent", spent), ("reserved", reserved), ("left", left)):
        check_nonnegative(name, value)
    if left > reserved or not math.isfinite(reserved):
        raise InvalidParameterError(f"a release cannot leave {left!r} of a reservation of {reserved!r}")
    return ceil_float(Fraction(spent) + Fraction(reserved) - Fraction(left))
