"""``tokendp keys create`` and ``tokendp serve`` from the command line (the server itself is
tested in tests/service)."""

from __future__ import annotations

import json
import sqlite3
import sys

import pytest
from click.testing import CliRunner

from tokendp.cli import main
from tokendp.cli._exit import EXIT_BAD_INPUT, EXIT_MISSING_EXTRA


def test_keys_create_prints_the_key_once_and_stores_only_its_hash(tmp_path):
    db = tmp_path / "s.db"
    result = CliRunner().invoke(main, ["keys", "create", "--tenant", "clinic", "--budget", "12", "--db", str(db)])
    assert result.exit_code == 0, result.output
    key = result.stdout.strip()
    assert key.startswith("tdp_") and "budget epsilon 12" in result.stderr
    rows = sqlite3.connect(db).execute("SELECT budget, delta FROM tenants WHERE name = 'clinic'").fetchall()
    assert rows == [(12.0, 1e-5)]
    assert all(key.encode() not in f.read_bytes() for f in tmp_path.iterdir())


def test_a_tenants_budget_cannot_be_changed_by_creating_a_key(tmp_path):
    db = str(tmp_path / "s.db")
    assert CliRunner().invoke(main, ["keys", "create", "--tenant", "clinic", "--db", db]).exit_code == 0
    again = CliRunner().invoke(main, ["keys", "create", "--tenant", "clinic", "--budget", "99", "--db", db])
    assert again.exit_code == 2 and "fixed" in again.output


def test_keys_are_listed_by_prefix_and_revoked_while_the_budget_stays(tmp_path):
    from tokendp.service.db import open_db
    from tokendp.service.keys import authenticate

    db = str(tmp_path / "s.db")
    run = lambda *args: CliRunner().invoke(main, ["keys", *args, "--db", db])  # noqa: E731
    first, second = run("create", "--tenant", "clinic", "--budget", "12").stdout.strip(), \
        run("create", "--tenant", "clinic").stdout.strip()
    listed = run("list", "--json")
    assert listed.exit_code == 0 and first not in listed.output and second not in listed.output
    assert [(k["prefix"], k["tenant"], k["budget"]) for k in json.loads(listed.output)] == [
        (first[:10], "clinic", 12.0), (second[:10], "clinic", 12.0)]
    assert first[:10] in run("list").output
    revoked = run("revoke", first[:10])
    assert revoked.exit_code == 0 and "clinic" in revoked.output
    conn = open_db(db)
    assert authenticate(conn, first) is None and authenticate(conn, second).tenant.budget == 12.0
    again = run("revoke", first[:10])
    assert again.exit_code == 2 and "no key has the prefix" in again.output


def test_a_database_in_a_missing_folder_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(main, ["keys", "create", "--tenant", "clinic", "--db", str(tmp_path / "no" / "s.db")])
    assert result.exit_code == EXIT_BAD_INPUT and "folder does not exist" in result.output and "Traceback" not in result.output


def test_serve_without_the_serve_extra_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "fastapi", None)
    result = CliRunner().invoke(main, ["serve", "--db", str(tmp_path / "s.db")])
    assert result.exit_code == EXIT_MISSING_EXTRA and 'pip install "tokendp[serve]"' in result.output


@pytest.mark.parametrize("args, status", [([], 404), (["--docs"], 200)])
def test_serve_offers_the_swagger_ui_only_with_docs(tmp_path, monkeypatch, args, status):
    uvicorn = pytest.importorskip("uvicorn", reason="the serve extra is not installed")
    pytest.importorskip("httpx", reason="the service tests need httpx (the dev extra)")
    client = pytest.importorskip("fastapi.testclient", reason="the serve extra is not installed")
    served = []
    def run(server, sockets=None):
        served.append(server.config.app)
        server.started = True

    monkeypatch.setattr(uvicorn.Server, "run", run)
    # uvicorn.Config points logging's handlers at sys.stderr, which is CliRunner's stream here and
    # is closed when the command returns: a later log record would write to a closed file
    monkeypatch.setattr(uvicorn.Config, "configure_logging", lambda self: None)
    result = CliRunner().invoke(main, ["serve", "--db", str(tmp_path / "s.db"), *args])
    assert result.exit_code == 0, result.output
    docs = client.TestClient(served[0]).get("/docs")
    assert docs.status_code == status and (status == 404 or "swagger-ui" in docs.text)
