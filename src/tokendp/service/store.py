"""The durable budget store: reserve before generating, mark spent after, never refund.

The protected unit is (tenant, document id, privacy group); every unit of a tenant has the
tenant's lifetime budget (epsilon at the tenant's delta). :meth:`BudgetStore.reserve` checks
every unit a request would read and records all its charges in ONE ``BEGIN IMMEDIATE``
transaction: either every unit stays within its budget after the request's worst case and all
charges are written, or :class:`BudgetRefused` names the first unit that would exceed and
nothing is written. Concurrent requests (threads or processes on the same database) serialise
on the write lock (SQLite) or on the tenant's row lock (PostgreSQL, :mod:`tokendp.service.db`),
so two requests can never both fit into the last room of a budget.

A reservation counts as spent from the moment it is committed, whatever happens next:
:meth:`finish` only records how the request ended (``spent``, ``failed`` or ``cancelled``), and
:meth:`recover` marks reservations left by a crash ``interrupted``. The one exception is
:meth:`void`: a request that failed before it sampled any token released nothing, and the
worker removes its charges (a crash is never voided: what it had streamed is unknown).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokendp.service import composition
from tokendp.service.composition import Charge
from tokendp.service.db import open_db
from tokendp.service.db.connection import immediate, retried
from tokendp.service.keys import Tenant, now

Unit = tuple[str, str]  # (document id, privacy group)


class BudgetRefused(Exception):
    """A unit would exceed its budget; nothing was reserved."""

    def __init__(self, unit: Unit, spent: float, after: float, budget: float) -> None:
        super().__init__(f"unit {unit!r} would exceed its budget")
        self.unit, self.spent, self.after, self.budget = unit, spent, after, budget


@dataclass(frozen=True)
class UnitBudget:
    document: str
    group: str
    spent: float
    budget: float
    requests: int

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.document, "group": self.group, "epsilon_spent": self.spent,
                "epsilon_remaining": max(0.0, self.budget - self.spent), "budget": self.budget,
                "requests": self.requests}


class BudgetStore:
    """Budgets per (tenant, document id, group) in the service's database (a SQLite file or a
    PostgreSQL DSN, :func:`tokendp.service.db.open_db`; one connection per thread)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._local = threading.local()
        self._local.conn = open_db(self.path)  # this thread's connection; creates the schema now

    @property
    def conn(self):
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.broken:  # a PostgreSQL server that restarted: connect again
            conn = self._local.conn = open_db(self.path)
        return conn

    def _charges(self, tenant: str, unit: Unit) -> list[Charge]:
        rows = self.conn.execute("SELECT kind, value, alpha FROM charges WHERE tenant = ? AND document = ? AND grp = ?",
                                 (tenant, *unit)).fetchall()
        return [Charge(r["kind"], r["value"], r["alpha"]) for r in rows]

    @retried
    def reserve(self, tenant: Tenant, kind: str, charges: Mapping[Unit, Charge]) -> int:
        """Check and record ``charges`` atomically; the reservation id, or BudgetRefused."""
        with immediate(self.conn) as conn:
            conn.lock("SELECT 1 FROM tenants WHERE name = ?", (tenant.name,))
            for unit, charge in charges.items():
                past = self._charges(tenant.name, unit)
                after = composition.epsilon([*past, charge], delta=tenant.delta)
                if after > tenant.budget:
                    raise BudgetRefused(unit, composition.epsilon(past, delta=tenant.delta), after, tenant.budget)
            rid = conn.insert("INSERT INTO requests (tenant, kind, state, created) VALUES (?, ?, 'reserved', ?)",
                              (tenant.name, kind, now()))
            conn.executemany(
                "INSERT INTO charges (request_id, tenant, document, grp, kind, alpha, value) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(rid, tenant.name, d, g, c.kind, c.alpha, c.value) for (d, g), c in charges.items()])
        return rid

    def reserved(self, reservation: int) -> dict[Unit, Charge]:
        """The charges a reservation recorded, as the database holds them."""
        rows = self.conn.execute("SELECT document, grp, kind, value, alpha FROM charges WHERE request_id = ?",
                                 (reservation,)).fetchall()
        return {(r["document"], r["grp"]): Charge(r["kind"], r["value"], r["alpha"]) for r in rows}

    @retried
    def void(self, reservation: int) -> None:
        """Remove the charges of a reservation whose request failed before it sampled any token
        (nothing was generated, so nothing was released); the request is kept as ``void``."""
        with immediate(self.conn) as conn:
            if conn.execute("UPDATE requests SET state = 'void', finished = ? WHERE id = ? AND state = 'reserved'",
                            (now(), reservation)).rowcount:
                conn.execute("DELETE FROM charges WHERE request_id = ?", (reservation,))

    @retried
    def finish(self, reservation: int, state: str) -> None:
        """Record how a request ended (``spent``, ``failed`` or ``cancelled``: its client went
        away, or the server shut down, after a token was sampled); its charges stay either way."""
        if state not in ("spent", "failed", "cancelled"):
            raise ValueError(f"unknown final state {state!r}")
        with immediate(self.conn) as conn:
            conn.execute("UPDATE requests SET state = ?, finished = ? WHERE id = ? AND state = 'reserved'",
                         (state, now(), reservation))

    @retried
    def recover(self) -> int:
        """At start-up: reservations still open were cut off by a crash; mark them
        ``interrupted`` (still spent). Returns how many."""
        with immediate(self.conn) as conn:
            return conn.execute("UPDATE requests SET state = 'interrupted', finished = ? WHERE state = 'reserved'",
                                (now(),)).rowcount

    def units(self, tenant: Tenant, document: str | None = None) -> list[UnitBudget]:
        """The tenant's units (optionally of one document) with their composed epsilon."""
        sql = "SELECT DISTINCT document, grp FROM charges WHERE tenant = ?"
        args: tuple = (tenant.name,)
        if document is not None:
            sql, args = sql + " AND document = ?", (*args, document)
        out = []
        for row in self.conn.execute(sql + " ORDER BY document, grp", args).fetchall():
            past = self._charges(tenant.name, (row["document"], row["grp"]))
            out.append(UnitBudget(row["document"], row["grp"], composition.epsilon(past, delta=tenant.delta),
                                  tenant.budget, len(past)))
        return out

    def requests(self, tenant: Tenant) -> dict[str, int]:
        """How many of the tenant's requests are in each state."""
        rows = self.conn.execute("SELECT state, COUNT(*) AS n FROM requests WHERE tenant = ? GROUP BY state",
                                 (tenant.name,)).fetchall()
        return {r["state"]: r["n"] for r in rows}
