"""An answer about an exhausted subject equals in law the answer on the neighbouring vault, whose
spans of that subject hold other text (docs/privacy.md, "Asking the vault: retrieval from public
versions", Theorem A): on the tiny model, seed for seed, the same tokens and the same ledgers
for every other unit; with budget left, the subject's row is read and the two differ."""

from __future__ import annotations

import json

import pytest

from tests.service.conftest import LETTER
from tests.service.vault.helpers import SPANS, SUBJECT
from tokendp.service.keys import Caller, Tenant
from tokendp.service.vault.ask import AskParams, AskRequest, plan_ask
from tokendp.service.vault.store import Settings, StoredDocument

NEIGHBOUR = LETTER.replace("Tomas Lindqvist", "Jonas Bergqvist")  # the subject's spans: other text, same layout
SUBJECT_UNIT = json.dumps(["subject", SUBJECT])
SEEDS = range(6)
TEMPERATURE = 4.0  # the tiny model is sharp: at 0.7 it writes one token over and over


@pytest.fixture(scope="module")
def backend():
    from tokendp.backends import load_backend

    return load_backend("tiny")


def answers(backend, letter: str, subject_budget: float | None) -> list[tuple[list[int], dict, dict]]:
    """(tokens, what each unit's filter left, report) per seed, the subject's reservation set to
    ``subject_budget`` (None: B_rel, as every other unit's)."""
    from tokendp.accounting import lifetime_alpha, lifetime_budget
    from tokendp.fusion import run_fusion

    alpha = lifetime_alpha(epsilon=4.0, delta=1e-5)
    settings = Settings(alpha, lifetime_budget(epsilon=4.0, delta=1e-5, alpha=alpha))
    caller = Caller(Tenant("clinic", 4.0, 1e-5), "reader", "hash", "prefix")
    docs = tuple(StoredDocument(id, "1", "", letter, tuple(SPANS), None, "confirmed") for id in ("d1", "d2"))
    out = []
    for seed in SEEDS:
        plan = plan_ask(AskRequest(caller, "When was the patient admitted?", docs, AskParams(3.0, 8, temperature=TEMPERATURE)), backend,
                        settings, max_tokens=16)
        plan.use({u: plan.release_budget if u != SUBJECT_UNIT or subject_budget is None else subject_budget
                  for u in plan.units})
        job, (generated,) = run_fusion(plan.job, seed=[seed])
        left = dict(zip(plan.units, job.filter.remaining[0, :len(plan.units)].tolist()))
        out.append((list(generated.token_ids), left, [(g.label, g.n_tokens) for g in plan.job.documents[0].groups]))
    return out


def test_an_exhausted_subjects_answer_is_the_neighbours_seed_for_seed(backend):
    here, there = answers(backend, LETTER, 0.0), answers(backend, NEIGHBOUR, 0.0)
    assert [g for _, _, g in here] == [g for _, _, g in there]  # the same public layout: a true neighbour
    for (tokens, left, _), (tokens2, left2, _) in zip(here, there):
        assert tokens == tokens2 and left == left2 and left[SUBJECT_UNIT] == 0.0


def test_with_budget_left_the_subjects_text_is_read(backend):
    here, there = answers(backend, LETTER, None), answers(backend, NEIGHBOUR, None)
    release = max(max(left.values()) for _, left, _ in here)  # B_rel, less what the others spent: an upper bound
    assert all(left[SUBJECT_UNIT] < release for _, left, _ in here)  # it spent: its row is not the public one
    assert [t for t, _, _ in here] != [t for t, _, _ in there]  # so the seed-for-seed comparison above can fail
