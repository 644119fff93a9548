"""The SQLite backend of :mod:`tokendp.service.db`: one file in WAL mode, the embedded default.

WAL lets readers run beside the one writer; writers serialise on SQLite's write lock
(``BEGIN IMMEDIATE`` takes it at the start of a transaction, so a check and the write that
depends on it see the same state, and :meth:`~tokendp.service.db.connection.Connection.lock` has nothing
to do). ``synchronous=FULL`` makes a committed reservation survive a power loss, not only a
process crash. Several server processes on one host may share the file.

The file holds tenants, document ids, key hashes and the vault's documents (their private
text): it is created readable by its owner only (0600), and an existing file, -wal or -shm with
any other permission bit is tightened to 0600 when it is opened (with a warning). SQLite gives
the -wal and -shm files it creates the main file's mode.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tokendp.errors import InvalidInputError
from tokendp.service.db.connection import Connection
from tokendp.service.db.schema import DATA_MIGRATIONS, MIGRATIONS, schema

BUSY_TIMEOUT_MS = 30_000
PRIVATE = 0o600
SIDE_FILES = ("-wal", "-shm", "-journal")
# The database's clock in seconds since 1970 (julianday counts days from 4714 BC, to the millisecond).
CLOCK = "((julianday('now') - 2440587.5) * 86400.0)"
log = logging.getLogger("tokendp.service")


class SQLiteConnection(Connection):
    backend = "sqlite"
    clock = CLOCK

    def __init__(self, raw: sqlite3.Connection) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.raw.execute(sql, tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.raw.executemany(sql, rows)

    def insert(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.raw.execute(sql, tuple(params)).lastrowid

    @contextmanager
    def write(self) -> Iterator[SQLiteConnection]:
        self.raw.execute("BEGIN IMMEDIATE")
        try:
            yield self
        except BaseException:
            self.raw.execute("ROLLBACK")
            raise
        self.raw.execute("COMMIT")

    def close(self) -> None:
        self.raw.close()


def open_sqlite(path: Path) -> SQLiteConnection:
    """A connection in autocommit mode (transactions are explicit), WAL, schema created."""
    if not path.parent.is_dir():
        raise InvalidInputError(f"cannot open the database {path}: its folder does not exist")
    _make_private(path)
    raw = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    raw.row_factory = sqlite3.Row
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("PRAGMA synchronous=FULL")
    raw.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    raw.execute("PRAGMA foreign_keys=ON")
    conn = SQLiteConnection(raw)
    with conn.write():
        tables = {row["name"] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for statement in schema(real="REAL", id="INTEGER PRIMARY KEY AUTOINCREMENT"):
            raw.execute(statement)
        _migrate(conn, tables)
    return conn


def _migrate(conn: SQLiteConnection, tables: set[str]) -> None:
    """Add the columns of :data:`~tokendp.service.db.schema.MIGRATIONS` that the file lacks, then
    run each :data:`~tokendp.service.db.schema.DATA_MIGRATIONS` whose table was missing
    (``tables``: those the file had). Idempotent, and under the write lock, so two processes
    opening one old file add each column, and rewrite its data, once."""
    for table, column, definition in MIGRATIONS:
        have = {row["name"] for row in conn.execute(f"PRAGMA table_info({table})")}
        if column not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
    for table, run in DATA_MIGRATIONS:
        if tables and table not in tables:
            run(conn)


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
