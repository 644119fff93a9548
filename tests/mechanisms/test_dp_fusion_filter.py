"""DP-Fusion with a per-group Rényi filter: the step and its ledgers (docs/privacy.md, "DP-Fusion
with a per-group Rényi filter") on random and adversarial distributions (tests/distributions.py:
tiny and zero public probabilities, identical, peaked and flat rows; V = 2 to 50,000), on the
CPU's path and the accelerator's. The exact sequence-level audit is tests/mechanisms/test_filter_audit.py."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import pytest
import torch
from distributions import logits_batch, renyi_exact

from tokendp.errors import BudgetExceededError, InvalidInputError, InvalidParameterError
from tokendp.mechanisms import DPFusionFilter, RenyiFilter
from tokendp.mechanisms.dp_fusion_filter import cap_proposal, charge_upper
from tokendp.mechanisms.mixture import release_allowance

pytestmark = pytest.mark.usefixtures("step_path")  # the CPU's path and the accelerator's (tests/host_reads.py)


def _budgets(n: int, m: int, gen: torch.Generator) -> torch.Tensor:
    """Remaining budgets # (n, m) float64 from 0 and 1e-12 (spent) to 2 (ample)."""
    r = torch.exp(torch.empty(n, m, dtype=torch.float64).uniform_(math.log(1e-6), math.log(2.0), generator=gen))
    r[::7] = 0.0
    r[3::11] = 1e-12
    return r


@pytest.mark.parametrize(("m", "vocab", "n"), [(1, 2, 48), (2, 5, 48), (3, 64, 32), (2, 50_000, 2)])
@pytest.mark.parametrize("alpha", [2.0, 3.5])
def test_neighbours_differ_by_at_most_the_charge_and_charges_fit(m, vocab, n, alpha) -> None:
    """Both directions of D_alpha between the released distributions of a document and its
    neighbour (group i's row := the public row), with exact sums, are at most charge_i; every
    charge fits what remained; group i's charge is 0 exactly when its lam is 0."""
    gen = torch.Generator().manual_seed(vocab + m)
    logits = logits_batch(n, 1 + m, vocab, gen)
    remaining = _budgets(n, m, gen)
    pace = torch.full((n, m), 0.3, dtype=torch.float64)
    mech = DPFusionFilter(alpha=alpha)
    out = mech.step(logits, remaining=remaining, pace=pace)
    assert out.logprobs.dtype == torch.float64 and out.charges.dtype == torch.float64
    assert bool((out.charges <= remaining).all()) and bool((out.charges >= 0).all())
    assert torch.equal(out.charges > 0, out.diagnostics["lam"] > 0)
    for i in range(m):
        neighbour = logits.clone()
        neighbour[:, 1 + i] = logits[:, 0]
        other = mech.step(neighbour, remaining=remaining, pace=pace)
        charge, free = out.charges[:, i], out.charges[:, i] == 0
        assert torch.equal(out.logprobs[free], other.logprobs[free])  # charge 0: the very same release
        for d in (renyi_exact(out.logprobs, other.logprobs, alpha), renyi_exact(other.logprobs, out.logprobs, alpha)):
            assert bool((d[~free] <= charge[~free]).all()), (d - charge).max()
        assert float(other.charges[:, i].abs().max()) == 0.0  # the neighbour's group never spends


def test_a_spent_budget_releases_exactly_what_the_blanked_document_releases() -> None:
    """Remaining 0 (or below the allowance): lam = 0, charge 0, and the release is bit for bit
    the one of the document whose groups are all blanked (their rows equal to the public row),
    which is p_pub."""
    gen = torch.Generator().manual_seed(5)
    for m, vocab in ((1, 2), (3, 40), (2, 1000)):
        logits = logits_batch(16, 1 + m, vocab, gen)
        blank = logits[:, :1].expand(-1, 1 + m, -1).clone()
        pace = torch.full((16, m), 0.5, dtype=torch.float64)
        allowance = release_allowance(2.0, groups=m, vocab=vocab)
        for spent in (0.0, allowance):
            out = DPFusionFilter().step(logits, remaining=torch.full((16, m), spent, dtype=torch.float64), pace=pace)
            ref = DPFusionFilter().step(blank, remaining=torch.ones(16, m, dtype=torch.float64), pace=pace)
            assert torch.equal(out.logprobs, ref.logprobs)
            assert float(out.charges.abs().max()) == 0.0 and float(ref.charges.abs().max()) == 0.0
            public = torch.log_softmax(logits[:, 0].double(), -1)
            assert torch.allclose(out.logprobs, public, rtol=1e-6, atol=1e-6)  # the float32 log_softmax of the rows


def test_a_spent_group_is_searched_as_if_it_were_live(monkeypatch) -> None:
    """Issue 46: the step's work must not tell whether a group's budget is spent (a reader times
    releases). A spent group is searched at its public pace, exactly as a group with ample
    budget, then given lam = 0: the search sees the same caps whether the budget is spent or
    not, and the release is still the blanked document's."""
    import tokendp.mechanisms.dp_fusion_filter as module

    seen = []
    real = module.search_rows

    def spy(*args, **kwargs):
        seen.append(kwargs["caps"].clone())
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "search_rows", spy)
    gen = torch.Generator().manual_seed(11)
    logits = logits_batch(8, 3, 300, gen)
    pace = torch.full((8, 2), 0.25, dtype=torch.float64)
    ample = DPFusionFilter().step(logits, remaining=torch.full((8, 2), 50.0, dtype=torch.float64), pace=pace)
    spent = DPFusionFilter().step(logits, remaining=torch.zeros(8, 2, dtype=torch.float64), pace=pace)
    assert torch.equal(seen[0], seen[1]) and torch.equal(seen[1], pace)
    assert float(spent.charges.abs().max()) == 0.0 and float(ample.charges.max()) > 0
    blank = DPFusionFilter().step(logits[:, :1].expand(-1, 3, -1).clone(), remaining=torch.ones(8, 2, dtype=torch.float64),
                                  pace=pace)
    assert torch.equal(spent.logprobs, blank.logprobs)


@pytest.mark.parametrize("alpha", [2.0, 3.5])
def test_each_group_depends_on_its_own_row_and_ledger_only(alpha) -> None:
    """Group j's lam, divergence and charge are bit for bit the same whatever group i's row and
    remaining budget hold (blanked, spent, ample), in a batch of documents whose other rows move
    too: the separability the proof rests on (a float32 search decided by a ledger's cap would
    break it)."""
    gen = torch.Generator().manual_seed(11)
    n, m, vocab = 24, 3, 300
    adversarial = logits_batch(n, 1 + m, vocab, gen)  # zero public probabilities: a float64 search
    moderate = (torch.randn(n, 1 + m, vocab, generator=gen) * 2.0).float()  # where the CPU searches in float32
    for logits in (adversarial, moderate):
        _check_separable(DPFusionFilter(alpha=alpha), logits, _budgets(n, m, gen) + 0.5, m)


def _check_separable(mech: DPFusionFilter, logits: torch.Tensor, remaining: torch.Tensor, m: int) -> None:
    pace = torch.full(remaining.shape, 0.2, dtype=torch.float64)
    base = mech.step(logits, remaining=remaining, pace=pace)
    for i in range(m):
        for change in ("blank", "spent", "ample", "tiny"):
            other_logits, other_remaining = logits.clone(), remaining.clone()
            if change == "blank":
                other_logits[:, 1 + i] = logits[:, 0]
            else:
                other_remaining[:, i] = {"spent": 0.0, "ample": 5.0, "tiny": 1e-9}[change]
            moved = mech.step(other_logits, remaining=other_remaining, pace=pace)
            keep = [j for j in range(m) if j != i]
            for key in ("lam", "divergence"):
                assert torch.equal(moved.diagnostics[key][:, keep], base.diagnostics[key][:, keep]), (i, change, key)
            assert torch.equal(moved.charges[:, keep], base.charges[:, keep]), (i, change)


def test_padding_groups_charge_nothing_and_change_nothing() -> None:
    """A document with 2 groups padded to 3 rows releases what it does alone; the padding row
    charges nothing."""
    gen = torch.Generator().manual_seed(3)
    logits = logits_batch(8, 3, 50, gen)
    remaining = _budgets(8, 2, gen)
    pace = torch.full((8, 2), 0.2, dtype=torch.float64)
    alone = DPFusionFilter().step(logits, remaining=remaining, pace=pace)
    padded_logits = torch.cat((logits, logits[:, :1]), 1)
    pad = lambda x, v: torch.cat((x, torch.full((8, 1), v, dtype=x.dtype)), 1)  # noqa: E731
    mask = pad(torch.ones(8, 2, dtype=torch.bool), False)
    padded = DPFusionFilter().step(padded_logits, remaining=pad(remaining, 0.0), pace=pad(pace, 0.0), group_mask=mask)
    assert torch.equal(padded.logprobs, alone.logprobs)
    assert float(padded.charges[:, 2].abs().max()) == 0.0
    # the release allowance counts the rows (3, not 2): charges a hair higher, zero where they were
    assert torch.equal(padded.charges[:, :2] == 0, alone.charges == 0)
    assert bool((padded.charges[:, :2] >= alone.charges).all())
    assert float((padded.charges[:, :2] - alone.charges).max()) < 1e-9


def test_the_pace_binds_before_the_budget() -> None:
    """With an ample budget each group's divergence bound stays within its pace, and a group
    whose private row equals the public distribution in law is charged about the allowance only."""
    gen = torch.Generator().manual_seed(8)
    logits = logits_batch(16, 3, 30, gen)
    pace = torch.tensor([0.01, 0.1], dtype=torch.float64).expand(16, 2)
    out = DPFusionFilter(alpha=3.5).step(logits, remaining=torch.full((16, 2), 100.0, dtype=torch.float64), pace=pace)
    assert bool((out.diagnostics["divergence"] <= pace).all())
    shifted = logits.clone()
    shifted[:, 1] = logits[:, 0] + 1.0  # the same distribution, other logits
    out = DPFusionFilter().step(shifted, remaining=torch.ones(16, 2, dtype=torch.float64), pace=pace)
    assert float(out.charges[:, 0].max()) < 1e-8


def test_step_validates_its_inputs() -> None:
    logits = torch.zeros(2, 3, 5)
    ok = torch.ones(2, 2, dtype=torch.float64)
    with pytest.raises(InvalidInputError, match="remaining"):
        DPFusionFilter().step(logits, remaining=torch.ones(2, 3, dtype=torch.float64), pace=ok)
    with pytest.raises(InvalidInputError, match="pace"):
        DPFusionFilter().step(logits, remaining=ok, pace=torch.ones(2, 3))
    with pytest.raises(InvalidParameterError, match="alpha"):
        DPFusionFilter(alpha=1.0)


def test_bad_budgets_are_refused_on_the_cpu() -> None:
    """On the CPU's path a negative or NaN remaining budget or pace raises; on the accelerator's
    (no host read) its group gets lam = 0 and no charge."""
    import tokendp._device as device

    logits = logits_batch(2, 3, 5, torch.Generator().manual_seed(0))
    ok = torch.ones(2, 2, dtype=torch.float64)
    bad = ok.clone()
    bad[0, 1] = -1.0
    if device.reads_are_free(ok):
        with pytest.raises(InvalidParameterError, match="finite and >= 0"):
            DPFusionFilter().step(logits, remaining=bad, pace=ok)
        with pytest.raises(InvalidParameterError, match="finite and >= 0"):
            DPFusionFilter().step(logits, remaining=ok, pace=bad * math.nan)
    else:
        out = DPFusionFilter().step(logits, remaining=bad, pace=ok)
        assert float(out.charges[0, 1]) == 0.0 and float(out.diagnostics["lam"][0, 1]) == 0.0


# ---------------------------------------------------------------------------- the device twins of the accounting
def test_charge_upper_is_never_below_the_exact_rho() -> None:
    gen = torch.Generator().manual_seed(2)
    d = torch.exp(torch.empty(4000, dtype=torch.float64).uniform_(math.log(1e-310), math.log(800.0), generator=gen))
    d[:5] = torch.tensor([0.0, 5e-324, 1e-300, 709.0, math.inf], dtype=torch.float64)
    for alpha in (1.0001, 2.0, 3.5, 64.0):
        for m in (1, 3, 1000):
            got = charge_upper(d, torch.tensor([m]), alpha)
            with mpmath.workdps(60):
                a = mpmath.mpf(alpha)
                for x, g in zip(d.tolist(), got.tolist()):
                    exact = (mpmath.log1p(mpmath.expm1((a - 1) * mpmath.mpf(x)) / m) / (a - 1) if math.isfinite(x)
                             else mpmath.inf)
                    assert g >= exact * (1 - mpmath.mpf(10) ** -50), (alpha, m, x, g)  # m = 1: rho(d) = d
                    assert g <= x


def test_cap_proposal_leaves_room_for_the_charge() -> None:
    """charge_upper(cap_proposal(r)) <= r, and it uses almost all of r."""
    gen = torch.Generator().manual_seed(4)
    r = torch.exp(torch.empty(2000, dtype=torch.float64).uniform_(math.log(1e-15), math.log(50.0), generator=gen))
    for alpha in (1.5, 2.0, 8.0):
        for m in (1, 2, 6):
            groups = torch.tensor([m])
            cap = cap_proposal(r, groups, alpha)
            used = charge_upper(cap, groups, alpha)
            assert bool((used <= r).all())
            assert bool((used >= r * (1 - 1e-9)).all())
    none = cap_proposal(torch.tensor([0.0, -1.0], dtype=torch.float64), torch.tensor([2]), 2.0)
    assert float(none.abs().max()) == 0.0


# ---------------------------------------------------------------------------- the ledgers
def test_spend_rounds_down_exactly() -> None:
    """remaining - charge rounded to the float just below the exact difference when it does not fit."""
    gen = torch.Generator().manual_seed(6)
    budgets = torch.exp(torch.empty(500, 2, dtype=torch.float64).uniform_(-20, 3, generator=gen))
    charges = budgets * torch.rand(500, 2, dtype=torch.float64, generator=gen)
    state = RenyiFilter(budgets)
    state.spend(torch.arange(500), charges)
    for b, c, r in zip(budgets.flatten().tolist(), charges.flatten().tolist(), state.remaining.flatten().tolist()):
        exact = Fraction(b) - Fraction(c)
        assert Fraction(r) <= exact < Fraction(math.nextafter(r, math.inf))


def test_spend_refuses_an_overdraft() -> None:
    import tokendp._device as device

    state = RenyiFilter(torch.tensor([[0.5, 0.1]], dtype=torch.float64))
    over = torch.tensor([[0.2, 0.2]], dtype=torch.float64)
    if device.reads_are_free(over):
        with pytest.raises(BudgetExceededError, match="remaining budget"):
            state.spend(torch.tensor([0]), over)
    else:
        state.spend(torch.tensor([0]), over)
        with pytest.raises(BudgetExceededError):
            state.check()


def test_rollback_keeps_the_released_positions_exactly() -> None:
    """A round of 4 speculative positions for 5 documents, each releasing 0..4 of them: the
    ledger ends exactly where spending only the released positions ends."""
    gen = torch.Generator().manual_seed(9)
    budgets = torch.rand(5, 3, dtype=torch.float64, generator=gen) + 1.0
    charges = [torch.rand(5, 3, dtype=torch.float64, generator=gen) * 0.1 for _ in range(4)]
    released = torch.tensor([0, 1, 2, 3, 4])
    state = RenyiFilter(budgets)
    state.spend(torch.arange(5), charges[0] * 0.5)  # before the round: kept
    state.begin_round()
    for c in charges:
        state.spend(torch.arange(5), c)
    state.rollback(released)
    want = RenyiFilter(budgets)
    want.spend(torch.arange(5), charges[0] * 0.5)
    for j, c in enumerate(charges):
        docs = (released > j).nonzero().flatten()
        want.spend(docs, c[docs])
    assert torch.equal(state.remaining, want.remaining)
    with pytest.raises(InvalidInputError, match="begin_round"):
        state.rollback(released)


def test_admit_seats_a_fresh_ledger_and_widens() -> None:
    state = RenyiFilter(torch.ones(2, 2, dtype=torch.float64))
    state.spend(torch.tensor([1]), torch.tensor([[0.5, 0.25]], dtype=torch.float64))
    state.admit(1, [2.0, 3.0, 4.0])
    assert state.remaining.tolist() == [[1.0, 1.0, 0.0], [2.0, 3.0, 4.0]]
    state.admit(0, [0.5])
    assert state.remaining[0].tolist() == [0.5, 0.0, 0.0]
    with pytest.raises(InvalidParameterError, match="dp_fusion_filter_budget"):
        state.admit(0, [-1.0])
    with pytest.raises(InvalidInputError, match="budgets"):
        RenyiFilter(torch.ones(3))


@pytest.mark.parametrize("alpha", [2.0, 3.5])
def test_the_step_and_the_ledger_read_nothing_back_on_accelerators(alpha, monkeypatch) -> None:
    """On the accelerator's path, step + spend + rollback make no host read (no synchronisation):
    the filter adds nothing to the sampler's one read per step (tests/host_reads.py)."""
    from host_reads import HostReads, force_accelerator_path

    gen = torch.Generator().manual_seed(12)
    logits = logits_batch(6, 4, 200, gen)
    remaining = _budgets(6, 3, gen)
    mask = torch.ones(6, 3, dtype=torch.bool)
    mask[0, 2] = False
    pace = torch.full((6, 3), 0.1, dtype=torch.float64)
    state = RenyiFilter(remaining)
    docs = torch.arange(6)
    force_accelerator_path(monkeypatch)
    reads = HostReads().install(monkeypatch)
    with reads:
        state.begin_round()
        out = DPFusionFilter(alpha=alpha).step(logits, remaining=state.remaining[docs], pace=pace, group_mask=mask)
        state.spend(docs, out.charges)
        state.rollback(torch.ones(6, dtype=torch.int64))
    assert reads.count == 0, dict(reads.sites)


def test_a_weight_ceiling_bounds_every_weight_and_keeps_the_blanked_row_public() -> None:
    """max_lam L_i: each group's weight on its own row is at most L_i (the search runs on
    L_i p_i + (1 - L_i) p_pub); a row equal to the public row still gets lam = 0 and charge 0;
    L = 1 everywhere is the step without a ceiling, bit for bit; a ceiling outside (0, 1] is
    refused where reads are free."""
    gen = torch.Generator().manual_seed(7)
    n, m, vocab = 32, 3, 64
    logits = logits_batch(n, 1 + m, vocab, gen)
    logits[:, 2] = logits[:, 0]  # group 2 blanked: its row is the public row
    remaining = torch.full((n, m), 50.0, dtype=torch.float64)
    pace = torch.full((n, m), 30.0, dtype=torch.float64)  # ample: most groups reach lam = 1 alone
    ceiling = torch.tensor([0.5, 0.2, 0.9], dtype=torch.float64).expand(n, m)
    free = DPFusionFilter(alpha=3.0).step(logits, remaining=remaining, pace=pace)
    capped = DPFusionFilter(alpha=3.0).step(logits, remaining=remaining, pace=pace, max_lam=ceiling)
    lam = capped.diagnostics["lam"].double()
    assert bool((lam <= ceiling.float().double() * (1 + 1e-6)).all())
    assert float(lam[:, 0].max()) > 0.45  # the ceiling binds, not the pace
    assert bool((capped.charges[:, 1] == 0).all()) and bool((lam[:, 1] == 0).all())
    assert float(capped.charges[:, 0].sum()) < float(free.charges[:, 0].sum())  # smaller weights cost less
    same = DPFusionFilter(alpha=3.0).step(logits, remaining=remaining, pace=pace, max_lam=torch.ones(n, m,
                                                                                                     dtype=torch.float64))
    assert torch.equal(same.logprobs, free.logprobs) and torch.equal(same.charges, free.charges)
    import tokendp._device as device

    for bad in (0.0, 1.5, math.nan):
        ceilings = torch.full((n, m), bad, dtype=torch.float64)
        if device.reads_are_free(ceilings):
            with pytest.raises(InvalidParameterError, match="ceilings"):
                DPFusionFilter(alpha=3.0).step(logits, remaining=remaining, pace=pace, max_lam=ceilings)
        else:  # no host read: the groups get lam = 0 and no charge
            out = DPFusionFilter(alpha=3.0).step(logits, remaining=remaining, pace=pace, max_lam=ceilings)
            assert not bool(out.charges.any()) and not bool(out.diagnostics["lam"].any())
