"""The PostgreSQL backend of the service's database (docs/service.md, "Several hosts"): the CLI
on a ``postgresql://`` DSN, a password that never appears in a message, and the same ledger
arithmetic as SQLite (the vault's process tests run on both: tests/service/test_vault_processes.py)."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from tests.service.postgres import fresh_database, postgres_server  # noqa: F401 (a fixture)
from tokendp.cli import main
from tokendp.service.db import describe


def test_a_dsns_password_is_masked_wherever_the_database_is_named():
    assert describe("postgresql://vault:s3cr%40t@db.internal:5432/tokendp") == "postgresql://vault:***@db.internal:5432/tokendp"
    assert describe("postgres://db.internal/tokendp?password=s3cret&sslmode=require") == \
        "postgres://db.internal/tokendp?password=***&sslmode=require"
    assert describe("postgresql://vault@db.internal/tokendp") == "postgresql://vault@db.internal/tokendp"
    assert describe("/var/lib/tokendp/service.db") == "/var/lib/tokendp/service.db"


def test_a_refused_connection_names_the_database_without_its_password(postgres_server):
    wrong = postgres_server.dsn().replace(postgres_server.password, "not-the-password-42")
    result = CliRunner().invoke(main, ["keys", "list", "--db", wrong])
    assert result.exit_code == 3 and "cannot connect to the database" in result.output  # bad input
    assert "not-the-password-42" not in result.output and "***" in result.output and "Traceback" not in result.output


def test_keys_and_the_vault_cli_on_postgresql(postgres_server, tmp_path):
    dsn = fresh_database(postgres_server)
    run = lambda *args: CliRunner().invoke(main, [*args, "--db", dsn])  # noqa: E731
    created = run("keys", "create", "--tenant", "clinic", "--budget", "4")
    assert created.exit_code == 0, created.output
    assert run("keys", "create", "--tenant", "clinic", "--role", "reader").exit_code == 0
    listed = json.loads(run("keys", "list", "--json").output)
    assert [(k["tenant"], k["role"], k["budget"]) for k in listed] == [("clinic", "owner", 4.0), ("clinic", "reader", 4.0)]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d1", "title": "a letter", "text": "Dear Dr Helen Marsh, hello.",
                                  "spans": [{"start": 8, "end": 19, "label": "PERSON", "subject": "dr-marsh"}]}) + "\n")
    added = run("vault", "add", str(corpus), "--tenant", "clinic")
    assert added.exit_code == 0, added.output
    assert run("keys", "revoke", listed[1]["prefix"]).exit_code == 0
    assert postgres_server.password not in created.output + added.output


def test_floats_keep_double_precision_on_postgresql(postgres_server):
    """The ledger's values are float64 rounded in the safe direction: PostgreSQL's REAL
    (float32) would round them either way."""
    from tokendp.service.db import open_db

    conn = open_db(fresh_database(postgres_server))
    value = 1 / 3
    with conn.write():
        conn.execute("INSERT INTO tenants (name, budget, delta, created) VALUES (?, ?, ?, ?)", ("t", value, 1e-5, "now"))
        conn.execute("INSERT INTO units (tenant, unit, spent) VALUES (?, ?, ?)", ("t", "u", math.nextafter(value, 1)))
    assert conn.execute("SELECT budget FROM tenants").fetchone()["budget"] == value
    assert conn.execute("SELECT spent FROM units").fetchone()[0] == math.nextafter(value, 1)
    conn.close()


def test_a_connection_lost_to_a_database_restart_is_opened_again(postgres_server):
    """Each thread's connection is reopened when PostgreSQL dropped it (a restart, a failover)."""
    import psycopg

    from tokendp.service.store import BudgetStore

    dsn = fresh_database(postgres_server)
    store = BudgetStore(dsn)
    first = store.conn
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                      (dsn.rsplit("/", 1)[1],))
    with pytest.raises(psycopg.OperationalError):
        first.execute("SELECT 1").fetchone()
    assert first.broken and store.conn is not first
    assert store.conn.execute("SELECT COUNT(*) AS n FROM tenants").fetchone()["n"] == 0
