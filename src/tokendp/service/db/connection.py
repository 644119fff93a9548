"""The connection every store runs its SQL through, the same on both backends
(:mod:`tokendp.service.db`):

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
