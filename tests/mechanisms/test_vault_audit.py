"""The exact audit of the vault's lifetime per-unit filter (docs/privacy.md, "The vault: one
lifetime filter per unit"): two successive releases of two documents that share one subject,
the second run on the ledger the first left, every pair of outputs enumerated with its exact
probability; the neighbour really blanks the subject's spans in BOTH documents (its rows are
the public rows of each) and reruns everything, ledger included. Both directions of the
sequence-level D_alpha of the pair of releases must stay within the unit's lifetime budget B.
Then the variants the proof rules out (a ledger that resets per release, a unit per document
instead of the subject, concurrent reservations that do not count each other) must exceed it.

The step, the ledgers and the sampler's law are production code (DPFusionFilter, RenyiFilter,
the helpers of tests/mechanisms/test_filter_audit.py); so are the unit keys
(:func:`tokendp.service.units.unit_key`) and the reservation arithmetic
(:func:`tokendp.accounting.lifetime_reservation`, :func:`tokendp.accounting.lifetime_spent`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import mpmath
import pytest
import torch

from tests.mechanisms.test_filter_audit import EOS, PEAKED, TINY_ONE, UNIFORM, _divergence, _law, random_model
from tokendp.accounting import lifetime_reservation, lifetime_spent
from tokendp.mechanisms import DPFusionFilter, RenyiFilter
from tokendp.service.units import unit_key

T = 3  # tokens per release
Model = Callable[[tuple[int, ...]], torch.Tensor]  # prefix -> logits (1+m, V) float32
Adaptive = Callable[[tuple[int, ...], tuple[int, ...]], torch.Tensor]  # (first release, prefix) -> logits


@dataclass(frozen=True)
class Doc:
    """A document: its id, one (label, subject or None) per group (row i+1), its rows."""

    id: str
    groups: tuple[tuple[str, str | None], ...]


@dataclass(frozen=True)
class Case:
    name: str
    first: Doc
    second: Doc
    model_first: Model
    model_second: Adaptive  # the second release may depend on what the first released
    budget: float  # every unit's lifetime B
    release: float  # what one release's filter may use (B_rel)
    pace: float
    alpha: float


# ---------------------------------------------------------------------------- the vault's ledger
class Ledger:
    """A tenant's units: committed spend and outstanding reservations per unit key."""

    def __init__(self, budget: float, keys: Callable[[str, str, str | None], str] = unit_key,
                 reset: bool = False, count_outstanding: bool = True) -> None:
        self.budget, self.keys, self.reset, self.count_outstanding = budget, keys, reset, count_outstanding
        self.spent: dict[str, float] = {}
        self.outstanding: dict[str, float] = {}

    def copy(self) -> Ledger:
        other = Ledger(self.budget, self.keys, self.reset, self.count_outstanding)
        other.spent, other.outstanding = dict(self.spent), dict(self.outstanding)
        return other

    def units(self, doc: Doc) -> list[str]:
        return [self.keys(doc.id, label, subject) for label, subject in doc.groups]

    def reserve(self, doc: Doc, release: float) -> list[float]:
        """Each group's reservation, recorded as outstanding (one write transaction)."""
        out = []
        for unit in self.units(doc):
            spent = 0.0 if self.reset else self.spent.get(unit, 0.0)
            pending = self.outstanding.get(unit, 0.0) if self.count_outstanding else 0.0
            r = lifetime_reservation(budget=self.budget, spent=spent, outstanding=pending, release=release)
            self.outstanding[unit] = self.outstanding.get(unit, 0.0) + r
            out.append(r)
        return out

    def commit(self, doc: Doc, reserved: list[float], left: torch.Tensor) -> None:
        for unit, r, rest in zip(self.units(doc), reserved, left.tolist()):
            self.outstanding[unit] -= r
            self.spent[unit] = lifetime_spent(spent=self.spent.get(unit, 0.0), reserved=r, left=rest)


# ---------------------------------------------------------------------------- enumeration
def release(model: Model, budgets: list[float], pace: float, alpha: float
            ) -> list[tuple[tuple[int, ...], Fraction, torch.Tensor]]:
    """Every output of one release with its exact probability and what its filter left per group."""
    m = len(budgets)
    frontier = [((), Fraction(1), torch.tensor(budgets, dtype=torch.float64))]
    outputs = []
    while frontier:
        logits = torch.stack([model(prefix) for prefix, _, _ in frontier])  # (N, 1+m, V)
        ledgers = RenyiFilter(torch.stack([r for _, _, r in frontier]))  # (N, m)
        out = DPFusionFilter(alpha).step(logits, remaining=ledgers.remaining.clone(),
                                         pace=torch.full((len(frontier), m), pace, dtype=torch.float64))
        ledgers.spend(torch.arange(len(frontier)), out.charges)
        nxt = []
        for n, (prefix, prob, _) in enumerate(frontier):
            for token, p in enumerate(_law(out.logprobs[n])):
                if p == 0:
                    continue
                seq, after = (*prefix, token), ledgers.remaining[n].clone()
                (outputs if token == EOS or len(seq) == T else nxt).append((seq, prob * p, after))
        frontier = nxt
    return outputs


def two_releases(case: Case, ledger: Ledger, first: Model, second: Adaptive, *, concurrent: bool = False
                 ) -> dict[tuple, Fraction]:
    """The joint law of (first release, second release). Sequential: the second reserves on the
    ledger the first's commit left (which depends on the first's path). Concurrent: both reserve
    before either commits."""
    joint: dict[tuple, Fraction] = {}
    ledger = ledger.copy()
    r1 = ledger.reserve(case.first, case.release)
    r2_now = ledger.copy().reserve(case.second, case.release) if concurrent else None
    for seq1, p1, left1 in release(first, r1, case.pace, case.alpha):
        after = ledger.copy()
        after.commit(case.first, r1, left1)
        r2 = r2_now if concurrent else after.reserve(case.second, case.release)
        for seq2, p2, _ in release(lambda prefix: second(seq1, prefix), r2, case.pace, case.alpha):
            joint[(seq1, seq2)] = joint.get((seq1, seq2), Fraction(0)) + p1 * p2
    return joint


def blank(doc: Doc, unit: str, keys=unit_key) -> Callable[[torch.Tensor], torch.Tensor]:
    """Logits -> the neighbour's: every row of ``unit`` in ``doc`` is the public row."""
    rows = [1 + i for i, (label, subject) in enumerate(doc.groups) if keys(doc.id, label, subject) == unit]

    def neighbour(logits):
        logits = logits.clone()
        for r in rows:
            logits[r] = logits[0]
        return logits

    return neighbour


def audit(case: Case, ledger: Ledger, *, concurrent: bool = False) -> dict[str, float]:
    """max of both directions of D_alpha / B for each unit, its neighbour blanking it everywhere
    (units as the PRODUCTION keys define them, whatever the ledger under audit keys by)."""
    law = two_releases(case, ledger, case.model_first, case.model_second, concurrent=concurrent)
    ratios = {}
    for unit in dict.fromkeys(Ledger(case.budget).units(case.first) + Ledger(case.budget).units(case.second)):
        b1, b2 = blank(case.first, unit), blank(case.second, unit)
        neighbour = two_releases(case, ledger, lambda p: b1(case.model_first(p)),
                                 lambda s, p: b2(case.model_second(s, p)), concurrent=concurrent)
        worst = max(_divergence(law, neighbour, case.alpha), _divergence(neighbour, law, case.alpha))
        ratios[unit] = float(worst / mpmath.mpf(case.budget))
    return ratios


# ---------------------------------------------------------------------------- cases
def fixed(rows: list[list[float]]) -> Model:
    table = torch.tensor(rows, dtype=torch.float32)
    return lambda prefix: table


def adaptive(seed: int, m: int) -> Adaptive:
    """A second release whose tables depend on what the first released (an adaptive reader)."""
    models: dict[tuple[int, ...], Model] = {}

    def model(first, prefix):
        if first not in models:
            models[first] = random_model(seed * 131 + sum(t * 7**k for k, t in enumerate((*first, 1))), m,
                                         tiny_public=seed % 2 == 0)
        return models[first](prefix)

    return model


ALICE = "patient-7"
FIRST = Doc("letter-1", (("PERSON", ALICE),))
SECOND = Doc("letter-2", (("PERSON", ALICE), ("DATETIME", None)))
SECOND_PEAKED = [UNIFORM, PEAKED, [0.0, 0.0, 2.0, 0.0]]


def cases() -> list[Case]:
    out = [
        # Each release alone may spend the whole lifetime budget at its first token.
        Case("release budget = lifetime budget, spent at once", FIRST, SECOND, fixed([UNIFORM, PEAKED]),
             lambda s, p: fixed(SECOND_PEAKED)(p), 0.3, 0.3, 10.0, 2.0),
        # Each release may use 60% of it: the second gets what the first left.
        Case("release budget 60% of the lifetime", FIRST, SECOND, fixed([UNIFORM, PEAKED]),
             lambda s, p: fixed(SECOND_PEAKED)(p), 0.3, 0.18, 10.0, 2.0),
        Case("tiny public probability, paced", FIRST, SECOND, fixed([TINY_ONE, UNIFORM]),
             lambda s, p: fixed([TINY_ONE, [0.0, 4.0, 0.0, 0.0], UNIFORM])(p), 0.25, 0.2, 0.1, 3.5),
    ]
    for seed in range(3):
        out.append(Case(f"random, adaptive second release {seed}", FIRST, SECOND, random_model(40 + seed, 1),
                        adaptive(seed, 2), 0.2 * (1 + seed), 0.15 * (1 + seed), 0.08 * (1 + seed),
                        (2.0, 3.5, 8.0)[seed]))
    return out


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.name)
@pytest.mark.parametrize("concurrent", [False, True], ids=["sequential", "concurrent"])
def test_every_unit_stays_within_its_lifetime_budget_over_both_releases(case: Case, concurrent: bool) -> None:
    ratios = audit(case, Ledger(case.budget), concurrent=concurrent)
    assert max(ratios.values()) <= 1.0, (case.name, ratios)


def test_the_audit_is_tight_where_the_bound_is() -> None:
    """The first release spends nearly the whole budget at its first token; the second, run on
    what is left, reads the subject's rows as the public row."""
    ratios = audit(cases()[0], Ledger(0.3))
    assert 0.9 <= ratios[unit_key(FIRST.id, "PERSON", ALICE)] <= 1.0


def test_an_exhausted_unit_leaves_the_second_release_equal_to_its_neighbours() -> None:
    """Once the subject's budget is spent, the second release is the same law whether or not
    its text is there: the release goes on, reading the public row."""
    case = cases()[0]
    ledger = Ledger(case.budget)
    ledger.spent[unit_key(FIRST.id, "PERSON", ALICE)] = case.budget
    r = ledger.reserve(case.second, case.release)
    assert r[0] == 0.0 and r[1] > 0
    second = fixed(SECOND_PEAKED)
    mine = {s: p for s, p, _ in release(second, r, case.pace, case.alpha)}
    blanked = blank(case.second, unit_key(SECOND.id, "PERSON", ALICE))
    theirs = {s: p for s, p, _ in release(lambda p: blanked(second(p)), r, case.pace, case.alpha)}
    assert mine == theirs and sum(mine.values()) == 1


MUTATIONS = {
    "a ledger that resets per release": dict(reset=True),
    "a unit per document instead of the subject": dict(keys=lambda doc, label, subject: unit_key(doc, label, None)),
    "concurrent reservations that do not count each other": dict(count_outstanding=False),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_the_audit_catches_each_unsound_variant(name: str) -> None:
    concurrent = name.startswith("concurrent")
    worst = 0.0
    for case in cases()[:2]:
        ratios = audit(case, Ledger(case.budget, **MUTATIONS[name]), concurrent=concurrent)
        worst = max(worst, ratios[unit_key(FIRST.id, "PERSON", ALICE)])
    assert worst > 1.0, f"the audit did not catch '{name}' (worst {worst:.3f} of B)"
