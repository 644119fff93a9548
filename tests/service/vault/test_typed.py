"""The vault writes like the command line (issue 45): a stored document's spans are hidden with
their labels' typed markers whatever unit they belong to, so the default model (the rewriter,
trained on those markers) rewrites it rather than echoing placeholders. Through the service's
worker on a real SQLite vault, one short letter, T = 24."""

from __future__ import annotations

import pytest

from tokendp.service.batching import Job, Worker
from tokendp.service.keys import authenticate, create_key
from tokendp.service.store import BudgetStore
from tokendp.service.vault.release import REWRITE, RewriteParams, RewriteRequest
from tokendp.service.vault.store import VaultStore
from tokendp.text.contexts import placeholders

pytestmark = pytest.mark.slow

TEXT = ("Dear Dr Helen Marsh,\n\nI saw your patient Mr Tomas Lindqvist in the clinic in Leeds on 2 June 2024. "
        "He reported recurrent chest pain.\n")
SPANS = [(TEXT.index("Helen"), "Helen Marsh", "PERSON", None), (TEXT.index("Tomas"), "Tomas Lindqvist", "PERSON",
         "patient-7"), (TEXT.index("Leeds"), "Leeds", "LOC", None), (TEXT.index("2 June"), "2 June 2024", "DATE",
                                                                     "patient-7")]


@pytest.fixture(scope="module")
def rewriter():
    from tokendp.backends import load_backend

    return load_backend("rewriter")


def test_a_rewrite_shows_typed_markers_and_writes_no_placeholder_runs(tmp_path, rewriter):
    store = BudgetStore(tmp_path / "service.db")
    vault = VaultStore(lambda: store.conn)
    key, tenant = create_key(store.conn, "clinic", budget=8.0, role="reader")
    spans = [{"start": at, "end": at + len(span), "label": label, **({"subject": who} if who else {})}
             for at, span, label, who in SPANS]
    vault.put(tenant, {"id": "letter", "title": "", "text": TEXT, "spans": spans}, state="confirmed", create=True)
    worker = Worker(lambda: (rewriter, None), store, max_tokens=64, vault=vault)
    worker.start()
    try:
        caller = authenticate(store.conn, key)
        doc = vault.get(tenant, "letter")
        job = worker.submit(Job(REWRITE, RewriteRequest(caller, doc, RewriteParams(8.0, 24), seed=1), tenant))
        body = job.future.result(timeout=600)
    finally:
        worker.stop()
    marker = placeholders(rewriter.tokenizer, options=rewriter.options)
    public = job.plan.job.documents[0].context.rows[0]
    assert {marker.of(label) for label in ("PERSON", "LOC", "DATE")} <= set(public)
    assert marker.default not in set(public) - set(rewriter.tokenizer(TEXT, add_special_tokens=False)["input_ids"])
    assert [g["label"] for g in body["report"]["groups"]] == ["unit-001", "unit-002", "unit-003"]
    assert body["text"].strip() and "___" not in body["text"]
