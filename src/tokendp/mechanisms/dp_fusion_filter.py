"""DP-Fusion with a per-group Rényi filter: each token charges each group what its component
actually moved, against a budget B_i fixed from (epsilon_i, delta, alpha) alone.

Claim (docs/privacy.md, "DP-Fusion with a per-group Rényi filter").
  Adjacency: DP-Fusion's (documents that differ only in group i's span tokens; the neighbour
  holds placeholders there, so its row i is the public row). Unit: the privacy group.
  Per step, for each group i with remaining budget R_i, public pacing cap pace_i and public
  weight ceiling L_i (1: none):
      c_i = min(pace_i, rho^-1(R_i - A));
      p_i <- L_i p_i + (1 - L_i) p_pub (unless row i equals the public row);
      lam_i = mollify(p_i, p_pub, c_i) (0 when row i equals the public row), d_i its rigorous
      symmetric-divergence bound at lam_i;
      charge chi_i = rho(d_i) + A rounded up if lam_i > 0, else 0 (lam_i = 0 and chi_i = 0 if
      chi_i would exceed R_i);
      release (1/m) sum over ALL m groups of lam_j p_j + (1 - lam_j) p_pub;
  with rho(d) = log(1 + (exp((alpha-1) d) - 1)/m)/(alpha-1) and A the release allowance
  (:func:`~tokendp.mechanisms.mixture.release_allowance`). Each group's lam, charge and ledger
  depend on its own row, the public row and the released tokens only (separability), so the
  neighbours' step laws differ in component i alone, by at most chi_i in both directions.
  Composition: the filter theorem (Feldman and Zrnic 2021, Thm. 3.1; proved in the docs): with
  sum_t chi_i,t <= B_i on every path, the output is (alpha, B_i)-RDP; convert with
  :func:`~tokendp.accounting.dp_fusion_filter_epsilon`.
The lambdas, divergences, charges and remaining budgets are data-dependent: never released,
reported or used to decide anything but the next lambdas (no stop on exhaustion).

How a job drives it, per decoding step of the active documents ``docs # (Na,)``::

    state = RenyiFilter(budgets)                                  # (N, m) float64, B_i per group
    out = mechanism.step(logits, remaining=state.remaining[docs], pace=pace[docs], group_mask=mask[docs],
                         max_lam=ceiling[docs])                   # ceiling: dp_fusion_filter_max_lam
    state.spend(docs, out.charges)                                # before the token is sampled
    token = sample(out.logprobs)

Speculative decoding: the engine's verifier takes each position's step only after the tokens
before it are released, so ``spend`` is called once per released token and nothing needs undoing.
A verifier that computes several positions' steps before it knows which are released opens a
round (:meth:`RenyiFilter.begin_round`), spends every computed position in order (each on its
own prefix's remaining budget) and then calls :meth:`RenyiFilter.rollback` with the number of
positions each document released: the later spends are undone exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

import tokendp._device as _device
from tokendp.accounting._checks import check_order
from tokendp.errors import BudgetExceededError, InvalidInputError, InvalidParameterError
from tokendp.mechanisms._float import UNIT
from tokendp.mechanisms.base import MechanismStep, check_logits, check_positive
from tokendp.mechanisms.mixture import average_rows, release_allowance, search_rows

__all__ = ["DPFusionFilter", "FilterStep", "RenyiFilter", "charge_upper", "cap_proposal"]

_UNDERFLOW = 2.0**-1000
"""Below this the argument of log1p may be subnormal, outside the relative error model: the
charge there is d itself (rho(d) <= d)."""

_PROPOSAL_MARGIN = 2.0**-40
"""The cap proposal aims this far (relative) below rho^-1(R - A), so that the charge's own
rounding up (about 32 U) fits and the fallback of step 3 practically never fires."""


@dataclass(frozen=True)
class FilterStep(MechanismStep):
    """A step of :class:`DPFusionFilter`: ``logprobs`` (..., V) float64 to sample from, and
    ``charges`` (..., m) float64, each an upper bound of the RDP the step costs that group,
    never above its remaining budget (0 for groups not averaged and groups with lam = 0).
    Diagnostics "lam" and "divergence" (..., m): data-dependent, never the guarantee."""

    charges: Tensor = field(kw_only=True)  # (..., m) float64


def charge_upper(divergence: Tensor, groups: Tensor, alpha: float) -> Tensor:
    """rho(d) = log(1 + (exp((alpha-1) d) - 1) / m) / (alpha-1), rounded up, on the device.

    ``divergence # (..., k)`` float64 (d >= 0), ``groups # (..., 1)`` (m >= 1) -> (..., k) float64.
    The device twin of :func:`~tokendp.accounting.dp_fusion_filter_charge`: x = (alpha-1) d and
    w = 1/m are rounded up by a factor 1 + 4U (each computed within 2U); expm1 (8 U), the
    product (U), log1p (8 U, condition number <= 1), alpha - 1 and the division (2 U) leave the
    result within 20 U, so it is multiplied by 1 + 32 U and moved one float up. Where the
    log1p argument could be subnormal, or overflows, d itself bounds rho (rho(d) <= d).
    NaN stays NaN (the step's fit check then rejects it).
    """
    x = divergence * (alpha - 1.0) * (1.0 + 4.0 * UNIT)  # (..., k): >= (alpha-1) d
    w = (1.0 / groups.to(torch.float64)) * (1.0 + 4.0 * UNIT)  # (..., 1): >= 1/m
    z = torch.expm1(x) * w
    rho = torch.log1p(z) / (alpha - 1.0) * (1.0 + 32.0 * UNIT)
    rho = torch.nextafter(rho, torch.full_like(rho, math.inf))
    return torch.where(z < _UNDERFLOW, divergence, torch.minimum(rho, divergence))


def cap_proposal(room: Tensor, groups: Tensor, alpha: float) -> Tensor:
    """rho^-1(r) = log(1 + m (exp((alpha-1) r) - 1)) / (alpha-1), a hair below, for ``room # (..., k)``
    = R - A float64 and ``groups # (..., 1)``; 0 where room <= 0, +inf where it overflows.

    Only a proposal (the device twin of :func:`~tokendp.accounting.dp_fusion_filter_cap`): the
    step checks the charge it ends up with against R.
    """
    y = room.clamp_min(0.0) * (alpha - 1.0)
    cap = torch.log1p(torch.expm1(y) * groups.to(torch.float64)) / (alpha - 1.0) * (1.0 - _PROPOSAL_MARGIN)
    return torch.where(room > 0, cap, 0.0)


class DPFusionFilter:
    """DP-Fusion's step under a per-group Rényi filter at order ``alpha`` (module docstring)."""

    name = "dp-fusion-filter"

    def __init__(self, alpha: float = 2.0) -> None:
        self.alpha = check_order(alpha)

    def caps(self, remaining: Tensor, pace: Tensor, mask: Tensor, vocab: int) -> Tensor:
        """c_i = min(pace_i, rho^-1(R_i - A)) for the averaged groups, 0 for padding: each
        group's divergence cap at this step, ``# (..., m)`` float64, from ``remaining`` and
        ``pace # (..., m)`` float64 (finite and >= 0), ``mask # (..., m)`` bool. The step's
        answer for a prefix depends on the ledger only through these caps and its check that
        the charge fits R_i."""
        allowance = release_allowance(self.alpha, groups=mask.shape[-1], vocab=vocab)
        return self._caps(remaining, pace, mask, allowance, mask.sum(-1, keepdim=True).clamp_min(1))

    def _caps(self, remaining: Tensor, pace: Tensor, mask: Tensor, allowance: float, groups: Tensor) -> Tensor:
        """:meth:`caps` with the release allowance A and ``groups # (..., 1)`` (m per document) given."""
        return torch.where(mask, torch.minimum(pace, cap_proposal(remaining - allowance, groups, self.alpha)), 0.0)

    def step(
        self,
        logits: Tensor,  # (..., 1+m, V), row 0 public
        *,
        remaining: Tensor,  # (..., m) float64: each group's remaining budget R_i
        pace: Tensor,  # (..., m) float64: each group's public per-step divergence cap
        group_mask: Tensor | None = None,  # (..., m) bool, False = padding
        temperature: float = 1.0,
        max_lam: Tensor | None = None,  # (..., m) float64 in (0, 1]: each group's public weight ceiling
    ) -> FilterStep:
        """Mix each group toward the public distribution within what its budget allows, charge
        it at the lam chosen, and release the average over all m real groups.

        p_pub and p_i are softmaxes of the rows at ``temperature``; see the module docstring for
        c_i, lam_i, chi_i. Vectorised over (documents, groups), no host read on accelerators.
        Returns ``logprobs # (..., V)`` float64 (the exact support of the mixture; all groups
        padding: p_pub) and ``charges # (..., m)`` float64, which the caller subtracts from
        ``remaining`` (:meth:`RenyiFilter.spend`) before sampling.

        ``remaining`` and ``pace`` of real groups must be finite and >= 0: on the CPU a bad value
        raises InvalidParameterError; on accelerators (no host read) its group gets lam = 0.
        """
        check_logits(logits, min_rows=2)
        temperature = check_positive("temperature", temperature)
        m, vocab = logits.shape[-2] - 1, logits.shape[-1]
        for name, value in (("remaining", remaining), ("pace", pace)):
            if not isinstance(value, Tensor) or value.shape[-1:] != (m,):
                raise InvalidInputError(
                    f"{name} must be a tensor (..., m) with m = {m} groups (rows after the public one)")
        device = logits.device
        mask = (torch.ones(remaining.shape, dtype=torch.bool, device=device) if group_mask is None
                else group_mask.to(torch.bool))  # (..., m)
        remaining = remaining.to(device=device, dtype=torch.float64)  # (..., m)
        pace = pace.to(device=device, dtype=torch.float64)  # (..., m)
        pace_ok = torch.isfinite(pace) & (pace >= 0)  # (..., m): public
        if max_lam is not None:
            max_lam = max_lam.to(device=device, dtype=torch.float64)  # (..., m)
            pace_ok = pace_ok & (max_lam > 0) & (max_lam <= 1)  # (NaN fails)
        valid = (torch.isfinite(remaining) & (remaining >= 0) & pace_ok) | ~mask
        if _device.reads_are_free(valid) and not bool(valid.all()):
            raise InvalidParameterError("remaining budgets and pacing caps must be finite and >= 0, weight ceilings "
                                        "in (0, 1]; build them with RenyiFilter, a non-negative pace and "
                                        "dp_fusion_filter_max_lam")
        allowance = release_allowance(self.alpha, groups=m, vocab=vocab)
        groups = mask.sum(-1, keepdim=True).clamp_min(1)  # (..., 1): m of each document
        cap = torch.where(valid, self._caps(remaining, pace, mask, allowance, groups), 0.0)  # (..., m)
        public = torch.where(mask & pace_ok, pace, 0.0)  # (..., m): decides a float32 search, never the ledgers
        if max_lam is not None:
            max_lam = torch.where(valid & mask, max_lam, 1.0)  # (..., m): invalid groups get cap 0 anyway
        # A spent group (cap 0) is searched as if it were live, at its public pace, and then given
        # lam = 0: the step's work, hence its time, does not tell whether a group's budget is spent.
        spent = valid & mask & (cap <= 0)  # (..., m)
        search = search_rows(logits, alpha=self.alpha, caps=torch.where(spent, public, cap), mask=mask,
                             temperature=temperature, public_caps=public, max_lam=max_lam)
        # A row equal to the public row (the neighbour's row i) mixes nothing: lam = 0, as when spent.
        lam = torch.where(search.mask & ~search.same & ~search.gather(spent), search.found.lam, 0.0)
        lam = lam.to(torch.float64)  # (..., w)
        charge = charge_upper(search.found.divergence, groups, self.alpha) + allowance
        charge = torch.nextafter(charge, torch.full_like(charge, math.inf))  # (..., w): >= rho(d) + A
        lam = torch.where(charge <= search.gather(remaining), lam, 0.0)  # step 3: never past R
        charge = torch.where(lam > 0, charge, 0.0)
        logprobs = average_rows(search, lam)
        applied = lam if max_lam is None else lam * search.gather(max_lam)  # (..., w): the weight on p_i itself
        diagnostics = {"lam": search.expand(applied).to(torch.float32),
                       "divergence": search.expand(torch.where(lam > 0, search.found.divergence, 0.0))}
        return FilterStep(logprobs, diagnostics, charges=search.expand(charge))


class RenyiFilter:
    """The ledgers of the per-group Rényi filter: remaining budget per (document, group), on a
    device, with check-on-spend and exact rollback for speculative rounds.

    ``budgets # (N, m)`` float64: B_i per group (0 for padding groups), one row per document or
    continuous-batching slot; nothing is shared across rows. :attr:`remaining` starts at the
    budgets; :meth:`spend` subtracts a step's charges, rounded down exactly (the float just below
    the exact difference when it does not fit: Fast2Sum), so remaining <= B - the exact sum of
    the charges on every path, bit for bit the same on every machine. A charge above what
    remains (which :class:`DPFusionFilter` never produces) raises BudgetExceededError where
    reads are free; on accelerators it sets a flag that :meth:`check` raises on.
    """

    def __init__(self, budgets: Tensor) -> None:
        if not isinstance(budgets, Tensor) or budgets.dim() != 2:
            raise InvalidInputError("budgets must be a tensor (N, m): one row per document, one column per group")
        budgets = budgets.to(torch.float64)
        _check_budgets(budgets)
        self.remaining = budgets.clone()  # (N, m) float64
        self._overdrawn = torch.zeros((), dtype=torch.bool, device=budgets.device)
        self._spends = torch.zeros(budgets.shape[0], dtype=torch.int64, device=budgets.device)  # (N,): this round
        self._journal: list[tuple[Tensor, Tensor, Tensor]] | None = None  # (docs, before, position) per spend

    def to(self, device: torch.device) -> None:
        """Move the ledgers to ``device``, where the steps run (once, before the first step there)."""
        self.remaining, self._overdrawn, self._spends = (t.to(device) for t in (self.remaining, self._overdrawn,
                                                                                self._spends))

    def admit(self, slot: int, budgets: Sequence[float] | Tensor) -> None:
        """Seat a document in ``slot`` with its budgets (m,) (continuous batching): a fresh ledger;
        nothing of the slot's previous document stays. Widens the table for more groups."""
        row = torch.as_tensor(budgets, dtype=torch.float64).reshape(-1).to(self.remaining.device)  # (m,)
        _check_budgets(row)
        if row.numel() > self.remaining.shape[1]:
            self.remaining = torch.nn.functional.pad(self.remaining, (0, row.numel() - self.remaining.shape[1]))
        self.remaining[slot] = 0.0
        self.remaining[slot, :row.numel()] = row
        self._spends[slot] = 0

    def spend(self, docs: Tensor, charges: Tensor) -> None:
        """Subtract ``charges # (Na, w)`` (w <= m: the step's groups) from the rows ``docs # (Na,)``,
        before the step's token is sampled; journalled when a round is open."""
        width = charges.shape[-1]
        docs = docs.to(self.remaining.device)
        before = self.remaining[docs, :width]  # (Na, w): a copy (advanced indexing)
        charges = charges.to(device=before.device, dtype=torch.float64)
        over = ~((charges >= 0) & (charges <= before))  # NaN counts as over
        if _device.reads_are_free(over):
            if bool(over.any()):
                raise BudgetExceededError("a Renyi filter charge exceeds the group's remaining budget; "
                                          "charge only what DPFusionFilter.step returns, once per released token")
        else:
            self._overdrawn |= over.any()
        if self._journal is not None:
            self._journal.append((docs, before, self._spends[docs]))
            self._spends[docs] += 1
        self.remaining[docs, :width] = _subtract_down(before, charges)

    def begin_round(self) -> None:
        """Start journalling spends: a speculative round whose later positions may be undone."""
        self._journal = []
        self._spends.zero_()

    def rollback(self, released: Tensor) -> None:
        """End the round: keep each document's first ``released # (N,)`` spends of the round and
        undo the rest, restoring the exact values they started from (no float re-addition)."""
        if self._journal is None:
            raise InvalidInputError("rollback needs a round: call begin_round before the round's spends")
        released = released.to(self.remaining.device)
        for docs, before, position in reversed(self._journal):  # the earliest undone spend wins
            undo = (position >= released[docs]).unsqueeze(-1)  # (Na, 1)
            width = before.shape[-1]
            self.remaining[docs, :width] = torch.where(undo, before, self.remaining[docs, :width])
        self._journal = None

    def check(self) -> None:
        """Raise BudgetExceededError if any charge ever exceeded what remained (one host read)."""
        if bool(self._overdrawn):
            raise BudgetExceededError("a Renyi filter charge exceeded a group's remaining budget")


def _check_budgets(budgets: Tensor) -> None:
    if not bool((torch.isfinite(budgets) & (budgets >= 0)).all()):
        raise InvalidParameterError("filter budgets must be finite and >= 0; compute them with "
                                    "tokendp.accounting.dp_fusion_filter_budget(epsilon=..., alpha=..., delta=...)")


def _subtract_down(before: Tensor, charge: Tensor) -> Tensor:
    """The largest float <= before - charge (exactly), for 0 <= charge <= before, elementwise.

    s = fl(before - charge); by Fast2Sum (|before| >= |charge|) the exact error is
    t = (before - s) - charge, computed exactly; if t < 0 the rounding went up, so step one float down.
    """
    s = before - charge
    t = (before - s) - charge
    return torch.where(t < 0, torch.nextafter(s, torch.full_like(s, -math.inf)), s)
