"""A served vault for the retrievers' tests: ``tokendp serve``'s app on the tiny model, an owner and a
reader key of one tenant, two confirmed documents."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import pytest

# Presidio's e-mail recogniser uses tldextract, which would fetch the public suffix list when it is
# imported; empty: its bundled snapshot, offline (docs/integrations.md, "Presidio").
os.environ.setdefault("TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS", "")

from tests.service.conftest import LETTER

NOTE = "The patient was admitted to St James's University Hospital on 2 June 2024 with chest pain."
DOCUMENTS = [
    {"id": "letter-1", "title": "Discharge letter", "text": LETTER, "subject": "patient-7",
     "spans": [{"start": 8, "end": 19, "label": "PERSON"}, {"start": 54, "end": 69, "label": "PERSON"},
               {"start": 83, "end": 94, "label": "DATE"}]},
    {"id": "note-7", "title": "Admission note", "text": NOTE, "subject": "patient-7",
     "spans": [{"start": 28, "end": 58, "label": "ORG"}, {"start": 62, "end": 73, "label": "DATE"}]},
]
SECRETS = ("Helen", "Marsh", "Tomas", "Lindqvist", "patient-7")


@dataclass(frozen=True)
class Vault:
    url: str
    owner: str
    reader: str


@pytest.fixture(scope="session")
def vault(tmp_path_factory):
    """The app in this process (uvicorn on a thread: no second interpreter to import torch)."""
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    httpx = pytest.importorskip("httpx")
    import uvicorn

    from tests.service.conftest import auth, free_port
    from tests.service.vault.helpers import make_keys
    from tokendp.service.app import create_app
    from tokendp.service.limits import Limits

    db = tmp_path_factory.mktemp("vault") / "service.db"
    owner, reader = make_keys(db, "clinic", "owner", "reader")  # lifetime epsilon 4: alpha 5
    app = create_app(db, model="tiny", limits=Limits(max_new_tokens=32, requests_per_minute=1000))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.config.port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=2).json()["status"] == "ok":
                break
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    else:
        pytest.fail("the vault did not become healthy")
    for doc in DOCUMENTS:
        reply = httpx.post(url + "/v1/documents", json=doc, headers=auth(owner), timeout=60)
        assert reply.status_code == 201, reply.text
    yield Vault(url, owner, reader)
    server.should_exit = True
    thread.join(timeout=30)


@pytest.fixture
def reader_env(vault, monkeypatch):
    """The reader's key and the server's address where the retrievers read them."""
    monkeypatch.setenv("TOKENDP_KEY", vault.reader)
    monkeypatch.setenv("TOKENDP_URL", vault.url)
    return vault
