"""The vault against a real ``tokendp serve`` over HTTP (docs/vault.md): roles on every route,
documents in (and bad ones refused), drafts, releases under the lifetime filter, the cache, an
exhausted unit, quotas."""

from __future__ import annotations

import json
import sqlite3

import pytest

httpx = pytest.importorskip("httpx", reason="the service tests need httpx (the dev extra)")

from tests.service.conftest import LETTER, Server, auth  # noqa: E402
from tests.service.vault.helpers import (LIFETIME, RELEASE, SECRETS, SUBJECT, call, document, ledger,  # noqa: E402
                                         make_keys, rewrite, stream_events, unit)

pytestmark = pytest.mark.slow

# (method, path) a reader key may call; every other route of the app must answer a reader 403.
READER_ROUTES = {("GET", "/v1/documents"), ("GET", "/v1/documents/{id}/rewrite"), ("POST", "/v1/ask"),
                 ("POST", "/v1/account"), ("GET", "/v1/whoami")}


@pytest.fixture(scope="module")
def vault(tmp_path_factory):
    """(server, keys, db): tenant clinic (owner, reader, quota reader) and tenant other (owner, reader)."""
    root = tmp_path_factory.mktemp("vault")
    db = root / "service.db"
    owner, reader, limited = make_keys(db, "clinic", "owner", "reader", "reader")
    other_owner, other_reader = make_keys(db, "other", "owner", "reader")
    server = Server(db, root / "server.log", "--rate-limit", "1000", "--max-new-tokens", "16").start()
    keys = {"owner": owner, "reader": reader, "limited": limited, "other_owner": other_owner,
            "other_reader": other_reader}
    for id in ("a", "b"):
        assert call(server, "POST", "/v1/documents", owner, json=document(id)).status_code == 201
    yield server, keys, db
    server.stop()


def test_every_route_but_the_readers_refuses_a_reader_key(vault):
    """Enumerated from the app's own OpenAPI document: a route added without a role check fails here."""
    server, keys, _ = vault
    paths = httpx.get(server.url + "/openapi.json").json()["paths"]
    seen = set()
    for path, methods in paths.items():
        for method in methods:
            route = (method.upper(), path)
            seen.add(route)
            if route in READER_ROUTES or route == ("GET", "/healthz"):  # /healthz: no key, model state only
                continue
            url = path.replace("{id}", "a").replace("{prefix}", keys["reader"][:10])
            reply = call(server, method.upper(), url, keys["reader"], json={})
            assert reply.status_code == 403, (route, reply.status_code)
            assert reply.json()["error"]["code"] == "forbidden"
            assert not any(s in reply.text for s in SECRETS)
    assert READER_ROUTES <= seen and ("GET", "/v1/ledger") in seen and ("GET", "/v1/documents/{id}") in seen


def test_a_reader_lists_ids_and_titles_and_never_receives_text_spans_or_ledger(vault):
    server, keys, _ = vault
    listing = call(server, "GET", "/v1/documents", keys["reader"]).json()["documents"]
    assert {d["id"] for d in listing} >= {"a", "b"}
    assert all(set(d) == {"id", "title"} for d in listing)
    release = rewrite(server, keys["reader"], "a", max_new_tokens=6)
    assert release.status_code == 200, release.text
    body = release.json()
    assert set(body) == {"id", "text", "report", "lifetime", "cached"}
    assert SUBJECT not in release.text and "Marsh" not in json.dumps(body["report"])
    assert [g["label"] for g in body["report"]["groups"]] == ["unit-001", "unit-002"]
    assert not any(k in json.dumps(body["report"]) for k in ("lam", "spent", "remaining", "reserved", "divergence"))
    assert body["lifetime"]["epsilon"] == LIFETIME
    assert all(g["epsilon"] == pytest.approx(RELEASE) for g in body["report"]["groups"])


def test_whoami_tells_a_key_its_tenant_and_role_and_nothing_else(vault):
    server, keys, _ = vault
    for name, role in (("owner", "owner"), ("reader", "reader"), ("other_reader", "reader")):
        reply = call(server, "GET", "/v1/whoami", keys[name])
        assert reply.status_code == 200 and reply.json() == {"tenant": "other" if name == "other_reader" else "clinic",
                                                              "role": role}
    assert call(server, "GET", "/v1/whoami", "tdp_" + "x" * 43).status_code == 401


def test_another_tenant_sees_nothing_of_this_vault(vault):
    server, keys, _ = vault
    for key in (keys["other_owner"], keys["other_reader"]):
        assert call(server, "GET", "/v1/documents", key).json()["documents"] == []
        assert rewrite(server, key, "a").status_code == 404
    for method in ("GET", "DELETE"):
        assert call(server, method, "/v1/documents/a", keys["other_owner"]).status_code == 404
    assert call(server, "POST", "/v1/documents/a/confirm", keys["other_owner"]).status_code == 404
    assert ledger(server, keys["other_owner"])["units"] == []
    assert call(server, "PUT", f"/v1/readers/{keys['reader'][:10]}/quota", keys["other_owner"],
                json={"releases_per_day": 0}).status_code == 404
    assert call(server, "GET", "/v1/documents", keys["owner"]).json()["documents"][0]["id"] == "a"


@pytest.mark.parametrize("bad, code", [
    ({"text": ""}, 422),
    ({"text": " \n\t"}, 422),  # the schema's pattern: some text that is not whitespace
    ({"spans": [{"start": 0, "end": 500, "label": "PERSON"}]}, 400),
    ({"spans": [{"start": 9, "end": 9, "label": "PERSON"}]}, 400),
    ({"spans": [{"start": 8, "end": 19, "label": "NAME"}]}, 422),  # the schema's enum of labels
    ({"spans": [{"start": 8, "end": 19, "label": "PERSON", "colour": "red"}]}, 422),
])
def test_a_bad_document_is_a_clear_4xx_and_stores_nothing(vault, bad, code):
    server, keys, _ = vault
    before = call(server, "GET", "/v1/documents", keys["owner"]).json()
    reply = call(server, "POST", "/v1/documents", keys["owner"], json={**document("bad"), **bad})
    assert reply.status_code == code, reply.text
    assert not any(s in reply.text for s in SECRETS)
    assert call(server, "GET", "/v1/documents", keys["owner"]).json() == before


def test_bad_utf8_and_duplicates_are_refused_and_crlf_bom_map_through_the_layout(vault):
    server, keys, _ = vault
    surrogate = json.dumps(document("surrogate")).replace("Dear", "\\ud800ear").encode()
    reply = httpx.post(server.url + "/v1/documents", content=surrogate, timeout=60,
                       headers={**auth(keys["owner"]), "content-type": "application/json"})
    assert reply.status_code == 422 and reply.json()["error"]["code"] == "invalid_request"  # the schema's str
    assert "surrogate" not in {d["id"] for d in call(server, "GET", "/v1/documents", keys["owner"]).json()["documents"]}
    assert call(server, "POST", "/v1/documents", keys["owner"], json=document("a")).status_code == 409
    windows = "\ufeff" + LETTER.replace(", I", ",\r\nI")  # BOM and CRLF: spans count them
    crlf_spans = [{"start": 9, "end": 20, "label": "PERSON"}, {"start": 56, "end": 71, "label": "PERSON"}]
    assert windows[9:20] == "Helen Marsh" and windows[56:71] == "Tomas Lindqvist"
    stored = call(server, "POST", "/v1/documents", keys["owner"],
                  json={"id": "windows", "text": windows, "spans": crlf_spans})
    assert stored.status_code == 201, stored.text
    back = call(server, "GET", "/v1/documents/windows", keys["owner"]).json()
    assert back["text"] == windows and back["spans"] == crlf_spans
    assert rewrite(server, keys["reader"], "windows", max_new_tokens=4).status_code == 200
    log = server.log.read_text(errors="replace")
    assert not any(s in log for s in SECRETS)


def test_a_tagged_document_is_a_draft_until_the_owner_confirms_it(vault):
    server, keys, _ = vault
    reply = call(server, "POST", "/v1/documents", keys["owner"],
                 json={"id": "draft", "title": "tagged", "text": LETTER, "subject": SUBJECT})
    assert reply.status_code == 201 and reply.json()["state"] == "draft"
    owned = call(server, "GET", "/v1/documents/draft", keys["owner"]).json()
    assert owned["state"] == "draft" and owned["spans"]  # the tagger found the names
    assert "draft" not in {d["id"] for d in call(server, "GET", "/v1/documents", keys["reader"]).json()["documents"]}
    assert rewrite(server, keys["reader"], "draft").status_code == 404
    assert call(server, "POST", "/v1/documents/draft/confirm", keys["owner"]).status_code == 200
    assert "draft" in {d["id"] for d in call(server, "GET", "/v1/documents", keys["reader"]).json()["documents"]}
    assert rewrite(server, keys["reader"], "draft", max_new_tokens=4).status_code == 200


def test_a_stored_rewrite_is_returned_again_with_nothing_charged(vault):
    server, keys, _ = vault
    first = rewrite(server, keys["reader"], "b", max_new_tokens=8)
    assert first.status_code == 200 and first.json()["cached"] is False
    after_first = ledger(server, keys["owner"])
    assert unit(after_first, subject=SUBJECT)["spent"] > 0
    again = rewrite(server, keys["owner"], "b", max_new_tokens=8)
    assert again.status_code == 200 and again.json()["cached"] is True
    assert again.json()["text"] == first.json()["text"] and again.json()["report"] == first.json()["report"]
    events = stream_events(server, keys["reader"], "b", max_new_tokens=8)
    assert [n for n, _ in events] == ["token", "result"] and events[-1][1]["text"] == first.json()["text"]
    book = ledger(server, keys["owner"])
    assert book["units"] == after_first["units"] and book["releases"] == after_first["releases"]
    # replacing the document drops its stored rewrites: the same parameters make a new release
    body = {k: v for k, v in document("b").items() if k != "id"}
    assert call(server, "PUT", "/v1/documents/b", keys["owner"], json=body).status_code == 200
    assert rewrite(server, keys["reader"], "b", max_new_tokens=8).json()["cached"] is False


def test_a_document_id_in_the_path_is_bounded_as_in_the_body(vault):
    """PUT stores under the path's id: it is held to POST's 200 characters, refused before anything is stored."""
    server, keys, _ = vault
    body = {k: v for k, v in document("x").items() if k != "id"}
    long_id = "d" * 201
    assert call(server, "PUT", f"/v1/documents/{long_id}", keys["owner"], json=body).status_code == 422
    assert call(server, "GET", f"/v1/documents/{long_id}", keys["owner"]).status_code == 422
    assert all(d["id"] != long_id for d in call(server, "GET", "/v1/documents", keys["owner"]).json()["documents"])


def test_a_stream_checks_its_certificate_then_sends_tokens_then_the_result(vault):
    server, keys, _ = vault
    events = stream_events(server, keys["reader"], "a", max_new_tokens=10)
    names = [n for n, _ in events]
    assert names[-1] == "result" and set(names[:-1]) == {"token"}
    assert events[-1][1]["report"]["accounting"] == "filter"


def test_an_exhausted_unit_reads_the_public_text_and_the_release_goes_on(vault):
    server, keys, db = vault
    call(server, "POST", "/v1/documents", keys["owner"], json=document("spent-1", subject=None))
    rewrite(server, keys["reader"], "spent-1", max_new_tokens=3)  # creates the units
    book = ledger(server, keys["owner"])
    with sqlite3.connect(db) as conn:  # the subject's whole lifetime budget, spent
        conn.execute("UPDATE units SET spent = ? WHERE tenant = 'clinic' AND unit = ?",
                     (book["budget"], json.dumps(["subject", SUBJECT])))
    for id in ("a", "spent-1"):
        reply = rewrite(server, keys["reader"], id, max_new_tokens=5)
        assert reply.status_code == 200, reply.text
        assert [g["epsilon"] for g in reply.json()["report"]["groups"]] == [pytest.approx(RELEASE)] * 2
    after = unit(ledger(server, keys["owner"]), subject=SUBJECT)
    assert after["spent"] == book["budget"] and after["remaining"] == 0 and after["reserved"] == 0
    with sqlite3.connect(db) as conn:
        zero = conn.execute("SELECT reserved FROM reservations WHERE unit = ? ORDER BY release_id DESC LIMIT 2",
                            (json.dumps(["subject", SUBJECT]),)).fetchall()
    assert zero == [(0.0,), (0.0,)]


def test_a_readers_quota_refuses_it_before_anything_is_charged(vault):
    server, keys, _ = vault
    prefix = keys["limited"][:10]
    readers = call(server, "GET", "/v1/readers", keys["owner"]).json()["readers"]
    assert prefix in {r["prefix"] for r in readers}
    assert call(server, "PUT", f"/v1/readers/{prefix}/quota", keys["owner"],
                json={"releases_per_day": 1, "tokens_per_day": 10}).status_code == 200
    too_long = rewrite(server, keys["limited"], "a", max_new_tokens=11)
    assert too_long.status_code == 429 and too_long.json()["error"]["code"] == "quota_exceeded"
    assert rewrite(server, keys["limited"], "a", max_new_tokens=7).status_code == 200
    before = ledger(server, keys["owner"])
    refused = rewrite(server, keys["limited"], "a", max_new_tokens=2)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "quota_exceeded"
    assert ledger(server, keys["owner"]) == before
    assert rewrite(server, keys["limited"], "a", max_new_tokens=7).json()["cached"] is True  # free, within quota
    assert rewrite(server, keys["reader"], "a", max_new_tokens=2).status_code == 200  # another key's quota


def test_a_refused_parameter_charges_nothing(vault):
    server, keys, _ = vault
    before = ledger(server, keys["owner"])
    for params in ({"epsilon": 0.5}, {"epsilon": 3, "max_new_tokens": 17}):
        reply = call(server, "GET", "/v1/documents/a/rewrite", keys["reader"], params=params)
        assert reply.status_code == 400, reply.text
    assert call(server, "GET", "/v1/documents/a/rewrite", keys["reader"], params={"epsilon": -1}).status_code == 422
    assert ledger(server, keys["owner"]) == before  # their tickets, never reserved, leave no row


def test_old_keys_become_owner_keys(tmp_path):
    """A database made before roles: its keys are owners of their tenant after the migration."""
    from tokendp.service.db import open_db
    from tokendp.service.keys import authenticate, hash_key

    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.executescript("""CREATE TABLE tenants (name TEXT PRIMARY KEY, budget REAL NOT NULL, delta REAL NOT NULL,
        created TEXT NOT NULL);
        CREATE TABLE api_keys (key_hash TEXT PRIMARY KEY, prefix TEXT NOT NULL, tenant TEXT NOT NULL REFERENCES
        tenants(name), created TEXT NOT NULL);
        INSERT INTO tenants VALUES ('t', 5.0, 1e-5, 'then');""")
    conn.execute("INSERT INTO api_keys VALUES (?, 'tdp_old', 't', 'then')", (hash_key("tdp_old-key"),))
    conn.commit()
    conn.close()
    found = authenticate(open_db(db), "tdp_old-key")
    assert found.role == "owner" and found.tenant.name == "t"
    assert authenticate(open_db(db), "tdp_old-key").role == "owner"  # idempotent


def test_a_reader_has_its_own_rate_window(tmp_path):
    """A reader at its rate limit does not stall its owner (owners share the tenant's window)."""
    db = tmp_path / "rate.db"
    owner, reader = make_keys(db, "clinic", "owner", "reader")
    server = Server(db, tmp_path / "server.log", "--rate-limit", "3").start()
    try:
        codes = [call(server, "GET", "/v1/documents", reader).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        assert call(server, "GET", "/v1/documents", owner).status_code == 200
    finally:
        server.stop()
