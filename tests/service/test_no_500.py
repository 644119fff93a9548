"""No 500 on either database (issue 46): the inputs that reached SQLite or PostgreSQL as values
they cannot hold (an integer past the column, NUL in a string) are refused by the request
models, as the OpenAPI document states, before anything is read, planned or counted: 4xx with
the error body, on SQLite and PostgreSQL alike. (The schemathesis run of
tests/service/test_openapi_contract.py tries the rest on both.)"""

from __future__ import annotations

import pytest

from tests.service.conftest import LETTER, auth
from tests.service.postgres import postgres_server, vault_db  # noqa: F401 (fixtures)
from tests.service.vault.helpers import SPANS, make_keys

pytest.importorskip("fastapi", reason="the serve extra is not installed")

TOO_MANY = (2**63, 10**30, 3_000_000_000, 2**31)  # past int64, far past, past PostgreSQL's INTEGER


def cases(prefix: str) -> list[tuple[str, str, str, dict]]:
    """(method, path, role, request) that each must be refused with a 4xx."""
    out = []
    for t in TOO_MANY:
        out += [("GET", "/v1/documents/d1/rewrite", "reader", {"params": {"epsilon": 6, "max_new_tokens": t}}),
                ("POST", "/v1/ask", "reader", {"json": {"question": "patient", "epsilon": 6, "max_new_tokens": t}}),
                ("POST", "/v1/sanitize", "owner", {"json": {"id": "x", "text": LETTER, "spans": [], "epsilon": 6,
                                                            "max_new_tokens": t}}),
                ("PUT", f"/v1/readers/{prefix}/quota", "owner", {"json": {"releases_per_day": t}}),
                ("PUT", f"/v1/readers/{prefix}/quota", "owner", {"json": {"tokens_per_day": t}})]
    nul = "x\u0000"
    return out + [
        ("POST", "/v1/ask", "reader", {"json": {"question": "patient", "epsilon": 6, "documents": [nul]}}),
        ("POST", "/v1/documents", "owner", {"json": {"id": "d2", "text": "a\u0000b", "spans": []}}),
        ("POST", "/v1/documents", "owner", {"json": {"id": "d3", "text": "ab", "title": nul, "spans": []}}),
        ("POST", "/v1/documents", "owner", {"json": {"id": "d4", "text": "ab", "subject": nul, "spans": []}}),
        ("POST", "/v1/documents", "owner", {"json": {"id": "d5", "text": LETTER, "spans": [{**SPANS[0], "subject": nul}]}}),
        ("PUT", "/v1/documents/d6", "owner", {"json": {"text": "a\u0000b", "spans": []}}),
        ("GET", "/v1/budget?id=x%00", "owner", {}),
        ("PUT", "/v1/readers/x%00/quota", "owner", {"json": {"releases_per_day": 1}}),
        ("DELETE", "/v1/documents/x%00", "owner", {}),
        ("POST", "/v1/sanitize", "owner", {"json": {"id": nul, "text": LETTER, "spans": [], "epsilon": 6}}),
        ("POST", "/v1/sanitize", "owner", {"json": {"id": "x", "text": LETTER, "epsilon": 6,
                                                    "spans": [{"start": 8, "end": 19, "label": "P\u0000"}]}}),
        ("POST", "/v1/generate", "owner", {"json": {"id": nul, "prompt": "hi", "context": LETTER, "spans": [],
                                                    "epsilon": 6}}),
        ("POST", "/v1/synthesize", "owner", {"json": {"id": nul, "references": ["a b c"], "epsilon": 6,
                                                      "batch_size": 1, "max_tokens": 2}}),
    ]


def test_values_no_column_can_hold_are_refused_on_both_databases(vault_db):
    from fastapi.testclient import TestClient

    from tokendp.service.app import create_app
    from tokendp.service.limits import Limits

    owner, reader = make_keys(vault_db, "clinic", "owner", "reader", budget=8.0)
    keys = {"owner": auth(owner), "reader": auth(reader)}
    app = create_app(vault_db, model="tiny", tagger="patterns", limits=Limits(max_new_tokens=8))
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.post("/v1/documents", json={"id": "d1", "text": LETTER, "spans": SPANS},
                           headers=keys["owner"]).status_code == 201
        prefix = client.get("/v1/readers", headers=keys["owner"]).json()["readers"][0]["prefix"]
        answered = [(client.request(method, path, headers=keys[role], **request), method, path, request)
                    for method, path, role, request in cases(prefix)]
        book = client.get("/v1/ledger", headers=keys["owner"]).json()
    wrong = [(r.status_code, method, path, request) for r, method, path, request in answered
             if not 400 <= r.status_code < 500 or "error" not in r.json()]
    assert wrong == []
    assert book["releases"] == {} and book["units"] == []  # nothing was ticketed, reserved or charged
