"""The exact audit of DP-Fusion with a per-group Rényi filter (docs/privacy.md, "DP-Fusion with
a per-group Rényi filter"): on tiny table models, every output sequence is enumerated and both
directions of the sequence-level D_alpha between a document and each of its neighbours are
computed exactly; they must stay within B_i. Then each unsound variant the proof rules out is
run through the same audit, which must catch it.

The models: V = 4 tokens, token 0 is EOS, T = 4; next-token logits ``# (1+m, V)`` float32 per
prefix (row 0 public, row i group i), random or adversarial (public probabilities near 0,
prefix-independent tables where the sequence-level divergence is the sum of the steps'). The
document runs the PRODUCTION step (DPFusionFilter), ledgers (RenyiFilter.spend) and the
sampler's exact law (its dyadic weights, tokendp.sampling.dyadic_weights, normalised in
rational arithmetic); the neighbour for group i really blanks the group (row i := row 0 at
every prefix) and reruns everything. All prefixes of one depth run as one batch, one ledger
row each, as documents of a continuous batch do. Divergences are computed in mpmath at 256 bits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import mpmath
import pytest
import torch

from tokendp.divergence import renyi_divergence, symmetric_renyi_divergence
from tokendp.mechanisms import DPFusionFilter, RenyiFilter
from tokendp.mechanisms.dp_fusion_filter import cap_proposal, charge_upper
from tokendp.mechanisms.mixture import average_rows, release_allowance, search_rows
from tokendp.sampling import dyadic_weights

EOS, VOCAB, T = 0, 4, 4
Model = Callable[[tuple[int, ...]], torch.Tensor]  # prefix -> logits (1+m, V) float32


@dataclass(frozen=True)
class Case:
    name: str
    model: Model
    budgets: tuple[float, ...]  # B_i
    pace: tuple[float, ...]  # per-step divergence caps
    alpha: float

    @property
    def groups(self) -> int:
        return len(self.budgets)


# ---------------------------------------------------------------------------- policies
class Policy:
    """One filter step for a batch of prefixes: (logprobs (N, V) float64, charges (N, m) float64).
    ``stops`` and ``child`` are the hooks through which the unsound variants act."""

    def __init__(self, max_lam: float | None = None) -> None:
        self.max_lam = max_lam  # a weight ceiling for every group (None: no ceiling)

    def step(self, logits: torch.Tensor, remaining: torch.Tensor, pace: torch.Tensor, alpha: float):
        ceiling = None if self.max_lam is None else torch.full_like(pace, self.max_lam)
        out = DPFusionFilter(alpha).step(logits, remaining=remaining, pace=pace, max_lam=ceiling)
        return out.logprobs, out.charges

    def stops(self, after: torch.Tensor, allowance: float) -> torch.Tensor:  # (N,) bool
        return torch.zeros(after.shape[0], dtype=torch.bool)

    def child(self, prefix: tuple[int, ...], token: int, before: torch.Tensor, after: torch.Tensor,
              public: torch.Tensor) -> torch.Tensor:
        return after


class Reference(Policy):
    """The production step re-implemented from its parts, with switches for the variants; with
    the defaults it releases and charges exactly what DPFusionFilter does (checked below)."""

    def __init__(self, *, direction: str = "both", charge_groups: int = 0, budget_caps: bool = True,
                 charge_at_cap: bool = False) -> None:
        self.direction, self.charge_groups, self.budget_caps = direction, charge_groups, budget_caps
        self.charge_at_cap = charge_at_cap

    def step(self, logits, remaining, pace, alpha):
        n, rows, vocab = logits.shape
        m = rows - 1
        allowance = release_allowance(alpha, groups=m, vocab=vocab)
        groups = torch.full((n, 1), m + self.charge_groups)
        same = (logits[:, 1:] == logits[:, :1]).all(-1)
        cap = torch.minimum(pace, cap_proposal(remaining - allowance, groups, alpha)) if self.budget_caps else pace
        cap = torch.where(same, 0.0, cap)
        mask = torch.ones((n, m), dtype=torch.bool)
        if self.direction == "both":
            search = search_rows(logits, alpha=alpha, caps=cap, mask=mask, temperature=1.0, public_caps=pace)
            lam, div = search.found.lam.to(torch.float64), search.found.divergence
        else:  # ratios from a search with positive caps; lam by bisection on one direction only
            search = search_rows(logits, alpha=alpha, caps=torch.where(cap > 0, 1.0, 0.0), mask=mask, temperature=1.0)
            lam, div = _one_direction(logits, cap, alpha, forward=self.direction == "forward")
        charge = charge_upper(cap if self.charge_at_cap else div, groups, alpha) + allowance
        charge = torch.nextafter(charge, torch.full_like(charge, math.inf))
        if not self.budget_caps:
            charge = torch.minimum(charge, remaining)  # the ledger is kept "in budget"
        lam = torch.where(charge <= remaining, lam, 0.0)
        charge = torch.where(lam > 0, charge, 0.0)
        return average_rows(search, lam), charge


def _one_direction(logits, cap, alpha, *, forward):
    """lam (N, m): the largest weight whose ONE direction of D_alpha meets the cap (bisection,
    float64), and that direction's divergence."""
    logp = torch.log_softmax(logits.float(), -1).to(torch.float64)
    pub, priv = logp[:, :1], logp[:, 1:]  # (N, 1, V), (N, m, V)

    def div(lam):
        mixed = torch.logaddexp(torch.log(lam).unsqueeze(-1) + priv, torch.log1p(-lam).unsqueeze(-1) + pub)
        return renyi_divergence(mixed, pub, alpha) if forward else renyi_divergence(pub, mixed, alpha)

    lo, hi = torch.zeros_like(cap), torch.ones_like(cap)
    ok_one = div(hi) <= cap
    for _ in range(80):
        mid = (lo + hi) / 2
        ok = div(mid) <= cap
        lo, hi = torch.where(ok, mid, lo), torch.where(ok, hi, mid)
    lam = torch.where(ok_one, 1.0, lo)
    lam = torch.where(cap > 0, lam, 0.0)
    return lam, torch.where(lam > 0, div(lam.clamp_min(1e-300)), 0.0)


class MixtureCharge(Policy):
    """Each group charged the exact divergence between the whole mixture and the mixture without
    it (tighter per step than rho(d)), its lam the largest whose charge fits min(pace, R): a
    group's charge then depends on the other groups' rows."""

    def step(self, logits, remaining, pace, alpha):
        m = logits.shape[1] - 1
        probs = torch.softmax(logits.to(torch.float64), -1)  # (N, 1+m, V)
        pub, priv = probs[:, :1], probs[:, 1:]
        base = DPFusionFilter(alpha).step(logits, remaining=remaining, pace=pace)
        base_lam = base.diagnostics["lam"].to(torch.float64)
        limit = torch.minimum(pace, remaining)  # (N, m)

        def charge(lam_i, lams, i):  # the mixture's divergence from the mixture without group i
            lams = lams.clone()
            lams[:, i] = 0.0
            without = pub[:, 0] + (lams.unsqueeze(-1) * (priv - pub)).sum(1) / m  # (N, V)
            full = without + lam_i.unsqueeze(-1) * (priv[:, i] - pub[:, 0]) / m
            return symmetric_renyi_divergence(full.log(), without.log(), alpha)

        lam = torch.zeros_like(base_lam)
        for i in range(m):  # bisection, the others at the production weights
            lo, hi = torch.zeros(len(logits), dtype=torch.float64), torch.ones(len(logits), dtype=torch.float64)
            whole = charge(hi, base_lam, i) <= limit[:, i]
            for _ in range(60):
                mid = (lo + hi) / 2
                ok = charge(mid, base_lam, i) <= limit[:, i]
                lo, hi = torch.where(ok, mid, lo), torch.where(ok, hi, mid)
            lam[:, i] = torch.where(whole, 1.0, lo)
        charges = torch.stack([charge(lam[:, i], lam, i) for i in range(m)], -1)
        out = pub[:, 0] + (lam.unsqueeze(-1) * (priv - pub)).sum(1) / m
        return out.log(), torch.minimum(charges, remaining)


class ActiveOnly(Policy):
    """Exhausted groups leave the average (and m counts the active ones)."""

    def step(self, logits, remaining, pace, alpha):
        active = remaining > release_allowance(alpha, groups=logits.shape[1] - 1, vocab=logits.shape[2])
        out = DPFusionFilter(alpha).step(logits, remaining=remaining, pace=pace, group_mask=active)
        return out.logprobs, out.charges


class StopWhenSpent(Policy):
    """Generation ends once a group's budget is spent."""

    def stops(self, after, allowance):
        return (after <= allowance).any(-1)


class RollbackTooFar(Policy):
    """Speculative rounds (drafts: the public argmax) whose rollback also undoes the charge of the
    released token that ended the round."""

    def child(self, prefix, token, before, after, public):
        return before if token != int(public[1:].argmax()) + 1 else after


MUTATIONS = {
    "mixture charge (groups coupled)": MixtureCharge(),
    "average over active groups only": ActiveOnly(),
    "forward direction only": Reference(direction="forward"),
    "reverse direction only": Reference(direction="reverse"),
    "stop when a budget is spent": StopWhenSpent(),
    "spent group keeps mixing at the pace": Reference(budget_caps=False),
    "charge for m + 1 components": Reference(charge_groups=1),
    "rollback undoes a released token's charge": RollbackTooFar(),
}


# ---------------------------------------------------------------------------- enumeration
def _law(logprobs: torch.Tensor) -> list[Fraction]:
    """The sampler's exact law for one row ``# (V,)`` float64."""
    weights = [Fraction(m) * Fraction(2) ** e for m, e in dyadic_weights(logprobs)]
    total = sum(weights)
    return [w / total for w in weights]


def enumerate_outputs(case: Case, policy: Policy, model: Model) -> dict[tuple[int, ...], Fraction]:
    """Every finished output of ``model`` under ``policy`` with its exact probability."""
    m, alpha = case.groups, case.alpha
    frontier = [((), Fraction(1), torch.tensor(case.budgets, dtype=torch.float64))]
    outputs: dict[tuple[int, ...], Fraction] = {}
    allowance = release_allowance(alpha, groups=m, vocab=VOCAB)
    while frontier:
        logits = torch.stack([model(prefix) for prefix, _, _ in frontier])  # (N, 1+m, V)
        before = torch.stack([r for _, _, r in frontier])  # (N, m)
        pace = torch.tensor(case.pace, dtype=torch.float64).expand(len(frontier), m)
        logprobs, charges = policy.step(logits, before, pace, alpha)
        ledgers = RenyiFilter(before)
        ledgers.spend(torch.arange(len(frontier)), charges)  # the production ledger: checks, rounds down
        after, stop = ledgers.remaining, policy.stops(ledgers.remaining, allowance)
        nxt = []
        for n, (prefix, prob, _) in enumerate(frontier):
            for token, p in enumerate(_law(logprobs[n])):
                if p == 0:
                    continue
                seq = (*prefix, token)
                if token == EOS or len(seq) == T or bool(stop[n]):
                    outputs[seq] = outputs.get(seq, Fraction(0)) + prob * p
                else:
                    nxt.append((seq, prob * p, policy.child(prefix, token, before[n], after[n], logits[n, 0])))
        frontier = nxt
    return outputs


def blanked(model: Model, group: int) -> Model:
    """The neighbour for ``group``: its row is the public row, at every prefix."""

    def neighbour(prefix):
        logits = model(prefix).clone()
        logits[1 + group] = logits[0]
        return logits

    return neighbour


def _divergence(p: dict, q: dict, alpha: float) -> mpmath.mpf:
    """D_alpha(P || Q) of two laws over sequences, exactly (256 bits); +inf if P is not within Q's support."""
    with mpmath.workprec(256):
        a, total = mpmath.mpf(alpha), mpmath.mpf(0)
        for seq, ps in p.items():
            if ps == 0:
                continue
            qs = q.get(seq, Fraction(0))
            if qs == 0:
                return mpmath.inf
            x = mpmath.mpf(ps.numerator) / ps.denominator
            y = mpmath.mpf(qs.numerator) / qs.denominator
            total += x**a * y ** (1 - a)
        return mpmath.log(total) / (a - 1)


def audit(case: Case, policy: Policy) -> list[float]:
    """max(D_alpha(P||P_i), D_alpha(P_i||P)) / B_i for each group i (P_i: group i blanked)."""
    document = enumerate_outputs(case, policy, case.model)
    ratios = []
    for i, budget in enumerate(case.budgets):
        neighbour = enumerate_outputs(case, policy, blanked(case.model, i))
        worst = max(_divergence(document, neighbour, case.alpha), _divergence(neighbour, document, case.alpha))
        ratios.append(float(worst / mpmath.mpf(budget)))
    return ratios


# ---------------------------------------------------------------------------- models and cases
def random_model(seed: int, m: int, *, scale: float = 3.0, tiny_public: bool = False, eos: float = -1.0) -> Model:
    """Logits drawn per prefix from a seeded generator; ``tiny_public``: the public row puts
    about e^-25 on a token some private row favours."""
    cache: dict[tuple[int, ...], torch.Tensor] = {}

    def model(prefix):
        if prefix not in cache:
            gen = torch.Generator().manual_seed(seed * 7919 + sum(t * 5**k for k, t in enumerate((*prefix, 1))))
            logits = torch.randn((1 + m, VOCAB), generator=gen) * scale
            logits[:, EOS] += eos
            if tiny_public:
                token = 1 + int(torch.randint(0, VOCAB - 1, (), generator=gen))
                logits[0, token] = -25.0
                logits[1 + int(torch.randint(0, m, (), generator=gen)), token] = 4.0
            cache[prefix] = logits.float()
        return cache[prefix]

    return model


def fixed_model(logits: list[list[float]]) -> Model:
    """The same next-token logits at every prefix: the steps' laws do not depend on the tokens, so
    the sequence-level divergence is the sum of the steps' (tight cases)."""
    table = torch.tensor(logits, dtype=torch.float32)
    return lambda prefix: table


PEAKED = [0.0, 3.0, 0.0, 0.0]  # token 1 likely
TINY_ONE = [0.0, -20.0, 0.0, 0.0]  # token 1 nearly impossible
UNIFORM = [0.0, 0.0, 0.0, 0.0]


def audit_cases() -> list[Case]:
    cases = []
    for seed in range(8):  # random tables, m = 1..3, budgets binding at different steps
        m = 1 + seed % 3
        cases.append(Case(f"random {seed}", random_model(seed, m, tiny_public=seed % 2 == 1),
                          tuple(0.05 * (1 + seed % 4) * (1 + i) for i in range(m)),
                          tuple([0.04 + 0.02 * (seed % 3)] * m),
                          (2.0, 3.5, 8.0)[seed % 3]))
    cases += [
        Case("one group, budget spent at step 1", fixed_model([UNIFORM, PEAKED]), (0.3,), (10.0,), 2.0),
        Case("one group, budget binding at step 3", fixed_model([UNIFORM, PEAKED]), (0.25,), (0.1,), 3.5),
        Case("tiny public probability", fixed_model([TINY_ONE, UNIFORM]), (0.2,), (0.08,), 2.0),
        Case("three groups, budgets binding at steps 1, 2, 4",
             fixed_model([UNIFORM, PEAKED, TINY_ONE, [2.0, 0.0, 0.0, 0.0]]),
             (0.05, 0.12, 0.5), (0.1, 0.1, 0.1), 2.0),
        Case("identical private and public rows", fixed_model([PEAKED, PEAKED, UNIFORM]), (0.1, 0.1), (0.2, 0.2), 2.0),
    ]
    return cases


def mutation_cases() -> list[Case]:
    """Cases each built to expose one variant (first), then random tables."""
    one = fixed_model([UNIFORM, [-20.0, 6.0, -20.0, -20.0]])  # private nearly one-hot where public is flat
    cases = [
        # Group 1 puts mass on a token the public row nearly excludes, where group 2 does too: in
        # the mixture it hides group 2's move, so group 2's mixture charge is small on the
        # document and its whole budget on the neighbour (found by a grid over budgets).
        Case("one group's mass hides another's", fixed_model([TINY_ONE, [0.0, 4.0, 0.0, 0.0], [0.0, 2.0, -2.0, 0.0]]),
             (0.003, 0.186), (1.0, 0.3), 2.0),
        Case("one-hot private, large pace", one, (2.0,), (3.0,), 2.0),
        Case("tiny public probability, large pace", fixed_model([TINY_ONE, [0.0, 8.0, 0.0, 0.0]]), (1.0,), (2.0,), 2.0),
        Case("small budget, large pace", fixed_model([UNIFORM, PEAKED]), (0.05,), (1.0,), 2.0),
        Case("budget binding at step 2", fixed_model([UNIFORM, PEAKED]), (0.2,), (0.1,), 2.0),
        Case("a spendthrift group beside a small budget", fixed_model([UNIFORM, PEAKED, [-4.0, -4.0, 4.0, -4.0]]),
             (0.01, 0.6), (1.0, 0.4), 2.0),
        Case("two groups, budget binding at step 2",
             fixed_model([UNIFORM, [0.0, 2.0, 2.0, 0.0], [0.0, 3.0, -3.0, 0.0]]),
             (0.02, 0.3), (1.0, 0.2), 8.0),
    ]
    for seed in range(12):
        m = 1 + seed % 3
        budgets = tuple(0.02 * (1 + seed % 5) * (1 + 3 * i) for i in range(m))
        cases.append(Case(f"random {seed}", random_model(100 + seed, m, tiny_public=seed % 2 == 0),
                          budgets, tuple([budgets[-1] * (0.5 + seed % 3)] * m), (2.0, 8.0)[seed % 2]))
    return cases


@pytest.mark.parametrize("case", audit_cases() + mutation_cases()[:7], ids=lambda c: c.name)
def test_every_neighbour_stays_within_its_budget(case: Case) -> None:
    """Including the cases built to expose the unsound variants below."""
    ratios = audit(case, Policy())
    assert max(ratios) <= 1.0, (case.name, ratios)


@pytest.mark.parametrize("max_lam", [1.0, 0.5, 0.05])
def test_a_public_weight_ceiling_stays_within_the_budget(max_lam: float) -> None:
    """max_lam < 1 mixes each differing row toward the public one before the search (a function
    of the group's own row, the public row and a public number, so Lemma 1 holds as it is)."""
    for case in audit_cases() + mutation_cases()[:7]:
        assert max(audit(case, Policy(max_lam))) <= 1.0, case.name


def test_the_audit_is_tight_where_the_bound_is():
    """m = 1 with a table that does not depend on the prefix: the sequence-level divergence is
    the sum of the steps', each at its cap, so the budget is nearly all used."""
    case = next(c for c in audit_cases() if c.name == "one group, budget spent at step 1")
    assert 0.9 <= max(audit(case, Policy())) <= 1.0


def test_the_reference_is_the_production_step() -> None:
    """The variants below are switches on this re-implementation; with none set it releases and
    charges bit for bit what DPFusionFilter does."""
    for case in audit_cases()[:4] + audit_cases()[-3:]:
        logits = torch.stack([case.model(p) for p in [(), (1,), (2, 3), (3, 3, 1)]])
        share = torch.tensor([[1.0], [0.5], [0.01], [0.0]], dtype=torch.float64)  # ample to spent
        remaining = torch.tensor(case.budgets, dtype=torch.float64).expand(4, -1) * share
        pace = torch.tensor(case.pace, dtype=torch.float64).expand(4, -1)
        want = Policy().step(logits, remaining, pace, case.alpha)
        got = Reference().step(logits, remaining, pace, case.alpha)
        assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1]), case.name


def test_charging_at_the_cap_is_sound_only_wasteful() -> None:
    """Charging rho(cap) instead of rho(d) at the lam chosen over-charges (d <= cap): the audit
    passes, with budget left unused."""
    for case in audit_cases()[:3] + mutation_cases()[:4]:
        assert max(audit(case, Reference(charge_at_cap=True))) <= 1.0, case.name


# ---------------------------------------------------------------------------- the mutations
@pytest.mark.parametrize("name", list(MUTATIONS))
def test_the_audit_catches_each_unsound_variant(name: str) -> None:
    policy = MUTATIONS[name]
    pool = mutation_cases()
    worst = 0.0
    for case in pool:
        worst = max(worst, max(audit(case, policy)))
        if worst > 1.0:
            break
    assert worst > 1.0, f"the audit did not catch '{name}' (worst {worst:.3f} of B)"
