"""A vault release through the worker, in process (tiny model, a real SQLite file): what each
ending leaves on the units' ledger (docs/privacy.md, "The vault: one lifetime filter per unit")."""

from __future__ import annotations

import dataclasses
import queue
import time

import pytest

from tokendp.service import batching
from tokendp.service.batching import END, Job
from tokendp.service.plans import AccountingMismatch
from tokendp.service.vault.release import REWRITE, RewriteParams, RewriteRequest

from tests.service.vault.helpers import SUBJECT, tiny_vault_worker


@pytest.fixture()
def setup(tmp_path):
    worker, vault, caller, _ = tiny_vault_worker(tmp_path, ("d1",))
    worker.start()
    yield worker, vault, caller
    worker.stop()


def release(worker, vault, caller) -> tuple[Job, list]:
    doc = vault.get(caller.tenant, "d1")
    job = worker.submit(Job(REWRITE, RewriteRequest(caller, doc, RewriteParams(3.0, 6)), caller.tenant,
                            tokens=queue.Queue()))
    job.future.exception(timeout=300)
    pieces = []
    while (piece := job.tokens.get(timeout=5)) is not END:
        pieces.append(piece)
    return job, pieces


def subject(vault, caller) -> dict:
    book = vault.ledger(caller.tenant)
    return next(u for u in book["units"] if u.get("subject") == SUBJECT), book["releases"]


def test_a_release_commits_what_its_filter_spent_and_is_cached(setup):
    worker, vault, caller = setup
    job, pieces = release(worker, vault, caller)
    body = job.future.result()
    held, states = subject(vault, caller)
    assert "".join(pieces) and states == {"done": 1} and held["reserved"] == 0
    assert 0 < held["spent"] <= job.plan.release_budget
    assert vault.cached(caller.tenant, "d1", vault.get(caller.tenant, "d1").version,
                        RewriteParams(3.0, 6).key()) == body


def test_a_reservation_that_differs_from_the_job_streams_no_token_and_is_voided(setup, monkeypatch):
    worker, vault, caller = setup
    real = vault.reserved
    monkeypatch.setattr(vault, "reserved", lambda rid: {u: r / 2 for u, r in real(rid).items()})
    job, pieces = release(worker, vault, caller)
    assert isinstance(job.future.exception(), AccountingMismatch) and pieces == [] and not job.charged
    held, states = subject(vault, caller)
    assert held["spent"] == held["reserved"] == 0 and states == {"void": 1}


def test_a_failure_after_a_token_keeps_the_whole_reservation_spent(setup, monkeypatch):
    worker, vault, caller = setup

    def broken(batch, on_token):
        on_token(0, 5)
        raise RuntimeError("failed mid-way")

    monkeypatch.setitem(batching._RUNNERS, REWRITE, broken)
    job, _ = release(worker, vault, caller)
    assert isinstance(job.future.exception(), RuntimeError) and job.charged
    held, states = subject(vault, caller)
    assert held["spent"] == job.plan.release_budget and held["reserved"] == 0 and states == {"failed": 1}


def test_a_failure_before_the_first_token_charges_nothing(setup, monkeypatch):
    worker, vault, caller = setup

    def broken(batch, on_token):
        raise RuntimeError("prefill failed")

    monkeypatch.setitem(batching._RUNNERS, REWRITE, broken)
    job, _ = release(worker, vault, caller)
    assert isinstance(job.future.exception(), RuntimeError) and not job.charged
    held, states = subject(vault, caller)
    assert held["spent"] == held["reserved"] == 0 and states == {"void": 1}


def test_a_release_waits_for_an_earlier_ticket_of_its_units_without_spinning_and_then_reserves(setup):
    """An earlier ticket of the same subject (another release, not yet closed) holds the release
    back: its ticket waits, rechecked on a poll, and it reserves once the earlier one closes."""
    worker, vault, caller = setup
    doc = vault.get(caller.tenant, "d1")
    request = RewriteRequest(caller, doc, RewriteParams(3.0, 6))
    earlier = vault.ticket(caller, doc, request.params.key(), request.units(), 6)
    checks = []
    real = vault.blocked
    vault.blocked = lambda rid: (checks.append(rid), real(rid))[1]
    job = worker.submit(Job(REWRITE, RewriteRequest(caller, doc, RewriteParams(3.0, 5)), caller.tenant))
    time.sleep(2.0)
    assert not job.admitted.done() and vault.ledger(caller.tenant)["releases"] == {"waiting": 2}
    assert 2 <= len(checks) <= 2.0 / worker.poll_s + 3  # a poll, not a busy loop
    vault.void(earlier)  # the earlier release sampled nothing: it closes
    job.future.result(timeout=300)
    assert vault.ledger(caller.tenant)["releases"] == {"done": 1}  # a ticket that never reserved leaves no row


def test_a_rewrite_that_waited_behind_an_identical_one_returns_its_stored_rewrite_at_no_cost(setup):
    """Two identical rewrites (one document version, one epsilon and T) wait behind an earlier
    ticket; the first generates and stores its rewrite, and the second, once its ticket may
    reserve, returns that one again: no second generation, no second charge, no row left."""
    worker, vault, caller = setup
    doc = vault.get(caller.tenant, "d1")
    params = RewriteParams(3.0, 6)
    earlier = vault.ticket(caller, doc, RewriteParams(3.0, 5).key(), RewriteRequest(caller, doc, params).units(), 5)
    first, second = (worker.submit(Job(REWRITE, RewriteRequest(caller, doc, params), caller.tenant,
                                       tokens=queue.Queue())) for _ in range(2))
    time.sleep(1.0)
    assert vault.ledger(caller.tenant)["releases"] == {"waiting": 3}
    vault.void(earlier)
    body, again = first.future.result(timeout=300), second.future.result(timeout=300)
    assert body["cached"] is False and again == {**body, "cached": True} and not second.charged
    assert [second.tokens.get(timeout=5), second.tokens.get(timeout=5)] == [body["text"], END]
    held, states = subject(vault, caller)
    assert states == {"done": 1} and 0 < held["spent"] <= first.plan.release_budget and held["reserved"] == 0


def test_a_release_cancelled_while_it_waits_is_voided(setup):
    worker, vault, caller = setup
    doc = vault.get(caller.tenant, "d1")
    request = RewriteRequest(caller, doc, RewriteParams(3.0, 6))
    earlier = vault.ticket(caller, doc, request.params.key(), request.units(), 6)
    job = worker.submit(Job(REWRITE, RewriteRequest(caller, doc, RewriteParams(3.0, 5)), caller.tenant))
    time.sleep(1.0)
    job.cancel("the client disconnected")
    assert isinstance(job.future.exception(timeout=30), batching.Cancelled) and not job.charged
    held, states = subject(vault, caller)
    assert held["spent"] == held["reserved"] == 0 and states == {"waiting": 1}  # its ticket is gone
    vault.void(earlier)


def test_a_commit_the_database_refuses_is_closed_again_as_a_failure_and_never_holds_the_subject(setup, monkeypatch):
    worker, vault, caller = setup
    real, calls = vault.commit, []

    def refused(*args):
        calls.append(args)
        raise RuntimeError("database unavailable")

    monkeypatch.setattr(vault, "commit", refused)
    job, _ = release(worker, vault, caller)
    assert job.future.exception() is None and calls  # the reader has the release
    deadline = time.monotonic() + 30
    while vault.ledger(caller.tenant)["releases"] != {"failed": 1} and time.monotonic() < deadline:
        time.sleep(0.1)
    held, states = subject(vault, caller)
    assert states == {"failed": 1} and held["spent"] == job.plan.release_budget  # spent in full, ticket closed
    monkeypatch.setattr(vault, "commit", real)
    job, _ = release(worker, vault, caller)  # the subject is not held back
    assert job.future.exception() is None


def test_a_rewrite_refused_for_its_passages_is_refused_again_without_planning(tmp_path, monkeypatch):
    """Issue 46: a reader cannot make the model's thread plan a long document over and over; the
    document's fewest tokens are learned once per version, and a new version is planned again."""
    from tokendp.backends import load_backend
    from tokendp.long_documents import TooFewTokens
    from tokendp.service.vault import release as releases
    from tokendp.service.vault.store import StoredDocument

    _, vault, caller, _ = tiny_vault_worker(tmp_path, ())
    backend, settings, least = load_backend("tiny"), vault.settings(caller.tenant), releases.LeastTokens()
    text = " ".join(["Dear Dr Helen Marsh, I am writing about my patient."] * 120)
    spans = ({"start": 8, "end": 19, "label": "PERSON"},)
    doc = StoredDocument("long", "v1", "long letter", text, spans, None, "confirmed")
    ask = RewriteRequest(caller, doc, RewriteParams(3.0, 1))
    with pytest.raises(TooFewTokens) as first:
        releases.plan_rewrite(ask, backend, settings, max_tokens=10_000, least=least)
    assert first.value.least > 1
    monkeypatch.setattr(releases, "prepare_sanitize", lambda *a, **k: pytest.fail("planned again"))
    with pytest.raises(TooFewTokens, match=f"at least {first.value.least}"):
        releases.plan_rewrite(ask, backend, settings, max_tokens=10_000, least=least)
    with pytest.raises(pytest.fail.Exception, match="planned again"):  # another version: planned
        releases.plan_rewrite(RewriteRequest(caller, dataclasses.replace(doc, version="v2"), RewriteParams(3.0, 1)),
                              backend, settings, max_tokens=10_000, least=least)
