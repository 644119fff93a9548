"""A vault release on the tiny model, in process (tokendp.service.vault.release): one group per unit,
the reservations as the filter's budgets, and a unit whose budget is spent read as the public
text: the release is then the same, token for token, whatever that unit's spans say."""

from __future__ import annotations

import json

import pytest
import torch

from tests.service.conftest import LETTER
from tokendp.jobs.sanitize import run_sanitize_spending
from tokendp.service.keys import Caller, Tenant
from tokendp.service.plans import AccountingMismatch
from tokendp.service.vault.units import unit_key
from tokendp.service.vault.release import RewriteParams, RewriteRequest, plan_rewrite
from tokendp.service.vault.store import Settings, StoredDocument

SUBJECT = "patient-7"
CALLER = Caller(Tenant("clinic", 4.0, 1e-5), "reader", "hash", "tdp_prefix")
SETTINGS = Settings(alpha=6.0, budget=2.238088357645488)
NAMES = ["Tomas Lindqvist", "Peter Sandberg", "Maria Gonzalez", "Anna Karlsson", "Olof Eriksson", "John Smith",
         "Lena Holm", "Erik Nilsson", "Sara Berg", "Karl Lund"]


@pytest.fixture(scope="module")
def tiny():
    from tokendp.backends import load_backend

    return load_backend("tiny")


def letter(name: str) -> StoredDocument:
    """LETTER with the patient's name replaced; Dr Marsh without a subject (the unit (d1, PERSON)),
    the patient's name and the date about SUBJECT."""
    text = LETTER.replace("Tomas Lindqvist", name)
    spans = [{"start": 8, "end": 19, "label": "PERSON"},
             {"start": text.index(name), "end": text.index(name) + len(name), "label": "PERSON", "subject": SUBJECT},
             {"start": text.index("2 June"), "end": text.index("2 June") + 11, "label": "DATE", "subject": SUBJECT}]
    return StoredDocument("d1", "v1", "a letter", text, tuple(spans), None, "confirmed")


def plan(tiny, doc: StoredDocument, spent_subject: bool):
    release = plan_rewrite(RewriteRequest(CALLER, doc, RewriteParams(3.0, 12)), tiny, SETTINGS, max_tokens=64)
    reserved = {u: 0.0 if spent_subject and u == unit_key("d1", "PERSON", SUBJECT) else release.release_budget
                for u in release.units}
    release.use(reserved)
    release.check(reserved)
    return release, reserved


def test_one_group_per_unit_named_by_position_and_no_subject_in_the_report(tiny):
    release, reserved = plan(tiny, letter("Tomas Lindqvist"), spent_subject=False)
    assert release.units == (unit_key("d1", "PERSON", None), unit_key("d1", "PERSON", SUBJECT))
    (result,), (left,) = run_sanitize_spending(release.job, seed=[1])
    body = release.response(result)
    assert [g["label"] for g in body["report"]["groups"]] == ["unit-001", "unit-002"]
    assert [g["n_spans"] for g in body["report"]["groups"]] == [1, 2]  # the name and the date share a unit
    assert SUBJECT not in json.dumps(body) and "Marsh" not in json.dumps(body["report"])
    assert all(0 <= rest <= reserved[u] for u, rest in zip(release.units, left))
    with pytest.raises(AccountingMismatch):
        release.check({**reserved, release.units[0]: reserved[release.units[0]] / 2})
    release.verify([body["report"]])


def test_a_spent_unit_is_read_as_the_public_text_token_for_token(tiny):
    """With its reservation 0, the subject's spans are never read: two letters that differ only
    in the patient's name (with the same public layout) give the same release for each seed."""
    first, _ = plan(tiny, letter(NAMES[0]), spent_subject=True)
    public = first.job.documents[0].context.rows[0]
    others = [plan(tiny, letter(n), spent_subject=True)[0] for n in NAMES[1:]]
    same_layout = [r for r in others if r.job.documents[0].context.rows[0] == public]
    assert same_layout, "no name with the same public layout among the candidates"
    for seed in (1, 2, 3):
        (mine,), (left,) = run_sanitize_spending(first.job, seed=[seed])
        for other in same_layout:
            (theirs,), _ = run_sanitize_spending(other.job, seed=[seed])
            assert theirs.text == mine.text
        assert left[first.units.index(unit_key("d1", "PERSON", SUBJECT))] == 0.0


def test_a_spent_unit_keeps_the_weight_ceiling_of_a_live_one(tiny):
    """Issue 46: the filter's weight ceilings come from the release's planned B_rel, not from the
    reservations, so an exhausted unit's row is mixed and searched as a live one's (its time says
    nothing about its budget); the budgets the filter spends are the reservations."""
    from tokendp.fusion import FusionJob

    tables = []
    for spent in (False, True):
        release, reserved = plan(tiny, letter(NAMES[0]), spent_subject=spent)
        (doc,) = release.job.documents
        assert doc.budgets == tuple(reserved[u] for u in release.units)
        assert doc.ceiling_budgets == (release.release_budget,) * len(release.units)
        tables.append(FusionJob(release.job.method, release.job.delta, release.job.documents,
                                accounting=release.job.accounting).lam_t)
    assert torch.equal(tables[0], tables[1]) and bool((tables[0] < 1).all())
