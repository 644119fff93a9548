"""Tenants and API keys.

A key is 32 random bytes (``secrets``), shown once as ``tdp_<base64url>``; the database keeps
its SHA-256 only. A key of that entropy needs no slow password hash: nobody can search 2^256
preimages, and a plain hash lets authentication be one indexed lookup.

Every key has a role within its tenant (docs/vault.md): ``owner`` (everything: documents, the
ledger, quotas, and the per-request API) or ``reader`` (only releases of stored documents, within
its own quota). Keys made before roles existed are owner keys.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone

from tokendp.errors import InvalidParameterError
from tokendp.service.db.connection import Connection, immediate

KEY_PREFIX = "tdp_"
DEFAULT_BUDGET = 10.0
DEFAULT_DELTA = 1e-5
ROLES = ("owner", "reader")


@dataclass(frozen=True)
class Tenant:
    """A tenant: its lifetime epsilon per protected unit, at ``delta``."""

    name: str
    budget: float
    delta: float


@dataclass(frozen=True)
class Caller:
    """An authenticated key: its tenant, its role, and its hash (which names it in quotas and
    releases; never the key itself)."""

    tenant: Tenant
    role: str
    key_hash: str
    prefix: str


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _check_tenant(name: str, budget: float, delta: float) -> None:
    if not name or len(name) > 64 or not all(c.isalnum() or c in "-_." for c in name):
        raise InvalidParameterError("a tenant name is 1-64 letters, digits, '-', '_' or '.'")
    if not (math.isfinite(budget) and budget >= 0):
        raise InvalidParameterError(f"--budget (lifetime epsilon per protected unit) must be a finite number >= 0, got {budget!r}")
    if not 0 < delta < 1:
        raise InvalidParameterError(f"--delta must be in (0, 1), for example 1e-5; got {delta!r}")


def create_key(conn: Connection, tenant: str, *, budget: float | None = None,
               delta: float | None = None, role: str = "owner") -> tuple[str, Tenant]:
    """A new key with ``role`` (owner or reader) for ``tenant``, creating the tenant (with
    ``budget`` and ``delta``, or the defaults) if it does not exist. An existing tenant's budget
    is fixed: giving a different one is an error, since raising it would quietly re-open every
    unit's budget."""
    if role not in ROLES:
        raise InvalidParameterError(f"--role must be owner or reader, got {role!r}")
    with immediate(conn):
        row = conn.execute("SELECT budget, delta FROM tenants WHERE name = ?", (tenant,)).fetchone()
        if row is None:
            budget = DEFAULT_BUDGET if budget is None else float(budget)
            delta = DEFAULT_DELTA if delta is None else float(delta)
            _check_tenant(tenant, budget, delta)
            conn.execute("INSERT INTO tenants (name, budget, delta, created) VALUES (?, ?, ?, ?)",
                         (tenant, budget, delta, now()))
        else:
            for what, given, stored in (("budget", budget, row["budget"]), ("delta", delta, row["delta"])):
                if given is not None and float(given) != stored:
                    raise InvalidParameterError(
                        f"tenant {tenant!r} exists with {what} {stored:g}; a tenant's {what} is fixed when it is "
                        f"created (omit --{what} to add a key, or create a new tenant)")
            budget, delta = row["budget"], row["delta"]
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        conn.execute("INSERT INTO api_keys (key_hash, prefix, tenant, created, role) VALUES (?, ?, ?, ?, ?)",
                     (hash_key(key), key[:10], tenant, now(), role))
    return key, Tenant(tenant, budget, delta)


def list_keys(conn: Connection) -> list[dict]:
    """Every key's prefix, tenant, role and creation time, with its tenant's budget (no hash, no key)."""
    rows = conn.execute("SELECT k.prefix, k.tenant, k.role, k.created, t.budget, t.delta FROM api_keys k "
                        "JOIN tenants t ON t.name = k.tenant ORDER BY k.tenant, k.created").fetchall()
    return [dict(row) for row in rows]


def revoke_key(conn: Connection, prefix: str) -> str:
    """Delete the one key whose listed prefix is ``prefix``; its tenant. The tenant and every
    charge stay: a new key for the tenant continues the same budgets."""
    with immediate(conn):
        rows = conn.execute("SELECT key_hash, tenant FROM api_keys WHERE prefix = ?", (prefix,)).fetchall()
        if len(rows) != 1:
            raise InvalidParameterError(f"{len(rows)} keys have the prefix {prefix!r}; give one from `tokendp keys list`"
                                        if rows else f"no key has the prefix {prefix!r} (see `tokendp keys list`)")
        conn.execute("DELETE FROM api_keys WHERE key_hash = ?", (rows[0]["key_hash"],))
    return rows[0]["tenant"]


def authenticate(conn: Connection, key: str) -> Caller | None:
    """The key's tenant and role, or None."""
    digest = hash_key(key)
    row = conn.execute(
        "SELECT t.name, t.budget, t.delta, k.role, k.prefix FROM api_keys k JOIN tenants t ON t.name = k.tenant "
        "WHERE k.key_hash = ?", (digest,)).fetchone()
    if row is None:
        return None
    return Caller(Tenant(row["name"], row["budget"], row["delta"]), row["role"], digest, row["prefix"])
