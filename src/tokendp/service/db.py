"""The service's SQLite database: one file in WAL mode shared by keys, the budget store and the
vault (stored documents, units' lifetime ledgers, releases; :mod:`tokendp.service.vault_store`).

WAL lets readers (GET /v1/budget) run beside the one writer; writers serialise on SQLite's
write lock (``BEGIN IMMEDIATE`` takes it at the start of a transaction, so a check and the
write that depends on it see the same state). ``synchronous=FULL`` makes a committed
reservation survive a power loss, not only a process crash.

The file holds tenants, document ids, key hashes and the vault's documents (their private text): it is created readable by its owner only
(0600), and an existing file, -wal or -shm with any other permission bit is tightened to 0600
when it is opened (with a warning). SQLite gives the -wal and -shm files it creates the main file's mode.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from contextlib import contextmanager
from collections.abc import Iterator
from pathlib import Path

from tokendp.errors import InvalidInputError

BUSY_TIMEOUT_MS = 30_000
PRIVATE = 0o600
SIDE_FILES = ("-wal", "-shm", "-journal")
log = logging.getLogger("tokendp.service")

SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    name TEXT PRIMARY KEY,
    budget REAL NOT NULL,          -- lifetime epsilon per protected unit
    delta REAL NOT NULL,           -- the delta that budget refers to
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
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL REFERENCES tenants(name),
    kind TEXT NOT NULL,            -- sanitize | synthesize | generate
    state TEXT NOT NULL,           -- reserved | spent | failed | cancelled | interrupted (all count as spent) | void
    created TEXT NOT NULL,
    finished TEXT
);
CREATE TABLE IF NOT EXISTS charges (
    request_id INTEGER NOT NULL REFERENCES requests(id),
    tenant TEXT NOT NULL,
    document TEXT NOT NULL,        -- the client's document (or reference set) id
    grp TEXT NOT NULL,             -- the privacy group
    kind TEXT NOT NULL,            -- rdp | zcdp (service.composition.Charge)
    alpha REAL,
    value REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS charges_unit ON charges(tenant, document, grp);
CREATE TABLE IF NOT EXISTS vaults (
    tenant TEXT PRIMARY KEY REFERENCES tenants(name),
    alpha REAL NOT NULL,           -- the vault's Renyi order, fixed at its first use
    budget REAL NOT NULL,          -- every unit's lifetime RDP budget B at alpha
    created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    tenant TEXT NOT NULL REFERENCES tenants(name),
    id TEXT NOT NULL,
    version TEXT NOT NULL,         -- random per write: a rewrite is cached per version
    title TEXT NOT NULL,           -- public: readers see it
    text TEXT NOT NULL,            -- private: only owner keys read it
    spans TEXT NOT NULL,           -- JSON [{start, end, label, subject?}], offsets into text as given
    subject TEXT,                  -- the default subject of spans without one
    state TEXT NOT NULL,           -- draft (tagged by the server, to confirm) | confirmed
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE TABLE IF NOT EXISTS units (
    tenant TEXT NOT NULL REFERENCES tenants(name),
    unit TEXT NOT NULL,            -- service.units.unit_key: a subject, or (document, label)
    spent REAL NOT NULL,           -- committed spend, an upper bound of the exact charges
    PRIMARY KEY (tenant, unit)
);
CREATE TABLE IF NOT EXISTS releases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL REFERENCES tenants(name),
    document TEXT NOT NULL,
    version TEXT NOT NULL,
    params TEXT NOT NULL,          -- canonical JSON of the release's public parameters
    reader TEXT NOT NULL,          -- the asking key's hash (quotas)
    tokens INTEGER NOT NULL,       -- T, counted against the key's tokens per day
    state TEXT NOT NULL,           -- open (in flight, or cut off: counts as spent) | done | failed | void
    created TEXT NOT NULL,
    finished TEXT
);
CREATE INDEX IF NOT EXISTS releases_reader ON releases(reader, created);
CREATE TABLE IF NOT EXISTS reservations (
    release_id INTEGER NOT NULL REFERENCES releases(id),
    tenant TEXT NOT NULL,
    unit TEXT NOT NULL,
    reserved REAL NOT NULL,        -- r_u = min(B_rel, what u has left), rounded down
    spent REAL                     -- what the release spent of it (NULL while open)
);
CREATE INDEX IF NOT EXISTS reservations_unit ON reservations(tenant, unit);
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
)


def open_db(path: str | Path) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, schema created."""
    if not Path(path).parent.is_dir():
        raise InvalidInputError(f"cannot open the database {path}: its folder does not exist")
    _make_private(Path(path))
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                           check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.executescript(SCHEMA)
    _migrate(conn)
    return conn


def _migrate(conn: sqlite3.Connection) -> None:
    """Add the columns of :data:`MIGRATIONS` that the file lacks (idempotent; under the write
    lock, so two processes opening one old file add each column once)."""
    with immediate(conn):
        for table, column, definition in MIGRATIONS:
            have = {row["name"] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")


def _make_private(path: Path) -> None:
    """Create ``path`` with mode 0600 before SQLite opens it (SQLite would create it 0644 under
    the usual umask), and tighten it and its existing side files if their mode allows more."""
    try:
        _create(path)
        for file in (path, *(Path(f"{path}{suffix}") for suffix in SIDE_FILES)):
            if file.exists():
                _tighten(file)
    except OSError as err:
        raise InvalidInputError(f"cannot open the database {path} for its owner only: {err.strerror}") from None


def _create(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists. An existing file is never opened
    here: closing any descriptor of a file drops every POSIX lock this process holds on it, its
    open SQLite connections' locks included, and another process could then delete the WAL
    under them. Files are tightened by name (chmod) instead."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE))
    except FileExistsError:
        pass


def _tighten(file: Path) -> None:
    mode = stat.S_IMODE(file.stat().st_mode)
    if mode & ~PRIVATE:
        os.chmod(file, PRIVATE)
        log.warning("%s was mode %o: it is now 0600 (its owner only)", file, mode)


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction that holds the write lock from its first statement: commit on
    success, roll back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
