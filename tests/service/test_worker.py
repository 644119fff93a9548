"""The worker between reservation and release, in process (tiny model, a real SQLite store):
the pre-generation check against the stored reservation, and what a failure leaves charged."""

from __future__ import annotations

import queue

import pytest

from tokendp.service import batching
from tokendp.service.batching import END, Job, Worker
from tokendp.service.composition import Charge
from tokendp.service.keys import create_key
from tokendp.service.plans import AccountingMismatch
from tokendp.service.schemas import SanitizeRequest
from tokendp.service.store import BudgetStore

from tests.service.conftest import LETTER, PERSONS


@pytest.fixture()
def worker(tmp_path):
    from tokendp.backends import load_backend
    from tokendp.text.taggers import get_tagger

    store = BudgetStore(tmp_path / "service.db")
    _, tenant = create_key(store.conn, "t", budget=100.0)
    worker = Worker(lambda: (load_backend("tiny"), get_tagger("patterns")), store, max_tokens=32)
    worker.start()
    yield worker, store, tenant
    worker.stop()


def submit(worker, tenant, stream=True) -> tuple[Job, list]:
    request = SanitizeRequest(id="doc", text=LETTER, spans=PERSONS, epsilon=2, max_new_tokens=6, stream=stream)
    job = worker.submit(Job("sanitize", request, tenant, tokens=queue.Queue() if stream else None))
    job.future.exception(timeout=300)  # wait for the result or the error
    pieces = []
    while job.tokens is not None and (piece := job.tokens.get(timeout=5)) is not END:
        pieces.append(piece)
    return job, pieces


def test_a_reservation_that_differs_from_the_job_streams_no_token_and_is_voided(worker, monkeypatch):
    worker, store, tenant = worker
    real = store.reserved
    monkeypatch.setattr(store, "reserved", lambda rid: {k: Charge(c.kind, c.value / 2, c.alpha)
                                                         for k, c in real(rid).items()})
    job, pieces = submit(worker, tenant)
    assert isinstance(job.future.exception(), AccountingMismatch)
    assert pieces == [] and job.charged is False
    assert store.units(tenant, "doc") == [] and store.requests(tenant) == {"void": 1}


def test_a_failure_before_the_first_token_charges_nothing(worker, monkeypatch):
    worker, store, tenant = worker

    def broken(batch, on_token):
        raise RuntimeError("prefill failed")

    monkeypatch.setitem(batching._RUNNERS, "sanitize", broken)
    job, pieces = submit(worker, tenant)
    assert isinstance(job.future.exception(), RuntimeError) and pieces == [] and job.charged is False
    assert store.units(tenant, "doc") == [] and store.requests(tenant) == {"void": 1}


def test_a_failure_after_a_token_keeps_the_reservation_spent(worker, monkeypatch):
    worker, store, tenant = worker

    def broken(batch, on_token):
        on_token(0, 5)
        raise RuntimeError("failed mid-way")

    monkeypatch.setitem(batching._RUNNERS, "sanitize", broken)
    job, _ = submit(worker, tenant)
    assert isinstance(job.future.exception(), RuntimeError) and job.charged is True
    (unit,) = store.units(tenant, "doc")
    assert unit.spent == pytest.approx(2.0) and store.requests(tenant) == {"failed": 1}


def test_a_job_that_runs_is_charged_exactly_what_its_report_certifies(worker):
    worker, store, tenant = worker
    job, pieces = submit(worker, tenant)
    result = job.future.result()
    assert "".join(pieces).strip() and job.charged is True
    (unit,) = store.units(tenant, "doc")
    assert unit.spent == pytest.approx(result["report"]["groups"][0]["epsilon"], rel=1e-12)
    assert store.requests(tenant) == {"spent": 1}


def test_a_sanitize_request_names_its_private_labels():
    """``labels``: only the chosen labels' groups are charged, the others named in ``keep``; a
    label named in neither, or an unknown one, is refused while the job is planned, before
    anything runs or is charged."""
    from tokendp.backends import load_backend
    from tokendp.errors import InvalidParameterError
    from tokendp.service.plans import plan_sanitize

    backend = load_backend("tiny")
    spans = [*PERSONS, {"start": 84, "end": 95, "label": "DATE"}]
    plan = plan_sanitize(SanitizeRequest(id="doc", text=LETTER, spans=spans, epsilon=2, max_new_tokens=4),
                         backend, None, max_tokens=32)
    assert sorted(group for _, group in plan.charges) == ["DATE", "PERSON"]
    with pytest.raises(InvalidParameterError, match=r"DATE \(1 span\) are neither"):
        plan_sanitize(SanitizeRequest(id="doc", text=LETTER, spans=spans, epsilon=2, max_new_tokens=4,
                                      labels=["person"]), backend, None, max_tokens=32)
    plan = plan_sanitize(SanitizeRequest(id="doc", text=LETTER, spans=spans, epsilon=2, max_new_tokens=4,
                                         labels=["person"], keep=["DATE"]), backend, None, max_tokens=32)
    assert [group for _, group in plan.charges] == ["PERSON"]
    assert plan.job.documents[0].private_labels == ("PERSON",)
    with pytest.raises(InvalidParameterError, match="matches no span"):
        plan_sanitize(SanitizeRequest(id="doc", text=LETTER, spans=spans, epsilon=2, labels=["PERSON", "PERSN"],
                                      keep=["DATE"]),
                      backend, None, max_tokens=32)


def test_answers_run_on_the_answering_model_and_everything_else_on_the_rewriting_one(tmp_path, monkeypatch):
    """serve --model rewriter answers with smollm2 (issue 45): a Worker given (writer, tagger,
    answerer) plans /v1/generate and the vault's asks on the answerer, sanitize on the writer."""
    from tokendp.backends import load_backend
    from tokendp.service.schemas import GenerateRequest
    from tokendp.service.vault.ask import ASK
    from tokendp.service.vault.release import REWRITE
    from tokendp.text.taggers import get_tagger

    writer, answerer = load_backend("tiny"), load_backend("tiny")
    planned = {}
    for kind in ("sanitize", "generate"):
        real = getattr(batching, f"plan_{kind}")

        def spy(request, model, *rest, _real=real, _kind=kind, **kw):
            planned[_kind] = model
            return _real(request, model, *rest, **kw)

        monkeypatch.setattr(batching, f"plan_{kind}", spy)
    store = BudgetStore(tmp_path / "service.db")
    _, tenant = create_key(store.conn, "t", budget=100.0)
    worker = Worker(lambda: (writer, get_tagger("patterns"), answerer), store, max_tokens=32)
    worker.start()
    try:
        submit(worker, tenant, stream=False)
        ask = GenerateRequest(id="q", prompt="Who wrote it?", context=LETTER, spans=PERSONS, epsilon=2,
                              max_new_tokens=4)
        job = worker.submit(Job("generate", ask, tenant, tokens=queue.Queue()))
        assert job.future.exception(timeout=300) is None
    finally:
        worker.stop()
    assert planned["sanitize"] is writer and planned["generate"] is answerer
    assert worker.model(ASK) is answerer and worker.model(REWRITE) is writer and worker.model("synthesize") is writer


def test_one_model_answers_and_rewrites_when_no_answerer_is_given(worker):
    worker, _, _ = worker
    assert worker.ready.wait(300) and worker.answerer is worker.backend


def test_the_rewriter_answers_through_the_base_instruct_model():
    from tokendp.models.registry import answering_model

    assert answering_model("rewriter") == "smollm2"
    assert [answering_model(m) for m in ("smollm2", "tiny", "./my-model")] == ["smollm2", "tiny", "./my-model"]
