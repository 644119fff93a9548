"""The database file and its -wal and -shm files are readable by their owner only."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import subprocess
import sys

import pytest

from tokendp.service.db import open_db
from tokendp.service.keys import create_key


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def usual_umask():
    """The usual 022, under which SQLite alone creates its files 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_new_database_and_its_wal_and_shm_files_are_0600(tmp_path, usual_umask):
    db = tmp_path / "s.db"
    conn = open_db(db)
    create_key(conn, "acme", budget=1.0)  # a write: the -wal and -shm files exist while conn is open
    assert {mode(p) for p in (db, f"{db}-wal", f"{db}-shm")} == {0o600}
    conn.close()


def test_an_existing_world_readable_database_is_tightened_with_a_warning(tmp_path, usual_umask, caplog):
    db = tmp_path / "old.db"
    old = sqlite3.connect(db)  # as a tokendp before 0600 left it: 0644, WAL files present
    old.execute("PRAGMA journal_mode=WAL")
    old.execute("CREATE TABLE t (x)")
    old.execute("INSERT INTO t VALUES (1)")
    old.commit()
    assert {mode(p) for p in (db, f"{db}-wal", f"{db}-shm")} == {0o644}
    with caplog.at_level(logging.WARNING, logger="tokendp.service"):
        open_db(db).close()
    assert {mode(p) for p in (db, f"{db}-wal", f"{db}-shm")} == {0o600}
    assert "0600" in caplog.text and "644" in caplog.text
    old.close()


def test_opening_the_database_again_keeps_the_locks_of_connections_already_open(tmp_path):
    """A server opens one connection per thread: opening the next must not drop the others' POSIX
    locks (closing any descriptor of the file would), or another process's close deletes the WAL."""
    db = tmp_path / "s.db"
    first = open_db(db)
    create_key(first, "acme", budget=1.0)
    second = open_db(db)
    script = (f"import sqlite3; c = sqlite3.connect({str(db)!r}); "
              "c.execute('SELECT 1 FROM tenants').fetchall(); c.close()")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert os.path.exists(f"{db}-wal") and os.path.exists(f"{db}-shm")
    first.close()
    second.close()
