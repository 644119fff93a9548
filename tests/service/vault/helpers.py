"""Shared by the vault's HTTP tests: a tenant with owner and reader keys, documents about one
subject, and calls."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.service.conftest import LETTER, auth, sse_events

LIFETIME = 4.0  # the tenant's lifetime epsilon per unit (alpha 5, B about 1.75 at delta 1e-5)
RELEASE = 3.0  # one release's epsilon per unit (B_rel about 1.24): two releases cannot both take it in full
SUBJECT = "patient-7"
# "Tomas Lindqvist" in LETTER, about SUBJECT; "Helen Marsh" without a subject: the unit (document, PERSON).
SPANS = [{"start": 8, "end": 19, "label": "PERSON"}, {"start": 54, "end": 69, "label": "PERSON", "subject": SUBJECT}]
SECRETS = ("Helen", "Marsh", "Tomas", "Lindqvist", SUBJECT)


def make_keys(db: Path, tenant: str, *roles: str, budget: float = LIFETIME) -> list[str]:
    from tokendp.service.db import open_db
    from tokendp.service.keys import create_key

    conn = open_db(db)
    try:
        return [create_key(conn, tenant, budget=budget, role=role)[0] for role in roles]
    finally:
        conn.close()


def document(id: str, title: str = "", **extra) -> dict:
    return {"id": id, "title": title or f"letter {id}", "text": LETTER, "spans": SPANS, **extra}


def call(server, method: str, path: str, key: str, **kw) -> httpx.Response:
    return httpx.request(method, server.url + path, headers=auth(key), timeout=180, **kw)


def rewrite(server, key: str, id: str, **params) -> httpx.Response:
    return call(server, "GET", f"/v1/documents/{id}/rewrite", key, params={"epsilon": RELEASE, **params})


def ledger(server, owner: str) -> dict:
    reply = call(server, "GET", "/v1/ledger", owner)
    assert reply.status_code == 200, reply.text
    return reply.json()


def unit(book: dict, **which) -> dict | None:
    return next((u for u in book["units"] if all(u.get(k) == v for k, v in which.items())), None)


def stream_events(server, key: str, id: str, **params) -> list[tuple[str, dict]]:
    with httpx.stream("GET", server.url + f"/v1/documents/{id}/rewrite", headers=auth(key), timeout=180,
                      params={"epsilon": RELEASE, "stream": "true", **params}) as r:
        assert r.status_code == 200, r.read()
        return sse_events(r)


def tiny_vault_worker(tmp_path: Path, ids: tuple[str, ...]):
    """A worker (not started) on the tiny model over a fresh vault holding the confirmed
    documents ``ids``, and a reader of its tenant: (worker, vault, caller, store)."""
    from tokendp.backends import load_backend
    from tokendp.service.batching import Worker
    from tokendp.service.keys import authenticate, create_key
    from tokendp.service.store import BudgetStore
    from tokendp.service.vault.store import VaultStore

    store = BudgetStore(tmp_path / "service.db")
    vault = VaultStore(lambda: store.conn)
    key, tenant = create_key(store.conn, "clinic", budget=4.0, role="reader")
    for id in ids:
        vault.put(tenant, document(id), state="confirmed", create=True)
    worker = Worker(lambda: (load_backend("tiny"), None), store, max_tokens=32, vault=vault)
    return worker, vault, authenticate(store.conn, key), store
