"""The PostgreSQL backend of the service's database (docs/service.md, "Several hosts"): the CLI
on a ``postgresql://`` DSN, a password that never appears in a message, and the same ledger
arithmetic as SQLite (the vault's process tests run on both: tests/service/vault/test_processes.py)."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from tests.service.postgres import fresh_database, postgres_server  # noqa: F401 (a fixture)
from tokendp.cli import main
from tokendp.service.db.connection import describe


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


def test_a_transaction_rolled_back_as_a_deadlock_victim_or_a_serialization_failure_runs_again(monkeypatch):
    """The retry itself (tokendp.service.db.connection.retried): bounded, for those two failures only, with
    a growing wait; SQLite never retries."""
    errors = pytest.importorskip("psycopg.errors", reason="PostgreSQL tests need psycopg 3")
    from tokendp.service.db import postgres as db_postgres
    from tokendp.service.db.connection import retried
    from tokendp.service.db.sqlite import SQLiteConnection

    waits = []
    monkeypatch.setattr(db_postgres.time, "sleep", waits.append)

    class Store:
        conn = db_postgres.PostgresConnection(raw=None)

        def __init__(self, *failures: Exception) -> None:
            self.failures, self.runs = list(failures), 0

        @retried
        def write(self) -> str:
            self.runs += 1
            if self.failures:
                raise self.failures.pop(0)
            return "committed"

    store = Store(errors.DeadlockDetected("deadlock detected"), errors.SerializationFailure("could not serialize"))
    assert store.write() == "committed" and store.runs == 3
    assert len(waits) == 2 and 0 < waits[0] <= db_postgres.BACKOFF_S < waits[1] <= 2 * db_postgres.BACKOFF_S
    doomed = Store(*[errors.DeadlockDetected("deadlock detected")] * db_postgres.ATTEMPTS)
    with pytest.raises(errors.DeadlockDetected):
        doomed.write()
    assert doomed.runs == db_postgres.ATTEMPTS
    other = Store(errors.UniqueViolation("duplicate key"))
    with pytest.raises(errors.UniqueViolation):
        other.write()
    assert other.runs == 1
    assert not SQLiteConnection(raw=None).retry(errors.DeadlockDetected("deadlock detected"), 1)


def test_a_reservation_rolled_back_by_a_real_deadlock_runs_again_and_reserves(postgres_server, monkeypatch):
    """Another client of the database holds a unit's row, then asks for the tenant's row that a
    reservation holds while it waits for the unit: a cycle, which PostgreSQL breaks by rolling the
    reservation back (its deadlock_timeout is the shorter). The reservation runs again once the
    other client is done, and reserves; before, the release failed."""
    import threading
    import time
    from types import SimpleNamespace

    import psycopg

    from tokendp.service.db.postgres import PostgresConnection
    from tokendp.service.keys import authenticate, create_key
    from tokendp.service.store import BudgetStore
    from tokendp.service.vault.units import unit_key
    from tokendp.service.vault.store import VaultStore

    dsn = fresh_database(postgres_server)
    name, unit = dsn.rsplit("/", 1)[1], unit_key("d1", "PERSON", "patient-7")
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} SET deadlock_timeout = '300ms'")
    store = BudgetStore(dsn)
    vault = VaultStore(lambda: store.conn)
    key, _ = create_key(store.conn, "clinic", budget=4.0, role="reader")
    caller = authenticate(store.conn, key)
    ticket = vault.ticket(caller, SimpleNamespace(id="d1", version="v1"), "{}", [unit], 4)
    store.conn.execute("INSERT INTO units (tenant, unit, spent) VALUES (?, ?, 0)", ("clinic", unit))
    retried, real = [], PostgresConnection.retry
    monkeypatch.setattr(PostgresConnection, "retry",
                        lambda self, error, attempt: (retried.append(type(error).__name__), real(self, error, attempt))[1])

    other = psycopg.connect(dsn)  # one transaction, from its first statement to its commit
    other.execute("SET deadlock_timeout = '60s'")
    other.execute("SELECT 1 FROM units WHERE tenant = 'clinic' AND unit = %s FOR UPDATE", (unit,))
    result = {}
    reserving = threading.Thread(target=lambda: result.update(taken=vault.reserve(caller, ticket, 4, [unit], 0.5)))
    reserving.start()
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        deadline = time.monotonic() + 30
        while not admin.execute("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
                                (name,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the reservation never waited for the unit's row"
            time.sleep(0.02)
    other.execute("SELECT 1 FROM vaults WHERE tenant = 'clinic' FOR UPDATE")  # returns once the reservation rolled back
    other.commit()
    reserving.join(timeout=60)
    other.close()
    assert retried == ["DeadlockDetected"]
    assert result["taken"].release == ticket and set(result["taken"].units) == {unit}
    assert vault.ledger(caller.tenant)["releases"] == {"open": 1}
