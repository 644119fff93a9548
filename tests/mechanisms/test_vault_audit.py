"""The exact audit of the vault's lifetime per-unit filter (docs/privacy.md, "The vault: one
lifetime filter per unit"): two releases of two documents that share one subject, under the
vault's ticket rule (a release reserves only after every earlier ticket of its units has
closed), every pair of outputs enumerated with its exact probability; the neighbour really
blanks the subject's spans in BOTH documents (its rows are the public rows of each) and reruns
everything, ledger and schedule included. Both directions of the sequence-level D_alpha of the
pair of releases must stay within the unit's lifetime budget B, whether the second request
arrives after the first has committed or while it runs. Then the variants the proof rules out
(a ledger that resets per release, a unit per document instead of the subject, overlapping
reservations that do not count each other, overlapping reservations without the ordering when a
release's duration depends on the text) must exceed it.

The step, the ledgers and the sampler's law are production code (DPFusionFilter, RenyiFilter,
the helpers of tests/mechanisms/test_filter_audit.py); so are the unit keys
(:func:`tokendp.service.vault.units.unit_key`) and the reservation arithmetic
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
from tokendp.service.vault.units import unit_key

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
    """A tenant's units: committed spend and outstanding reservations per unit key, and the
    open tickets in arrival order (``ordered``: the vault's rule, a ticket reserves only after
    every earlier open ticket that shares a unit with it has closed)."""

    def __init__(self, budget: float, keys: Callable[[str, str, str | None], str] = unit_key,
                 reset: bool = False, count_outstanding: bool = True, ordered: bool = True) -> None:
        self.budget, self.keys, self.reset = budget, keys, reset
        self.count_outstanding, self.ordered = count_outstanding, ordered
        self.spent: dict[str, float] = {}
        self.outstanding: dict[str, float] = {}
        self.tickets: dict[int, list[str]] = {}  # open tickets: place in arrival order -> units
        self.arrived = 0

    def copy(self) -> Ledger:
        other = Ledger(self.budget, self.keys, self.reset, self.count_outstanding, self.ordered)
        other.spent, other.outstanding = dict(self.spent), dict(self.outstanding)
        other.tickets, other.arrived = dict(self.tickets), self.arrived
        return other

    def units(self, doc: Doc) -> list[str]:
        return [self.keys(doc.id, label, subject) for label, subject in doc.groups]

    def ticket(self, doc: Doc) -> int:
        """A request arrives: its place in the arrival order, with its units."""
        self.arrived += 1
        self.tickets[self.arrived] = self.units(doc)
        return self.arrived

    def ready(self, ticket: int) -> bool:
        mine = set(self.tickets[ticket])
        return not self.ordered or not any(n < ticket and mine & set(units) for n, units in self.tickets.items())

    def reserve(self, ticket: int, release: float) -> list[float]:
        """Each group's reservation, recorded as outstanding (one write transaction)."""
        assert self.ready(ticket)
        out = []
        for unit in self.tickets[ticket]:
            spent = 0.0 if self.reset else self.spent.get(unit, 0.0)
            pending = self.outstanding.get(unit, 0.0) if self.count_outstanding else 0.0
            r = lifetime_reservation(budget=self.budget, spent=spent, outstanding=pending, release=release)
            self.outstanding[unit] = self.outstanding.get(unit, 0.0) + r
            out.append(r)
        return out

    def commit(self, ticket: int, reserved: list[float], left: torch.Tensor) -> None:
        for unit, r, rest in zip(self.tickets.pop(ticket), reserved, left.tolist()):
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


def always(model: Model) -> bool:
    return True


def two_releases(case: Case, ledger: Ledger, first: Model, second: Adaptive, *, arrival: bool = False,
                 busy: Callable[[Model], bool] = always) -> dict[tuple, Fraction]:
    """The joint law of (first release, second release). Sequential: the second request arrives
    after the first has committed. ``arrival``: it arrives while the first runs (both hold
    tickets, the first has reserved), and asks to reserve while the first is still running if
    ``busy(first)`` (how long the first runs); it reserves then if the ledger lets it, else once
    the first has committed, on the ledger that commit left (which depends on the first's path)."""
    joint: dict[tuple, Fraction] = {}
    ledger = ledger.copy()
    t1 = ledger.ticket(case.first)
    t2 = ledger.ticket(case.second) if arrival else None
    r1 = ledger.reserve(t1, case.release)
    early = None
    if arrival and busy(first) and ledger.ready(t2):
        early = ledger.copy().reserve(t2, case.release)
    for seq1, p1, left1 in release(first, r1, case.pace, case.alpha):
        after = ledger.copy()
        after.commit(t1, r1, left1)
        r2 = early if early is not None else after.reserve(t2 if arrival else after.ticket(case.second), case.release)
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


def audit(case: Case, ledger: Ledger, *, arrival: bool = False, busy: Callable[[Model], bool] = always
          ) -> dict[str, float]:
    """max of both directions of D_alpha / B for each unit, its neighbour blanking it everywhere
    (units as the PRODUCTION keys define them, whatever the ledger under audit keys by)."""
    law = two_releases(case, ledger, case.model_first, case.model_second, arrival=arrival, busy=busy)
    ratios = {}
    for unit in dict.fromkeys(Ledger(case.budget).units(case.first) + Ledger(case.budget).units(case.second)):
        b1, b2 = blank(case.first, unit), blank(case.second, unit)
        neighbour = two_releases(case, ledger, lambda p: b1(case.model_first(p)),
                                 lambda s, p: b2(case.model_second(s, p)), arrival=arrival, busy=busy)
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


# The timing channel: the first release reads ALICE and BOB, and runs longer when ALICE's row
# differs from the public row (the search's speed); the second reads BOB only. Each release may
# use the whole lifetime budget; BOB's first row is near the public row (it spends little), his
# second peaked.
BOB = "patient-9"
BOTH = Doc("letter-1", (("PERSON", ALICE), ("PERSON", BOB)))
BOB_ONLY = Doc("letter-3", (("PERSON", BOB),))
TIMED = Case("the first release's duration depends on another subject's text", BOTH, BOB_ONLY,
             fixed([UNIFORM, [0.0, 6.0, 0.0, 0.0], [0.0, 0.2, 0.0, 0.0]]),
             lambda s, p: fixed([UNIFORM, [0.0, 0.0, 6.0, 0.0]])(p), 0.3, 0.3, 10.0, 2.0)


def slow_if_alice_is_private(model: Model) -> bool:
    """The first release is still running when the second asks to reserve iff ALICE's row
    (row 1) differs from the public row: a duration that depends on her text."""
    logits = model(())
    return not torch.equal(logits[1], logits[0])


@pytest.mark.parametrize("case", [*cases(), TIMED], ids=lambda c: c.name)
@pytest.mark.parametrize("arrival", [False, True], ids=["sequential", "arrival-order"])
def test_every_unit_stays_within_its_lifetime_budget_over_both_releases(case: Case, arrival: bool) -> None:
    busy = slow_if_alice_is_private if case is TIMED else always
    ratios = audit(case, Ledger(case.budget), arrival=arrival, busy=busy)
    assert max(ratios.values()) <= 1.0, (case.name, ratios)


@pytest.mark.parametrize("case", [cases()[1], TIMED], ids=lambda c: c.name)
def test_a_second_request_arriving_while_the_first_runs_has_the_sequential_law(case: Case) -> None:
    """Under the ordering the second release waits for the first's commit, whenever it arrives
    and however long the first runs: its law is the sequential one."""
    ledger = Ledger(case.budget)
    sequential = two_releases(case, ledger, case.model_first, case.model_second)
    for busy in (always, slow_if_alice_is_private):
        assert two_releases(case, ledger, case.model_first, case.model_second, arrival=True, busy=busy) == sequential


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
    r = ledger.reserve(ledger.ticket(case.second), case.release)
    assert r[0] == 0.0 and r[1] > 0
    second = fixed(SECOND_PEAKED)
    mine = {s: p for s, p, _ in release(second, r, case.pace, case.alpha)}
    blanked = blank(case.second, unit_key(SECOND.id, "PERSON", ALICE))
    theirs = {s: p for s, p, _ in release(lambda p: blanked(second(p)), r, case.pace, case.alpha)}
    assert mine == theirs and sum(mine.values()) == 1


# name -> (ledger variant, the schedule it is audited under, the cases)
MUTATIONS = {
    "a ledger that resets per release": (dict(reset=True), dict(), cases()[:2]),
    "a unit per document instead of the subject": (dict(keys=lambda doc, label, subject: unit_key(doc, label, None)),
                                                   dict(), cases()[:2]),
    "overlapping reservations that do not count each other": (dict(ordered=False, count_outstanding=False),
                                                              dict(arrival=True), cases()[:2]),
    "overlapping reservations without the ordering, timed by the text": (
        dict(ordered=False), dict(arrival=True, busy=slow_if_alice_is_private), [TIMED]),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_the_audit_catches_each_unsound_variant(name: str) -> None:
    variant, schedule, audited = MUTATIONS[name]
    worst = 0.0
    for case in audited:
        ratios = audit(case, Ledger(case.budget, **variant), **schedule)
        worst = max(worst, ratios[unit_key(case.first.id, "PERSON", ALICE)])
    assert worst > 1.0, f"the audit did not catch '{name}' (worst {worst:.3f} of B)"
