"""Answers through the worker, in process (tiny model, a real SQLite file): what each ending leaves
on the units' ledger when one subject is in two documents, and two answers at once about it
(docs/privacy.md, "Asking the vault: retrieval from public versions")."""

from __future__ import annotations

import json
import queue

import pytest

from tokendp.accounting import lifetime_reservation
from tokendp.service import batching
from tokendp.service.batching import END, Job
from tokendp.service.vault.ask import ASK, AskParams, AskRequest

from tests.service.vault.helpers import SUBJECT, tiny_vault_worker

UNITS = {json.dumps(["subject", SUBJECT]), json.dumps(["document", "d1", "PERSON"]),
         json.dumps(["document", "d2", "PERSON"])}


@pytest.fixture()
def setup(tmp_path):
    worker, vault, caller, store = tiny_vault_worker(tmp_path, ("d1", "d2"))
    yield worker, vault, caller, store  # each test starts it, after submitting what must be taken at once
    worker.stop()


def submit(worker, vault, caller) -> Job:
    docs = tuple(vault.get(caller.tenant, id) for id in ("d1", "d2"))
    return worker.submit(Job(ASK, AskRequest(caller, "When was the patient admitted?", docs, AskParams(3.0, 6)),
                             caller.tenant, tokens=queue.Queue()))


def finish(job: Job) -> list[str]:
    job.future.exception(timeout=300)
    pieces = []
    while (piece := job.tokens.get(timeout=5)) is not END:
        pieces.append(piece)
    return pieces


def ledger(vault, caller) -> tuple[dict, dict]:
    book = vault.ledger(caller.tenant)
    return next(u for u in book["units"] if u.get("subject") == SUBJECT), book["releases"]


def reservations(store) -> list[tuple[int, str, float, float | None]]:
    return [tuple(r) for r in store.conn.execute(
        "SELECT release_id, unit, reserved, spent FROM reservations ORDER BY release_id, unit").fetchall()]


def test_an_answer_reserves_each_unit_once_and_commits_what_its_filter_spent(setup):
    worker, vault, caller, store = setup
    job = submit(worker, vault, caller)
    worker.start()
    pieces = finish(job)
    body = job.future.result()
    assert "".join(pieces) and body["documents"] == ["d1", "d2"]
    rows = reservations(store)
    assert {u for _, u, _, _ in rows} == UNITS and len(rows) == 3  # the subject of both documents: once
    held, states = ledger(vault, caller)
    (spent,) = [s for _, u, _, s in rows if u == json.dumps(["subject", SUBJECT])]
    assert states == {"done": 1} and held["reserved"] == 0 and held["spent"] == spent
    assert 0 < spent <= job.plan.release_budget
    assert store.conn.execute("SELECT COUNT(*) FROM rewrites").fetchone()[0] == 0  # never stored


def test_two_answers_at_once_reserve_in_arrival_order_and_never_past_any_units_budget(setup):
    """Both arrive before either reserves: the second (a later ticket, sharing all three units)
    waits for the first's commit and reserves on what it left, never beside it."""
    worker, vault, caller, store = setup
    jobs = [submit(worker, vault, caller) for _ in range(2)]
    worker.start()
    for job in jobs:
        finish(job)
        assert job.future.exception() is None
    budget, release = vault.settings(caller.tenant).budget, jobs[0].plan.release_budget
    rows = reservations(store)
    for unit in UNITS:
        (first_id, _, first, spent), (second_id, _, second, _) = [r for r in rows if r[1] == unit]
        assert first_id < second_id and first == release
        assert second == lifetime_reservation(budget=budget, spent=spent, outstanding=0.0, release=release)
        assert spent + second <= budget
    held, states = ledger(vault, caller)
    assert states == {"done": 2} and held["spent"] <= budget


def test_a_failure_after_a_token_keeps_every_units_reservation_spent(setup, monkeypatch):
    worker, vault, caller, store = setup

    def broken(batch, on_token):
        on_token(0, 5)
        raise RuntimeError("failed mid-way")

    monkeypatch.setitem(batching._RUNNERS, ASK, broken)
    job = submit(worker, vault, caller)
    worker.start()
    finish(job)
    assert isinstance(job.future.exception(), RuntimeError) and job.charged
    assert all(s == r for _, _, r, s in reservations(store))
    held, states = ledger(vault, caller)
    assert held["spent"] == job.plan.release_budget and states == {"failed": 1}


def test_a_failure_before_the_first_token_charges_nothing(setup, monkeypatch):
    worker, vault, caller, store = setup

    def broken(batch, on_token):
        raise RuntimeError("prefill failed")

    monkeypatch.setitem(batching._RUNNERS, ASK, broken)
    job = submit(worker, vault, caller)
    worker.start()
    finish(job)
    assert isinstance(job.future.exception(), RuntimeError) and not job.charged
    held, states = ledger(vault, caller)
    assert held["spent"] == held["reserved"] == 0 and states == {"void": 1} and reservations(store) == []
