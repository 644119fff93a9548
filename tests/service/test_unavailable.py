"""A model that fails to load: /healthz says so and every job answers 503 model_unavailable."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from tests.service.conftest import auth, make_key  # noqa: E402
from tokendp.service.app import create_app  # noqa: E402


def test_a_model_that_fails_to_load_gives_503_and_charges_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    db = tmp_path / "s.db"
    key = make_key(db, "acme", 10.0)
    with TestClient(create_app(db, model=str(tmp_path / "no-such-model"))) as client:
        for _ in range(600):
            if client.get("/healthz").json()["status"] != "loading":
                break
            time.sleep(0.1)
        assert client.get("/healthz").json()["status"] == "error"
        reply = client.post("/v1/sanitize", json={"id": "d", "text": "Dear Dr Helen Marsh", "epsilon": 1},
                            headers=auth(key))
        assert reply.status_code == 503 and reply.json()["error"]["code"] == "model_unavailable"
        assert client.get("/v1/budget", headers=auth(key)).json()["units"] == []
