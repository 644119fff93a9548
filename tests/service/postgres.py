"""A throwaway PostgreSQL server for the vault's tests: ``initdb`` and ``pg_ctl`` from Debian's
packages (``/usr/lib/postgresql/*/bin``, as ``.ci/run`` installs them) or the PATH, in a temp
folder, on a free port of 127.0.0.1, with password authentication. Run as the ``postgres`` user
when the tests run as root (PostgreSQL refuses root). Skipped, with the reason, where the
binaries or psycopg are missing.

:func:`postgres_server` is the session's server; :func:`fresh_database` makes one empty database
on it per test and returns its DSN (with the password, which the tests check never leaks);
:func:`vault_db` is a test's database on each backend in turn.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.service.conftest import free_port

USER = "tokendp"


@dataclass
class PostgresServer:
    folder: Path
    port: int
    password: str

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"


def binaries() -> Path | None:
    """The folder of initdb and pg_ctl: the newest /usr/lib/postgresql/N/bin, else the PATH's."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_server_user() -> dict:
    """subprocess arguments that run PostgreSQL as a non-root user."""
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("the tests run as root and there is no postgres user to run PostgreSQL as")
    return {"user": entry.pw_uid, "group": entry.pw_gid}


def start() -> PostgresServer:
    pytest.importorskip("psycopg", reason="PostgreSQL tests need psycopg 3 (pip install 'tokendp[postgres]')")
    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL's initdb and pg_ctl were not found (apt-get install postgresql; .ci/run does)")
    who = _as_server_user()
    folder = Path(tempfile.mkdtemp(prefix="tokendp-pg-"))
    password = "pw-" + secrets.token_hex(12)
    (folder / "pwfile").write_text(password + "\n")
    if who:
        for path in (folder, folder / "pwfile"):
            os.chown(path, who["user"], who["group"])
    port = free_port()
    data = folder / "data"
    run = lambda *args: subprocess.run([str(a) for a in args], check=True, capture_output=True, timeout=120,  # noqa: E731
                                       cwd=folder, **who)
    try:
        run(bin_dir / "initdb", "-D", data, "-U", USER, "--pwfile", folder / "pwfile", "--auth", "scram-sha-256",
            "--locale", "C", "-E", "UTF8")
        run(bin_dir / "pg_ctl", "-D", data, "-l", folder / "server.log", "-w", "-t", "60", "start", "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200")
    except subprocess.CalledProcessError as err:
        raise RuntimeError(f"PostgreSQL did not start: {err.stderr.decode(errors='replace')[-2000:]}") from None
    return PostgresServer(folder, port, password)


def stop(server: PostgresServer) -> None:
    bin_dir = binaries()
    subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(server.folder / "data"), "-m", "immediate", "stop"],
                   capture_output=True, timeout=60, cwd=server.folder, **_as_server_user())
    shutil.rmtree(server.folder, ignore_errors=True)


def fresh_database(server: PostgresServer) -> str:
    """A new empty database on ``server``; its DSN."""
    import psycopg

    name = "t_" + secrets.token_hex(6)
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.dsn(name)


@pytest.fixture(scope="session")
def postgres_server():
    server = start()
    yield server
    stop(server)


@pytest.fixture(params=["sqlite", "postgresql"])
def vault_db(request, tmp_path):
    """A database of each backend: a SQLite file, or a fresh PostgreSQL database (its DSN)."""
    if request.param == "sqlite":
        return tmp_path / "vault.db"
    return fresh_database(request.getfixturevalue("postgres_server"))
