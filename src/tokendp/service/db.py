"""The service's database: one small interface, two backends.

``--db`` names either a SQLite file (the embedded default, :mod:`tokendp.service.db_sqlite`: one
host, any number of server processes on the file) or a PostgreSQL server
(``postgresql://user:password@host/db``, :mod:`tokendp.service.db_postgres`: server processes
on several hosts sharing one vault). Both hold the same tables (:data:`SCHEMA`), created and
migrated when a connection opens, and the stores (:mod:`tokendp.service.store`,
:mod:`tokendp.service.vault_store`, :mod:`tokendp.service.keys`) run the same portable SQL on
both through :class:`Connection`:

- ``?`` parameters (PostgreSQL's ``%s`` is the backend's business), rows by column name;
- :meth:`Connection.write`: a transaction that commits on success and rolls back on any
  exception. SQLite takes its database-wide write lock at ``BEGIN IMMEDIATE``, so every write
  transaction runs alone; PostgreSQL runs them at READ COMMITTED side by side, and a
  transaction whose check and write must see one state locks the rows that state lives in
  first, with :meth:`Connection.lock` (``SELECT ... FOR NO KEY UPDATE``; a no-op on SQLite).
  Every transaction takes its locks in one global order (a tenant's row, then units rows by
  key, then release rows), so two transactions never wait for each other in a cycle;
- :meth:`Connection.insert` (the new row's id: ``lastrowid`` or ``RETURNING id``);
- :attr:`Connection.clock`, the database's own clock in seconds (leases are measured on it, so
  hosts need not agree on the time);
- :func:`retried`: a store method whose transaction PostgreSQL rolled back as a deadlock victim or
  a serialization failure runs again, a bounded number of times (:meth:`Connection.retry`). The
  lock order makes a deadlock between tokendp's own transactions impossible and READ COMMITTED
  raises no serialization failure; the retry covers what the order cannot see (another client of
  the database, a foreign key's lock, a future isolation level) rather than failing the request.

A PostgreSQL DSN carries a password: :func:`describe` masks it wherever the target is named
(errors and logs never show it).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    name TEXT PRIMARY KEY,
    budget {real} NOT NULL,        -- lifetime epsilon per protected unit
    delta {real} NOT NULL,         -- the delta that budget refers to
    created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    key_hash TEXT PRIMARY KEY,     -- sha256 of the key; the key itself is never stored
    prefix TEXT NOT NULL,          -- the first characters, to tell keys apart in listings
    tenant TEXT NOT NULL REFERENCES tenants(name),
    created TEXT NOT NULL
    -- role, releases_per_day, tokens_per_day: added by MIGRATIONS
);
CREATE TABLE IF NOT EXISTS requests (
    id {id},
    tenant TEXT NOT NULL REFERENCES tenants(name),
    kind TEXT NOT NULL,            -- sanitize | synthesize | generate
    state TEXT NOT NULL,           -- reserved | spent | failed | cancelled | interrupted (all count as spent) | void
    created TEXT NOT NULL,
    finished TEXT
);
CREATE TABLE IF NOT EXISTS charges (
    request_id BIGINT NOT NULL REFERENCES requests(id),
    tenant TEXT NOT NULL,
    document TEXT NOT NULL,        -- the client's document (or reference set) id
    grp TEXT NOT NULL,             -- the privacy group
    kind TEXT NOT NULL,            -- rdp | zcdp (service.composition.Charge)
    alpha {real},
    value {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS charges_unit ON charges(tenant, document, grp);
CREATE TABLE IF NOT EXISTS vaults (
    tenant TEXT PRIMARY KEY REFERENCES tenants(name),
    alpha {real} NOT NULL,         -- the vault's Renyi order, fixed at its first use
    budget {real} NOT NULL,        -- every unit's lifetime RDP budget B at alpha
    created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    tenant TEXT NOT NULL REFERENCES tenants(name),
    id TEXT NOT NULL,
    version TEXT NOT NULL,         -- random per write: a rewrite is cached per version
    title TEXT NOT NULL,           -- public: readers see it
    text TEXT NOT NULL,            -- private: only owner keys read it
    spans TEXT NOT NULL,           -- JSON [{{start, end, label, subject?}}], offsets into text as given
    subject TEXT,                  -- the default subject of spans without one
    state TEXT NOT NULL,           -- draft (tagged by the server, to confirm) | confirmed
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE TABLE IF NOT EXISTS units (
    tenant TEXT NOT NULL REFERENCES tenants(name),
    unit TEXT NOT NULL,            -- service.units.unit_key: a subject, or (document, label)
    spent {real} NOT NULL,         -- committed spend, an upper bound of the exact charges
    PRIMARY KEY (tenant, unit)
);
CREATE TABLE IF NOT EXISTS releases (
    id {id},                       -- a release's ticket: its place in the tenant's arrival order
    tenant TEXT NOT NULL REFERENCES tenants(name),
    document TEXT NOT NULL,
    version TEXT NOT NULL,
    params TEXT NOT NULL,          -- canonical JSON of the release's public parameters
    reader TEXT NOT NULL,          -- the asking key's hash (quotas)
    tokens INTEGER NOT NULL,       -- T, counted against the key's tokens per day (0 until planned)
    state TEXT NOT NULL,           -- waiting | open (reserved) | done | failed | expired | void
    created TEXT NOT NULL,
    finished TEXT
    -- holder: added by MIGRATIONS
);
CREATE INDEX IF NOT EXISTS releases_reader ON releases(reader, created);
CREATE TABLE IF NOT EXISTS reservations (
    release_id BIGINT NOT NULL REFERENCES releases(id),
    tenant TEXT NOT NULL,
    unit TEXT NOT NULL,
    reserved {real} NOT NULL,      -- r_u = min(B_rel, what u has left), rounded down
    spent {real}                   -- what the release spent of it (NULL while open)
);
CREATE INDEX IF NOT EXISTS reservations_unit ON reservations(tenant, unit);
CREATE TABLE IF NOT EXISTS tickets (
    release_id BIGINT NOT NULL REFERENCES releases(id),
    tenant TEXT NOT NULL,
    unit TEXT NOT NULL             -- one row per unit of a release not yet closed (waiting or open)
);
CREATE INDEX IF NOT EXISTS tickets_unit ON tickets(tenant, unit, release_id);
CREATE INDEX IF NOT EXISTS tickets_release ON tickets(release_id);
CREATE TABLE IF NOT EXISTS holders (
    id TEXT PRIMARY KEY,           -- a server process (random per start)
    beat {real} NOT NULL,          -- its last heartbeat, on the database's clock (seconds)
    lease {real} NOT NULL          -- its tickets expire this long after its last heartbeat
);
CREATE TABLE IF NOT EXISTS rewrites (
    tenant TEXT NOT NULL,
    document TEXT NOT NULL,
    version TEXT NOT NULL,
    params TEXT NOT NULL,
    body TEXT NOT NULL,            -- the release as returned (JSON): post-processing, free to return again
    created TEXT NOT NULL,
    PRIMARY KEY (tenant, document, version, params)
);
"""

# Columns added to a database made by an earlier version: (table, column, definition). Keys made
# before roles existed become owner keys of their tenant (they could do everything an owner can).
MIGRATIONS = (
    ("api_keys", "role", "TEXT NOT NULL DEFAULT 'owner'"),
    ("api_keys", "releases_per_day", "INTEGER"),
    ("api_keys", "tokens_per_day", "INTEGER"),
    ("releases", "holder", "TEXT"),
)
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
T = TypeVar("T")


class Connection:
    """One connection, in autocommit mode outside :meth:`write` (see the module docstring)."""

    backend: str  # "sqlite" | "postgresql"
    clock: str  # an SQL expression: the database's clock, seconds since 1970

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement; a cursor (``fetchone``, ``fetchall``, ``rowcount``, iteration)."""
        raise NotImplementedError

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    def insert(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run an INSERT into a table with an ``id`` column; the new row's id."""
        raise NotImplementedError

    def write(self):
        """A write transaction (context manager): commit on success, roll back on any exception."""
        raise NotImplementedError

    def lock(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Lock the rows ``sql`` (a SELECT, with its ORDER BY) selects until the transaction ends
        (PostgreSQL); nothing on SQLite, whose write transactions run one at a time."""

    def close(self) -> None:
        raise NotImplementedError

    @property
    def broken(self) -> bool:
        """Whether the connection is lost (a database server that restarted): open a new one."""
        return False

    def retry(self, error: BaseException, attempt: int) -> bool:
        """Whether a write transaction that failed with ``error`` on its ``attempt``-th run may
        run again (after any wait this takes): never on SQLite, whose write lock runs every
        write transaction alone (a busy database is its busy timeout's)."""
        return False


def is_postgres(target: str | Path) -> bool:
    return str(target).startswith(POSTGRES_SCHEMES)


def describe(target: str | Path) -> str:
    """The database as errors and logs may name it: a DSN's password masked."""
    text = str(target)
    if not is_postgres(text):
        return text
    text = re.sub(r"(://[^:/@?#]*:)[^@/?#]*@", r"\1***@", text)
    return re.sub(r"(?i)(password=)[^&\s]*", r"\1***", text)


def open_db(target: str | Path) -> Connection:
    """A connection to ``target`` (a SQLite file, or a ``postgresql://`` DSN) with the schema
    created and migrated."""
    if is_postgres(target):
        from tokendp.service.db_postgres import open_postgres

        return open_postgres(str(target))
    from tokendp.service.db_sqlite import open_sqlite

    return open_sqlite(Path(target))


def schema(real: str, id: str) -> list[str]:
    """:data:`SCHEMA`'s statements with the backend's types for floats and ids."""
    text = SCHEMA.format(real=real, id=id)
    text = re.sub(r"--[^\n]*", "", text)
    return [s.strip() for s in text.split(";") if s.strip()]


def retried(method: Callable[..., T]) -> Callable[..., T]:
    """``method(store, ...)`` of a store with a ``conn`` run again, whole, while its failure is
    one ``store.conn.retry`` takes (module docstring). Each run reads the database afresh, as the
    first did, so the method opens its transactions itself, never inside one of its caller's."""

    @functools.wraps(method)
    def run(store: Any, *args: Any, **kwargs: Any) -> T:
        attempt = 1
        while True:
            try:
                return method(store, *args, **kwargs)
            except Exception as error:
                if not store.conn.retry(error, attempt):
                    raise
            attempt += 1

    return run


@contextmanager
def immediate(conn: Connection) -> Iterator[Connection]:
    """A write transaction on ``conn`` (:meth:`Connection.write`)."""
    with conn.write():
        yield conn
