"""The service's database: one small interface, two backends.

``--db`` names either a SQLite file (the embedded default, :mod:`tokendp.service.db.sqlite`: one
host, any number of server processes on the file) or a PostgreSQL server
(``postgresql://user:password@host/db``, :mod:`tokendp.service.db.postgres`: server processes
on several hosts sharing one vault). Both hold the same tables
(:data:`tokendp.service.db.schema.SCHEMA`), created and migrated when a connection opens, and
the stores (:mod:`tokendp.service.store`, :mod:`tokendp.service.vault.store`,
:mod:`tokendp.service.keys`) run the same portable SQL on both through
:class:`~tokendp.service.db.connection.Connection`. Both backends import the schema and the
connection type from their own modules; only :func:`open_db` names the backends.
"""

from __future__ import annotations

from pathlib import Path

from tokendp.service.db.connection import Connection, is_postgres


def open_db(target: str | Path) -> Connection:
    """A connection to ``target`` (a SQLite file, or a ``postgresql://`` DSN) with the schema
    created and migrated."""
    if is_postgres(target):
        from tokendp.service.db.postgres import open_postgres

        return open_postgres(str(target))
    from tokendp.service.db.sqlite import open_sqlite

    return open_sqlite(Path(target))
