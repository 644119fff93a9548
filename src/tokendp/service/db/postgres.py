"""The PostgreSQL backend of :mod:`tokendp.service.db`: server processes on several hosts share
one vault (``--db postgresql://user:password@host:5432/dbname``; the ``postgres`` extra installs
psycopg 3).

Transactions run at READ COMMITTED. A transaction whose decision must see one state (a
reservation reads a unit's spend and open tickets, then writes) first locks the rows that
state lives in with ``SELECT ... FOR NO KEY UPDATE`` (:meth:`PostgresConnection.lock`), in
the one global order of :mod:`tokendp.service.db`; every statement after the lock sees every
transaction committed before it, and no other transaction can change those rows until this one
ends. That gives the reservations the semantics SQLite's database-wide write lock gives them,
without serialising unrelated units. ``FOR NO KEY UPDATE`` leaves foreign-key checks (which
take ``FOR KEY SHARE``) free, so inserting a release never waits for a tenant's lock.

A store method whose transaction PostgreSQL rolls back as a deadlock victim or a serialization
failure runs again (:func:`tokendp.service.db.connection.retried`), at most :data:`ATTEMPTS` times in all,
after a jittered wait that doubles from :data:`BACKOFF_S`, which lets the transaction it collided
with finish. Any other error, and the last attempt's, reaches the caller as before.

The schema is created and migrated under a transaction-scoped advisory lock, so that several
processes starting at once create each table and column, and rewrite the data of each
:data:`~tokendp.service.db.schema.DATA_MIGRATIONS`, once, and only when a read finds something
missing: DDL locks whole tables even when it has nothing to do, and a connection
opened beside running releases (a new thread, a new process) must not wait on them or make
them wait. Floats are ``DOUBLE PRECISION``
(the ledger's values are float64 rounded in the safe direction; ``REAL`` would be float32).
The DSN's password never reaches an error message or a log (:func:`tokendp.service.db.connection.describe`).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tokendp.errors import InvalidInputError
from tokendp.service.db.connection import Connection, describe
from tokendp.service.db.schema import DATA_MIGRATIONS, MIGRATIONS, schema

CLOCK = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)"
ATTEMPTS = 5  # runs of a transaction rolled back as a deadlock victim or a serialization failure
BACKOFF_S = 0.02  # the wait before the second run; it doubles for each run after, times a random 0.5-1
SCHEMA_LOCK = 0x746F6B64  # "tokd": pg_advisory_xact_lock's key while the schema is made


class Row(dict):
    """A row by column name (``row["spent"]``, ``dict(row)``) or by position (``row[0]``), as
    :class:`sqlite3.Row` gives it."""

    def __getitem__(self, key):
        if isinstance(key, int):
            return list(self.values())[key]
        return super().__getitem__(key)


def _rows(cursor):
    names = [c.name for c in cursor.description] if cursor.description else []
    return lambda values: Row(zip(names, values))


def _sql(sql: str) -> str:
    """``?`` parameters as psycopg's ``%s`` (a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class PostgresConnection(Connection):
    backend = "postgresql"
    clock = CLOCK

    def __init__(self, raw) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Sequence[Any] = ()):
        return self.raw.execute(_sql(sql), tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self.raw.cursor() as cur:
            cur.executemany(_sql(sql), [tuple(r) for r in rows])

    def insert(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.raw.execute(_sql(sql + " RETURNING id"), tuple(params)).fetchone()["id"]

    @contextmanager
    def write(self) -> Iterator[PostgresConnection]:
        with self.raw.transaction():
            yield self

    def lock(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.raw.execute(_sql(sql + " FOR NO KEY UPDATE"), tuple(params)).fetchall()

    def close(self) -> None:
        self.raw.close()

    @property
    def broken(self) -> bool:
        return self.raw.broken or self.raw.closed

    def retry(self, error: BaseException, attempt: int) -> bool:
        from psycopg import errors

        if attempt >= ATTEMPTS or not isinstance(error, (errors.DeadlockDetected, errors.SerializationFailure)):
            return False
        time.sleep(BACKOFF_S * 2 ** (attempt - 1) * random.uniform(0.5, 1.0))
        return True


def open_postgres(dsn: str) -> PostgresConnection:
    """A connection in autocommit mode (transactions are explicit), schema created."""
    from tokendp._optional import require

    psycopg = require("psycopg", "postgres", "tokendp serve --db postgresql://...")
    try:
        raw = psycopg.connect(dsn, autocommit=True, row_factory=_rows)
    except psycopg.Error as err:
        reason = str(err).replace(dsn, describe(dsn)).strip().splitlines()[0] if str(err).strip() else ""
        password = _password(dsn)
        if password:
            reason = reason.replace(password, "***")
        raise InvalidInputError(f"cannot connect to the database {describe(dsn)}: {reason or type(err).__name__}") \
            from None
    conn = PostgresConnection(raw)
    statements = schema(real="DOUBLE PRECISION", id="BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")
    if _missing(conn, statements):  # DDL locks whole tables even when it has nothing to do: only if needed
        with conn.write():
            conn.execute(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})")
            tables = {t for t, _ in _columns(conn)}
            for statement in statements:
                raw.execute(statement)
            have = _columns(conn)
            for table, column, definition in MIGRATIONS:
                if (table, column) not in have:
                    raw.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
            for table, run in DATA_MIGRATIONS:
                if tables and table not in tables:  # once: the transaction that creates its table
                    run(conn)
    return conn


def _columns(conn: PostgresConnection) -> set[tuple[str, str]]:
    rows = conn.execute("SELECT table_name, column_name FROM information_schema.columns "
                        "WHERE table_schema = current_schema()").fetchall()
    return {(r["table_name"], r["column_name"]) for r in rows}


def _missing(conn: PostgresConnection, statements: list[str]) -> bool:
    """Whether a table, index or migrated column of the schema is missing (a read, no lock)."""
    tables = {m for s in statements for m in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", s)}
    indexes = {m for s in statements for m in re.findall(r"CREATE INDEX IF NOT EXISTS (\w+)", s)}
    columns = _columns(conn)
    have_indexes = {r["indexname"] for r in conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()").fetchall()}
    return not (tables <= {t for t, _ in columns} and indexes <= have_indexes
                and all((t, c) in columns for t, c, _ in MIGRATIONS))


def _password(dsn: str) -> str | None:
    try:
        from psycopg.conninfo import conninfo_to_dict

        return conninfo_to_dict(dsn).get("password")
    except Exception:  # an unparsable DSN: psycopg's own error says so
        return None
