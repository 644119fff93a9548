"""POST /v1/ask against a real ``tokendp serve`` over HTTP (docs/vault.md, "Asking"): a reader's
answer and its certificate, one group per unit across the documents read, an exhausted subject,
quotas, refusals that charge nothing and say nothing, and retrieval over public versions (two
tenants' vaults that differ only in span text read the same documents)."""

from __future__ import annotations

import json
import sqlite3

import pytest

httpx = pytest.importorskip("httpx", reason="the service tests need httpx (the dev extra)")
pytest.importorskip("bm25s", reason="/v1/ask's retrieval needs bm25s (the serve extra)")

from tests.service.conftest import LETTER, Server, auth, sse_events  # noqa: E402
from tests.service.vault.helpers import (RELEASE, SECRETS, SUBJECT, call, document, ledger, make_keys,  # noqa: E402
                                         unit)

pytestmark = pytest.mark.slow

QUESTION = "When was the patient admitted?"
WARD = "Ward 3 was closed on Monday for cleaning; visiting hours resume on Friday."
# The twin vault's letters: other names in the same spans (same positions, lengths and labels).
TWIN = LETTER[:8] + "Karin Welch" + LETTER[19:54] + "Jonas Bergqvist" + LETTER[69:]
SUBJECT_UNIT = json.dumps(["subject", SUBJECT])


@pytest.fixture(scope="module")
def vault(tmp_path_factory):
    """(server, keys, db): tenant clinic (owner, reader, quota reader) with letters a and b about
    one subject, a note without spans and a draft; tenant twin, the same with other names."""
    root = tmp_path_factory.mktemp("ask")
    db = root / "service.db"
    owner, reader, limited = make_keys(db, "clinic", "owner", "reader", "reader")
    twin_owner, twin_reader = make_keys(db, "twin", "owner", "reader")
    server = Server(db, root / "server.log", "--rate-limit", "1000", "--max-new-tokens", "16").start()
    for key, letter in ((owner, LETTER), (twin_owner, TWIN)):
        for id in ("a", "b"):
            assert call(server, "POST", "/v1/documents", key, json={**document(id), "text": letter}).status_code == 201
        assert call(server, "POST", "/v1/documents", key,
                    json={"id": "ward", "title": "notice", "text": WARD, "spans": []}).status_code == 201
        reply = call(server, "POST", "/v1/documents", key, json={"id": "draft", "text": letter})
        assert reply.json()["state"] == "draft"
    keys = {"owner": owner, "reader": reader, "limited": limited, "twin_owner": twin_owner, "twin_reader": twin_reader}
    yield server, keys, db
    server.stop()


def ask(server, key: str, **body) -> httpx.Response:
    return call(server, "POST", "/v1/ask", key, json={"question": QUESTION, "epsilon": RELEASE, "max_new_tokens": 6,
                                                       **body})


def last_reservations(db) -> dict[str, float]:
    with sqlite3.connect(db) as conn:
        (release,) = conn.execute("SELECT MAX(id) FROM releases").fetchone()
        rows = conn.execute("SELECT unit, reserved FROM reservations WHERE release_id = ?", (release,)).fetchall()
    units = [u for u, _ in rows]
    assert len(units) == len(set(units))  # one reservation per unit and release
    return dict(rows)


def test_a_reader_asks_and_gets_an_answer_its_certificate_and_the_documents_read(vault):
    server, keys, _ = vault
    reply = ask(server, keys["reader"])
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert set(body) == {"text", "report", "documents", "lifetime"}
    assert body["documents"] == ["a", "b"]  # retrieved: equal public versions, by id; the draft is never read
    report = body["report"]
    assert report["accounting"] == "filter" and report["max_new_tokens"] == 6
    assert [g["label"] for g in report["groups"]] == ["unit-001", "unit-002", "unit-003"]
    assert all(g["epsilon"] == pytest.approx(RELEASE) for g in report["groups"])
    assert not any(s in reply.text for s in SECRETS)
    assert not any(k in json.dumps(report) for k in ("lam", "spent", "remaining", "reserved", "divergence"))
    assert body["lifetime"]["epsilon"] == 4.0


def test_a_subject_in_two_documents_is_one_group_and_one_charge_per_answer(vault):
    server, keys, db = vault
    before = unit(ledger(server, keys["owner"]), subject=SUBJECT)
    reply = ask(server, keys["reader"], documents=["b", "a"])
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["documents"] == ["b", "a"]  # named: read in the order given
    groups = body["report"]["groups"]
    assert [g["n_spans"] for g in groups] == [1, 2, 1]  # b's Marsh, the subject in both, a's Marsh
    reserved = last_reservations(db)
    assert set(reserved) == {SUBJECT_UNIT, json.dumps(["document", "a", "PERSON"]),
                             json.dumps(["document", "b", "PERSON"])}
    after = unit(ledger(server, keys["owner"]), subject=SUBJECT)
    with sqlite3.connect(db) as conn:
        (spent,) = conn.execute("SELECT spent FROM reservations WHERE unit = ? ORDER BY release_id DESC LIMIT 1",
                                (SUBJECT_UNIT,)).fetchone()
    assert 0 < spent <= reserved[SUBJECT_UNIT] and after["spent"] == pytest.approx(before["spent"] + spent)


def test_answers_are_never_stored_each_is_a_fresh_release(vault):
    server, keys, db = vault
    before = ledger(server, keys["owner"])["releases"].get("done", 0)
    for _ in range(2):
        assert ask(server, keys["reader"], max_new_tokens=2).status_code == 200
    assert ledger(server, keys["owner"])["releases"]["done"] == before + 2
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM rewrites").fetchone() == (0,)


def test_a_stream_sends_tokens_then_the_result(vault):
    server, keys, _ = vault
    with httpx.stream("POST", server.url + "/v1/ask", headers=auth(keys["reader"]), timeout=180,
                      json={"question": QUESTION, "epsilon": RELEASE, "max_new_tokens": 8, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        out = sse_events(r)
    names = [n for n, _ in out]
    assert names[-1] == "result" and set(names[:-1]) == {"token"}
    assert out[-1][1]["documents"] == ["a", "b"]


def test_neighbouring_vaults_read_the_same_documents(vault):
    """Tenants clinic and twin differ only in their span text: every question reads the same documents."""
    server, keys, _ = vault
    read = {}
    for question in (QUESTION, "Helen Marsh", "Lindqvist ward", "Which ward was closed on Monday?", "Karin",
                     "Bergqvist"):
        got = [ask(server, keys[k], question=question, max_new_tokens=1) for k in ("reader", "twin_reader")]
        assert got[0].status_code == got[1].status_code in (200, 404), question
        assert got[0].json().get("documents") == got[1].json().get("documents"), question
        read[question] = got[0].json().get("documents")
    assert read[QUESTION] == ["a", "b"] and read["Lindqvist ward"] == ["ward"] and read["Karin"] is None


def test_the_index_follows_the_owner(vault):
    server, keys, _ = vault
    assert ask(server, keys["reader"], question="physiotherapy").json()["error"]["code"] == "no_match"
    note = {"id": "physio", "text": "Physiotherapy starts on the ward next week.", "spans": []}
    assert call(server, "POST", "/v1/documents", keys["owner"], json=note).status_code == 201
    assert ask(server, keys["reader"], question="physiotherapy").json()["documents"] == ["physio"]
    assert call(server, "DELETE", "/v1/documents/physio", keys["owner"]).status_code == 200
    assert ask(server, keys["reader"], question="physiotherapy").status_code == 404


def test_an_exhausted_subject_reads_the_public_text_and_the_answer_goes_on(vault):
    server, keys, db = vault
    book = ledger(server, keys["owner"])
    with sqlite3.connect(db) as conn:  # the subject's whole lifetime budget, spent
        (old,) = conn.execute("SELECT spent FROM units WHERE tenant = 'clinic' AND unit = ?",
                              (SUBJECT_UNIT,)).fetchone()
        conn.execute("UPDATE units SET spent = ? WHERE tenant = 'clinic' AND unit = ?", (book["budget"], SUBJECT_UNIT))
    try:
        reply = ask(server, keys["reader"])
        assert reply.status_code == 200, reply.text
        assert [g["epsilon"] for g in reply.json()["report"]["groups"]] == [pytest.approx(RELEASE)] * 3
        assert last_reservations(db)[SUBJECT_UNIT] == 0.0
        assert unit(ledger(server, keys["owner"]), subject=SUBJECT)["spent"] == book["budget"]
    finally:
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE units SET spent = ? WHERE tenant = 'clinic' AND unit = ?", (old, SUBJECT_UNIT))


def test_a_readers_quota_counts_answers_and_refuses_before_anything_is_charged(vault):
    server, keys, _ = vault
    prefix = keys["limited"][:10]
    assert call(server, "PUT", f"/v1/readers/{prefix}/quota", keys["owner"],
                json={"releases_per_day": 1, "tokens_per_day": 10}).status_code == 200
    too_long = ask(server, keys["limited"], max_new_tokens=11)
    assert too_long.status_code == 429 and too_long.json()["error"]["code"] == "quota_exceeded"
    assert ask(server, keys["limited"], max_new_tokens=7).status_code == 200
    before = ledger(server, keys["owner"])
    again = ask(server, keys["limited"], max_new_tokens=7)  # not stored: a second answer is a second release
    assert again.status_code == 429 and again.json()["error"]["code"] == "quota_exceeded"
    assert ledger(server, keys["owner"]) == before
    assert ask(server, keys["reader"], max_new_tokens=2).status_code == 200  # another key's quota


def test_refusals_charge_nothing_and_say_nothing_about_the_documents(vault):
    server, keys, _ = vault
    before = ledger(server, keys["owner"])
    missing = ask(server, keys["reader"], documents=["a", "nowhere"])
    for id in ("draft", "physio-gone"):  # a draft and an id that never existed: one answer
        other = ask(server, keys["reader"], documents=[id])
        assert (other.status_code, other.json()) == (missing.status_code, missing.json()) == (404, missing.json())
    twin = ask(server, keys["twin_reader"], documents=["draft"])  # another tenant: its own draft, the same 404
    assert (twin.status_code, twin.json()) == (404, missing.json())
    refused = [ask(server, keys["reader"], epsilon=0.5),  # below what the vault's order can certify
               ask(server, keys["reader"], max_new_tokens=17),  # above the server's limit
               ask(server, keys["reader"], documents=["a"], top_k=2),
               ask(server, keys["reader"], question="zzz qqq"),
               ask(server, keys["reader"], seed=7)]
    assert [r.status_code for r in refused] == [400, 400, 400, 404, 403]
    assert refused[-1].json()["error"]["code"] == "forbidden"
    for body in ({"documents": ["a", "a"]}, {"documents": []}, {"top_k": 9}, {"question": ""}, {"epsilon": -1},
                 {"colour": "red"}):
        assert ask(server, keys["reader"], **body).status_code == 422, body
    assert ledger(server, keys["owner"]) == before
    for reply in (missing, *refused):
        assert not any(s in reply.text for s in SECRETS)
    assert ask(server, keys["owner"], seed=7, max_new_tokens=2).status_code == 200  # an owner may fix it
    assert not any(s in server.log.read_text(errors="replace") for s in (*SECRETS, QUESTION))

