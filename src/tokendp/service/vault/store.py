"""The vault's database access, all of it: documents, the units' lifetime ledgers, releases with
their tickets and reservations, cached rewrites and reader quotas (tables in
:mod:`tokendp.service.db`).

Portable SQL only (``?`` parameters, ``INSERT ... ON CONFLICT``, no backend's functions),
each write in one :func:`~tokendp.service.db.connection.immediate` transaction that locks what its
decision reads (:mod:`tokendp.service.vault.tickets`, "Locks"), so that SQLite and PostgreSQL
run the same statements behind :class:`~tokendp.service.db.connection.Connection`.

The release rule (docs/privacy.md, "The vault: one lifetime filter per unit"): a release takes
a ticket when it arrives (:meth:`VaultStore.ticket`, in the transaction that checks the reader's
quota); it reserves (:meth:`VaultStore.reserve`) only once every earlier ticket that shares a
unit with it has closed, and then records r_u = :func:`~tokendp.accounting.lifetime_reservation`
(min(B_rel, B - spent - outstanding), rounded down) for each of its units in one transaction.
:meth:`commit` replaces a reservation by what the release spent
(:func:`~tokendp.accounting.lifetime_spent`, rounded up); :meth:`fail` and :meth:`expire` (a
ticket whose process missed its lease) keep it spent in full; :meth:`void` removes one whose
release sampled no token.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from typing import Any

from tokendp.accounting import lifetime_alpha, lifetime_budget, lifetime_reservation, lifetime_spent
from tokendp.accounting._rounding import ceil_float
from tokendp.errors import InvalidParameterError
from tokendp.service.vault import tickets
from tokendp.service.db.connection import immediate, retried
from tokendp.service.keys import Caller, Tenant, now
from tokendp.service.vault.units import describe


class QuotaExceeded(Exception):
    """The reader key is over its own quota (releases or tokens per day); nothing was reserved."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"this key's quota of {limit} {what} per day is used up")
        self.what, self.limit = what, limit


class TicketLapsed(Exception):
    """A release's ticket was closed while it waited: its server process missed its lease (it
    stalled past it). Nothing was reserved for it; the reader may ask again."""


class DocumentExists(Exception):
    """POST of a document id the tenant already has (replace it with PUT); ``index``: its place
    among the documents of :meth:`VaultStore.put_all`."""

    index: int = 0


@dataclass(frozen=True)
class Settings:
    """A tenant's vault: its order and every unit's lifetime RDP budget B (public, fixed)."""

    alpha: float
    budget: float


@dataclass(frozen=True)
class StoredDocument:
    id: str
    version: str
    title: str
    text: str
    spans: tuple[dict[str, Any], ...]  # {start, end, label, subject?}: offsets into text as given
    subject: str | None
    state: str  # draft | confirmed

    def owner_view(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "text": self.text, "spans": list(self.spans),
                "subject": self.subject, "state": self.state, "version": self.version}


@dataclass(frozen=True)
class Reserved:
    """An open release: its id and each unit's reservation r_u."""

    release: int
    units: dict[str, float]


DEFAULT_LEASE_S = 30.0


class VaultStore:
    """The vault's tables on the service's database (``conn``: a callable giving this thread's
    connection, :attr:`tokendp.service.store.BudgetStore.conn`). ``holder`` names this server
    process in its tickets; ``lease``: how long after its last heartbeat they expire."""

    def __init__(self, conn, *, lease: float = DEFAULT_LEASE_S, holder: str | None = None) -> None:
        self._conn = conn
        self.lease = float(lease)
        self.holder = holder or secrets.token_hex(8)

    @property
    def conn(self):
        return self._conn()

    # --- settings --------------------------------------------------------------------------
    @retried
    def settings(self, tenant: Tenant) -> Settings:
        """The tenant's vault order and unit budget, fixed at first use from its public
        lifetime epsilon and delta (:func:`~tokendp.accounting.lifetime_alpha`)."""
        row = self.conn.execute("SELECT alpha, budget FROM vaults WHERE tenant = ?", (tenant.name,)).fetchone()
        if row is not None:
            return Settings(row["alpha"], row["budget"])
        if tenant.budget == 0:
            alpha, budget = 2.0, 0.0
        else:
            alpha = lifetime_alpha(epsilon=tenant.budget, delta=tenant.delta)
            budget = lifetime_budget(epsilon=tenant.budget, delta=tenant.delta, alpha=alpha)
        with immediate(self.conn) as conn:
            conn.execute("INSERT INTO vaults (tenant, alpha, budget, created) VALUES (?, ?, ?, ?) "
                         "ON CONFLICT DO NOTHING", (tenant.name, alpha, budget, now()))
            row = conn.execute("SELECT alpha, budget FROM vaults WHERE tenant = ?", (tenant.name,)).fetchone()
        return Settings(row["alpha"], row["budget"])

    # --- documents -------------------------------------------------------------------------
    @retried
    def put(self, tenant: Tenant, doc: Mapping[str, Any], *, state: str, create: bool) -> str:
        """Store a validated document (``create``: refuse an existing id); its new version.
        Replacing a document drops its cached rewrites (they were of the old version)."""
        with immediate(self.conn) as conn:
            return self._put(conn, tenant, doc, state, create)

    @retried
    def put_all(self, tenant: Tenant, docs: Sequence[tuple[Mapping[str, Any], str]], *, create: bool) -> None:
        """Store validated (document, state) pairs all or none, in one write transaction:
        DocumentExists (its ``index`` the first one the vault holds, with ``create``) stores none."""
        with immediate(self.conn) as conn:
            for i, (doc, state) in enumerate(docs):
                try:
                    self._put(conn, tenant, doc, state, create)
                except DocumentExists as err:
                    err.index = i
                    raise

    @staticmethod
    def _put(conn, tenant: Tenant, doc: Mapping[str, Any], state: str, create: bool) -> str:
        version = secrets.token_hex(8)
        row = (doc["title"], doc["text"], json.dumps(doc["spans"], ensure_ascii=False), doc.get("subject"), state)
        exists = conn.execute("SELECT 1 FROM documents WHERE tenant = ? AND id = ?",
                              (tenant.name, doc["id"])).fetchone() is not None
        if exists and create:
            raise DocumentExists(doc["id"])
        if exists:
            conn.execute("UPDATE documents SET version = ?, title = ?, text = ?, spans = ?, subject = ?, "
                         "state = ?, updated = ? WHERE tenant = ? AND id = ?",
                         (version, *row, now(), tenant.name, doc["id"]))
            conn.execute("DELETE FROM rewrites WHERE tenant = ? AND document = ?", (tenant.name, doc["id"]))
        else:
            conn.execute("INSERT INTO documents (tenant, id, version, title, text, spans, subject, state, created, "
                         "updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (tenant.name, doc["id"], version, *row, now(), now()))
        return version

    def get(self, tenant: Tenant, document: str) -> StoredDocument | None:
        row = self.conn.execute("SELECT * FROM documents WHERE tenant = ? AND id = ?",
                                (tenant.name, document)).fetchone()
        if row is None:
            return None
        return StoredDocument(row["id"], row["version"], row["title"], row["text"], tuple(json.loads(row["spans"])),
                              row["subject"], row["state"])

    def listing(self, tenant: Tenant, *, confirmed_only: bool) -> list[dict[str, Any]]:
        """Ids, public titles (and, for the owner, states) in id order."""
        sql = "SELECT id, title, state FROM documents WHERE tenant = ?"
        if confirmed_only:
            sql += " AND state = 'confirmed'"
        rows = self.conn.execute(sql + " ORDER BY id", (tenant.name,)).fetchall()
        return [{"id": r["id"], "title": r["title"], **({} if confirmed_only else {"state": r["state"]})}
                for r in rows]

    def confirmed_versions(self, tenant: Tenant) -> list[tuple[str, str]]:
        """(id, version) of every confirmed document, in id order: what retrieval indexes."""
        rows = self.conn.execute("SELECT id, version FROM documents WHERE tenant = ? AND state = 'confirmed' "
                                 "ORDER BY id", (tenant.name,)).fetchall()
        return [(r["id"], r["version"]) for r in rows]

    def confirmed(self, tenant: Tenant) -> list[StoredDocument]:
        """Every confirmed document, in id order (retrieval reads their public versions only)."""
        rows = self.conn.execute("SELECT * FROM documents WHERE tenant = ? AND state = 'confirmed' ORDER BY id",
                                 (tenant.name,)).fetchall()
        return [StoredDocument(r["id"], r["version"], r["title"], r["text"], tuple(json.loads(r["spans"])),
                               r["subject"], r["state"]) for r in rows]

    @retried
    def confirm(self, tenant: Tenant, document: str) -> bool:
        with immediate(self.conn) as conn:
            return conn.execute("UPDATE documents SET state = 'confirmed', updated = ? WHERE tenant = ? AND id = ?",
                                (now(), tenant.name, document)).rowcount == 1

    @retried
    def delete(self, tenant: Tenant, document: str) -> bool:
        """Delete a document and its cached rewrites; its units and their spend stay."""
        with immediate(self.conn) as conn:
            conn.execute("DELETE FROM rewrites WHERE tenant = ? AND document = ?", (tenant.name, document))
            return conn.execute("DELETE FROM documents WHERE tenant = ? AND id = ?",
                                (tenant.name, document)).rowcount == 1

    # --- releases --------------------------------------------------------------------------
    def cached(self, tenant: Tenant, document: str, version: str, params: str) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT body FROM rewrites WHERE tenant = ? AND document = ? AND version = ? "
                                "AND params = ?", (tenant.name, document, version, params)).fetchone()
        return None if row is None else json.loads(row["body"])

    # --- tickets and leases ---------------------------------------------------------------
    def beat(self) -> None:
        """Renew this process's lease (:mod:`tokendp.service.vault.tickets`)."""
        tickets.beat(self.conn, self.holder, self.lease)

    def leave(self) -> None:
        """This process stops: its tickets still open expire at once."""
        tickets.leave(self.conn, self.holder)

    @retried
    def ticket(self, caller: Caller, document, params: str, units: Sequence[str], tokens: int | None) -> int:
        """Check the key's quota and take the release's ticket in arrival order, in one write
        transaction; QuotaExceeded takes none. ``document``: what the release reads, as its row
        records it (``id``, ``version``); ``units``: the units it reads; ``tokens``: T if the
        request fixes it (else 0 until :meth:`reserve` records the planned T, and checks it
        against the quota)."""
        tenant = caller.tenant.name
        self.settings(caller.tenant)  # the tenant's vaults row, which orders its tickets
        with immediate(self.conn) as conn:
            conn.lock("SELECT 1 FROM vaults WHERE tenant = ?", (tenant,))
            self._check_quota(conn, caller, releases=1, tokens=tokens or 0)
            rid = conn.insert("INSERT INTO releases (tenant, document, version, params, reader, tokens, state, "
                              "created, holder) VALUES (?, ?, ?, ?, ?, ?, 'waiting', ?, ?)",
                              (tenant, document.id, document.version, params, caller.key_hash, tokens or 0, now(),
                               self.holder))
            tickets.take(conn, tenant, rid, units)
        return rid

    def blocked(self, release: int) -> tuple[bool, list[int]]:
        """Whether an earlier ticket of a live process that shares a unit is still open, and
        the earlier ones whose process missed its lease (to :meth:`expire`). A read: no lock."""
        found = tickets.blockers(self.conn, release)
        return any(alive for _, alive in found), [rid for rid, alive in found if not alive]

    @retried
    def expire(self, release: int) -> None:
        """Close a ticket whose process missed its lease (checked again here): reservations it
        holds are spent in full, as a failure after a token; one that never reserved closes
        with nothing spent."""
        with immediate(self.conn) as conn:
            state = _locked_state(conn, release)
            if state is None or tickets.live(conn, release) or state not in ("waiting", "open"):
                return
            if state == "open":
                self._close(conn, release, None, "expired")
            else:
                conn.execute("UPDATE releases SET state = 'expired', finished = ? WHERE id = ?", (now(), release))
                tickets.close(conn, release)

    @retried
    def reserve(self, caller: Caller, release: int, tokens: int, units: Sequence[str],
                release_budget: float) -> Reserved | None:
        """Reserve each unit's r_u (module docstring) for the ticket ``release``, in one write
        transaction, if no earlier ticket that shares a unit with it is open; else None (ask
        again when one closes). The planned T is recorded, and checked against the key's token
        quota if the ticket did not fix it (QuotaExceeded). TicketLapsed if the ticket expired."""
        tenant = caller.tenant.name
        budget = self.settings(caller.tenant).budget
        with immediate(self.conn) as conn:
            conn.lock("SELECT 1 FROM vaults WHERE tenant = ?", (tenant,))
            held = tickets.units_of(conn, release)
            tickets.lock(conn, tenant, held, release)
            row = conn.execute("SELECT state, tokens FROM releases WHERE id = ?", (release,)).fetchone()
            if row is None or row["state"] != "waiting":
                raise TicketLapsed("this release's place in line lapsed; ask again")
            if not set(units) <= set(held):
                raise ValueError("the release reads a unit its ticket does not hold")
            if tickets.blockers(conn, release):
                return None
            if tokens != row["tokens"]:
                self._check_quota(conn, caller, releases=0, tokens=max(0, tokens - row["tokens"]))
            conn.execute("UPDATE releases SET state = 'open', tokens = ? WHERE id = ?", (tokens, release))
            out = {}
            for unit in dict.fromkeys(units):
                spent = conn.execute("SELECT spent FROM units WHERE tenant = ? AND unit = ?",
                                     (tenant, unit)).fetchone()["spent"]
                r = lifetime_reservation(budget=budget, spent=spent, outstanding=self._outstanding(conn, tenant, unit),
                                         release=release_budget)
                conn.execute("INSERT INTO reservations (release_id, tenant, unit, reserved) VALUES (?, ?, ?, ?)",
                             (release, tenant, unit, r))
                out[unit] = r
        return Reserved(release, out)

    @staticmethod
    def _outstanding(conn, tenant: str, unit: str) -> float:
        """The exact sum of the unit's open reservations, rounded up."""
        rows = conn.execute("SELECT r.reserved FROM reservations r JOIN releases l ON l.id = r.release_id "
                            "WHERE r.tenant = ? AND r.unit = ? AND l.state = 'open'", (tenant, unit)).fetchall()
        return ceil_float(sum((Fraction(r["reserved"]) for r in rows), Fraction(0)))

    @staticmethod
    def _check_quota(conn, caller: Caller, *, releases: int, tokens: int) -> None:
        """QuotaExceeded if ``releases`` more releases or ``tokens`` more tokens would pass the
        key's quota over the last 24 hours (voided releases do not count)."""
        row = conn.execute("SELECT releases_per_day, tokens_per_day FROM api_keys WHERE key_hash = ?",
                           (caller.key_hash,)).fetchone()
        if row is None or (row["releases_per_day"] is None and row["tokens_per_day"] is None):
            return
        since = (datetime.now(timezone.utc) - timedelta(days=1)).isoformat(timespec="seconds")
        used = conn.execute("SELECT COUNT(*) AS n, COALESCE(SUM(tokens), 0) AS t FROM releases WHERE reader = ? "
                            "AND created >= ? AND state <> 'void'", (caller.key_hash, since)).fetchone()
        if releases and row["releases_per_day"] is not None and used["n"] + releases > row["releases_per_day"]:
            raise QuotaExceeded("releases", row["releases_per_day"])
        if row["tokens_per_day"] is not None and used["t"] + tokens > row["tokens_per_day"]:
            raise QuotaExceeded("tokens", row["tokens_per_day"])

    def reserved(self, release: int) -> dict[str, float]:
        """The reservations of a release as the database holds them."""
        rows = self.conn.execute("SELECT unit, reserved FROM reservations WHERE release_id = ?", (release,)).fetchall()
        return {r["unit"]: r["reserved"] for r in rows}

    @retried
    def commit(self, release: int, left: Mapping[str, float], body: dict[str, Any] | None) -> None:
        """Close a release: each unit's spend grows by what its reservation lost (``left``: what
        the release's filter left of it), and ``body`` (the release as returned) is cached for
        its (document version, parameters) while that version is stored."""
        with immediate(self.conn) as conn:
            row = self._close(conn, release, left, "done")
            if row is None or body is None:
                return
            tenant, document, version = row["tenant"], row["document"], row["version"]
            if conn.execute("SELECT 1 FROM documents WHERE tenant = ? AND id = ? AND version = ?",
                            (tenant, document, version)).fetchone() is not None:
                conn.execute("INSERT INTO rewrites (tenant, document, version, params, body, created) "
                             "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                             (tenant, document, version, row["params"], json.dumps(body, ensure_ascii=False), now()))

    @retried
    def fail(self, release: int) -> None:
        """A release that failed after its first token: its reservations are spent in full."""
        with immediate(self.conn) as conn:
            self._close(conn, release, None, "failed")

    @staticmethod
    def _close(conn, release: int, left: Mapping[str, float] | None, state: str):
        """Turn an open release's reservations into spend (``left`` None: nothing returns) and
        close its ticket; its row, or None if it was not open."""
        row = conn.execute("SELECT tenant FROM releases WHERE id = ?", (release,)).fetchone()
        if row is None:
            return None
        reserved = [r["unit"] for r in conn.execute("SELECT unit FROM reservations WHERE release_id = ?",
                                                    (release,)).fetchall()]
        tickets.lock(conn, row["tenant"], [*tickets.units_of(conn, release), *reserved], release)
        row = conn.execute("SELECT * FROM releases WHERE id = ? AND state = 'open'", (release,)).fetchone()
        if row is None:
            return None
        held = conn.execute("SELECT unit, reserved FROM reservations WHERE release_id = ?", (release,)).fetchall()
        for r in held:
            unit, reserved = r["unit"], r["reserved"]
            rest = 0.0 if left is None else left[unit]
            spent = conn.execute("SELECT spent FROM units WHERE tenant = ? AND unit = ?",
                                 (row["tenant"], unit)).fetchone()["spent"]
            conn.execute("UPDATE units SET spent = ? WHERE tenant = ? AND unit = ?",
                         (lifetime_spent(spent=spent, reserved=reserved, left=rest), row["tenant"], unit))
            conn.execute("UPDATE reservations SET spent = ? WHERE release_id = ? AND unit = ?",
                         (lifetime_spent(spent=0.0, reserved=reserved, left=rest), release, unit))
        conn.execute("UPDATE releases SET state = ?, finished = ? WHERE id = ?", (state, now(), release))
        tickets.close(conn, release)
        return row

    @retried
    def void(self, release: int) -> None:
        """Close a release that sampled no token (nothing was released): one that reserved is
        kept as ``void``, its reservations removed; a ticket that never reserved (a refused
        parameter, a client that left while it waited) is removed and leaves no row."""
        with immediate(self.conn) as conn:
            state = _locked_state(conn, release)
            if state == "waiting":
                tickets.close(conn, release)
                conn.execute("DELETE FROM releases WHERE id = ?", (release,))
            elif state == "open":
                conn.execute("UPDATE releases SET state = 'void', finished = ? WHERE id = ?", (now(), release))
                conn.execute("DELETE FROM reservations WHERE release_id = ?", (release,))
                tickets.close(conn, release)

    @retried
    def expire_untracked(self) -> int:
        """Releases left open by a tokendp from before tickets (no holder): spent in full, as
        expired. Returns how many."""
        rows = self.conn.execute("SELECT id FROM releases WHERE state = 'open' AND holder IS NULL").fetchall()
        for r in rows:
            with immediate(self.conn) as conn:
                self._close(conn, r["id"], None, "expired")
        return len(rows)

    def ledger(self, tenant: Tenant) -> dict[str, Any]:
        """Every unit: committed spend, open reservations (in flight: they count as spent) and
        the lifetime budget, in RDP at the vault's order, and the units merged into it when
        subject ids became canonical (:mod:`tokendp.service.vault.merge`: each one's old subject
        id and the spend it brought); releases per state (``waiting``, ``open``, ``done``,
        ``failed``, ``expired``, ``void``)."""
        settings = self.settings(tenant)
        merges: dict[str, list[dict[str, Any]]] = {}
        for row in self.conn.execute("SELECT unit, merged, spent, created FROM unit_merges WHERE tenant = ? "
                                     "ORDER BY created, merged", (tenant.name,)).fetchall():
            merges.setdefault(row["unit"], []).append({**describe(row["merged"]), "spent": row["spent"],
                                                       "at": row["created"]})
        units = []
        for row in self.conn.execute("SELECT unit, spent FROM units WHERE tenant = ? ORDER BY unit",
                                     (tenant.name,)).fetchall():
            held = self._outstanding(self.conn, tenant.name, row["unit"])
            units.append({**describe(row["unit"]), "spent": row["spent"], "reserved": held,
                          "remaining": lifetime_reservation(budget=settings.budget, spent=row["spent"],
                                                            outstanding=held, release=settings.budget),
                          "merged": merges.get(row["unit"], [])})
        states = self.conn.execute("SELECT state, COUNT(*) AS n FROM releases WHERE tenant = ? GROUP BY state",
                                   (tenant.name,)).fetchall()
        return {"alpha": settings.alpha, "budget": settings.budget, "epsilon": tenant.budget, "delta": tenant.delta,
                "units": units, "releases": {r["state"]: r["n"] for r in states}}

    def readers(self, tenant: Tenant) -> list[dict[str, Any]]:
        rows = self.conn.execute("SELECT prefix, created, releases_per_day, tokens_per_day FROM api_keys "
                                 "WHERE tenant = ? AND role = 'reader' ORDER BY created", (tenant.name,)).fetchall()
        return [dict(r) for r in rows]

    @retried
    def set_quota(self, tenant: Tenant, prefix: str, *, releases_per_day: int | None,
                  tokens_per_day: int | None) -> bool:
        """Set the quota of the tenant's one reader key with ``prefix``; False if none."""
        with immediate(self.conn) as conn:
            rows = conn.execute("SELECT key_hash FROM api_keys WHERE tenant = ? AND role = 'reader' AND prefix = ?",
                                (tenant.name, prefix)).fetchall()
            if len(rows) > 1:
                raise InvalidParameterError(f"{len(rows)} reader keys have the prefix {prefix!r}")
            if not rows:
                return False
            conn.execute("UPDATE api_keys SET releases_per_day = ?, tokens_per_day = ? WHERE key_hash = ?",
                         (releases_per_day, tokens_per_day, rows[0]["key_hash"]))
        return True


def _locked_state(conn, release: int) -> str | None:
    """The state of ``release`` once its ticket and units are locked (in the caller's write
    transaction), or None when there is no such release."""
    row = conn.execute("SELECT tenant FROM releases WHERE id = ?", (release,)).fetchone()
    if row is None:
        return None
    tickets.lock(conn, row["tenant"], tickets.units_of(conn, release), release)
    return conn.execute("SELECT state FROM releases WHERE id = ?", (release,)).fetchone()["state"]
