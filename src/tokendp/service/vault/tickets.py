"""The vault's tickets: releases of a unit reserve in arrival order (docs/privacy.md, "The vault:
one lifetime filter per unit", steps 0, 1 and 4).

A release request takes a **ticket** when it arrives: a row of ``releases`` in state
``waiting`` whose id is its place in the tenant's arrival order, and one ``tickets`` row per
unit it reads. The transaction that takes it holds the tenant's ``vaults`` row (the write lock
on SQLite), so ids are given and committed in one order per tenant. A ticket may **reserve**
only when no earlier ticket that shares a unit with it is still in ``tickets`` (waiting or
open): every earlier release of its units has closed (done, failed, void or expired), and every
later one waits for it. Closing a release deletes its ``tickets`` rows.

Each server process holds its tickets under a **lease**: a ``holders`` row that its heartbeat
renews on the database's clock. A ticket whose holder missed its lease (the process died, or
stalled past it) is expired by the release that waits for it (:meth:`VaultStore.expire
<tokendp.service.vault.store.VaultStore.expire>`): its reservations, if it had any, are spent in
full; a ticket that had not reserved closes with nothing spent.

Locks, for PostgreSQL (:mod:`tokendp.service.db`): a tenant's ``vaults`` row, then its units'
rows by key, then the release's own row; every transaction here takes them in that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tokendp.service.db.connection import Connection

LIVE = "CASE WHEN h.beat + h.lease >= {clock} THEN 1 ELSE 0 END"


def take(conn: Connection, tenant: str, release: int, units: Iterable[str]) -> None:
    """Record the units of the ticket ``release`` (in the transaction that made its row)."""
    conn.executemany("INSERT INTO tickets (release_id, tenant, unit) VALUES (?, ?, ?)",
                     [(release, tenant, u) for u in sorted(set(units))])


def units_of(conn: Connection, release: int) -> list[str]:
    """The units of a ticket not yet closed, by key."""
    rows = conn.execute("SELECT unit FROM tickets WHERE release_id = ? ORDER BY unit", (release,)).fetchall()
    return [r["unit"] for r in rows]


def blockers(conn: Connection, release: int) -> list[tuple[int, bool]]:
    """The earlier tickets not yet closed that share a unit with ``release``: (id, whether its
    holder's lease is current)."""
    rows = conn.execute(
        f"SELECT DISTINCT l.id AS id, {LIVE.format(clock=conn.clock)} AS live FROM tickets m "
        "JOIN tickets o ON o.tenant = m.tenant AND o.unit = m.unit AND o.release_id < m.release_id "
        "JOIN releases l ON l.id = o.release_id LEFT JOIN holders h ON h.id = l.holder "
        "WHERE m.release_id = ? ORDER BY l.id", (release,)).fetchall()
    return [(r["id"], bool(r["live"])) for r in rows]


def live(conn: Connection, release: int) -> bool:
    """Whether the holder of ``release`` keeps its lease."""
    row = conn.execute(f"SELECT {LIVE.format(clock=conn.clock)} AS live FROM releases l "
                       "LEFT JOIN holders h ON h.id = l.holder WHERE l.id = ?", (release,)).fetchone()
    return row is not None and bool(row["live"])


def lock(conn: Connection, tenant: str, units: Sequence[str], release: int | None = None) -> None:
    """In a write transaction: lock the units' rows (created at spend 0 where missing), in key
    order, then the release's row (PostgreSQL; SQLite's write lock already holds everything)."""
    keys = sorted(set(units))
    for unit in keys:
        conn.execute("INSERT INTO units (tenant, unit, spent) VALUES (?, ?, 0) ON CONFLICT DO NOTHING", (tenant, unit))
    if keys:
        marks = ", ".join("?" * len(keys))
        conn.lock(f"SELECT 1 FROM units WHERE tenant = ? AND unit IN ({marks}) ORDER BY unit", (tenant, *keys))
    if release is not None:
        conn.lock("SELECT 1 FROM releases WHERE id = ?", (release,))


def close(conn: Connection, release: int) -> None:
    """The ticket is closed: later tickets of its units no longer wait for it."""
    conn.execute("DELETE FROM tickets WHERE release_id = ?", (release,))


def beat(conn: Connection, holder: str, lease: float) -> None:
    """Renew ``holder``'s lease (register it on the first beat)."""
    conn.execute(f"INSERT INTO holders (id, beat, lease) VALUES (?, {conn.clock}, ?) ON CONFLICT (id) DO UPDATE "
                 "SET beat = excluded.beat, lease = excluded.lease", (holder, lease))


def leave(conn: Connection, holder: str) -> None:
    """``holder`` stops: its tickets still open expire at once."""
    conn.execute("DELETE FROM holders WHERE id = ?", (holder,))
