"""The tables of the service's database, the same on both backends (:mod:`tokendp.service.db`):
:data:`SCHEMA` with the backend's types for floats and ids left open (:func:`schema`), and the
columns (:data:`MIGRATIONS`) and rewritten data (:data:`DATA_MIGRATIONS`) a database made by an
earlier version gains."""

from __future__ import annotations

import re

SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    name TEXT PRIMARY KEY,
    budget {real} NOT NULL,        -- lifetime epsilon per protected unit
    delta {real} NOT NULL,         -- the delta that budget refers to
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
    id {id},
    tenant TEXT NOT NULL REFERENCES tenants(name),
    kind TEXT NOT NULL,            -- sanitize | synthesize | generate
    state TEXT NOT NULL,           -- reserved | spent | failed | cancelled | interrupted (all count as spent) | void
    created TEXT NOT NULL,
    finished TEXT
);
CREATE TABLE IF NOT EXISTS charges (
    request_id BIGINT NOT NULL REFERENCES requests(id),
    tenant TEXT NOT NULL,
    document TEXT NOT NULL,        -- the client's document (or reference set) id
    grp TEXT NOT NULL,             -- the privacy group
    kind TEXT NOT NULL,            -- rdp | zcdp (service.composition.Charge)
    alpha {real},
    value {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS charges_unit ON charges(tenant, document, grp);
CREATE TABLE IF NOT EXISTS vaults (
    tenant TEXT PRIMARY KEY REFERENCES tenants(name),
    alpha {real} NOT NULL,         -- the vault's Renyi order, fixed at its first use
    budget {real} NOT NULL,        -- every unit's lifetime RDP budget B at alpha
    created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS documents (
    tenant TEXT NOT NULL REFERENCES tenants(name),
    id TEXT NOT NULL,
    version TEXT NOT NULL,         -- random per write: a rewrite is cached per version
    title TEXT NOT NULL,           -- public: readers see it
    text TEXT NOT NULL,            -- private: only owner keys read it
    spans TEXT NOT NULL,           -- JSON [{{start, end, label, subject?}}], offsets into text as given
    subject TEXT,                  -- the default subject of spans without one
    state TEXT NOT NULL,           -- draft (tagged by the server, to confirm) | confirmed
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE TABLE IF NOT EXISTS units (
    tenant TEXT NOT NULL REFERENCES tenants(name),
    unit TEXT NOT NULL,            -- service.vault.units.unit_key: a subject, or (document, label)
    spent {real} NOT NULL,         -- committed spend, an upper bound of the exact charges
    PRIMARY KEY (tenant, unit)
);
CREATE TABLE IF NOT EXISTS releases (
    id {id},                       -- a release's ticket: its place in the tenant's arrival order
    tenant TEXT NOT NULL REFERENCES tenants(name),
    document TEXT NOT NULL,
    version TEXT NOT NULL,
    params TEXT NOT NULL,          -- canonical JSON of the release's public parameters
    reader TEXT NOT NULL,          -- the asking key's hash (quotas)
    tokens INTEGER NOT NULL,       -- T, counted against the key's tokens per day (0 until planned)
    state TEXT NOT NULL,           -- waiting | open (reserved) | done | failed | expired | void
    created TEXT NOT NULL,
    finished TEXT
    -- holder: added by MIGRATIONS
);
CREATE INDEX IF NOT EXISTS releases_reader ON releases(reader, created);
CREATE TABLE IF NOT EXISTS reservations (
    release_id BIGINT NOT NULL REFERENCES releases(id),
    tenant TEXT NOT NULL,
    unit TEXT NOT NULL,
    reserved {real} NOT NULL,      -- r_u = min(B_rel, what u has left), rounded down
    spent {real}                   -- what the release spent of it (NULL while open)
);
CREATE INDEX IF NOT EXISTS reservations_unit ON reservations(tenant, unit);
CREATE TABLE IF NOT EXISTS tickets (
    release_id BIGINT NOT NULL REFERENCES releases(id),
    tenant TEXT NOT NULL,
    unit TEXT NOT NULL             -- one row per unit of a release not yet closed (waiting or open)
);
CREATE INDEX IF NOT EXISTS tickets_unit ON tickets(tenant, unit, release_id);
CREATE INDEX IF NOT EXISTS tickets_release ON tickets(release_id);
CREATE TABLE IF NOT EXISTS holders (
    id TEXT PRIMARY KEY,           -- a server process (random per start)
    beat {real} NOT NULL,          -- its last heartbeat, on the database's clock (seconds)
    lease {real} NOT NULL          -- its tickets expire this long after its last heartbeat
);
CREATE TABLE IF NOT EXISTS unit_merges (
    tenant TEXT NOT NULL REFERENCES tenants(name),
    unit TEXT NOT NULL,            -- the unit a subject's old unit was merged into (its canonical id)
    merged TEXT NOT NULL,          -- the old unit's key, its subject id as stored before
    spent {real} NOT NULL,         -- the old unit's committed spend, added to the unit's
    created TEXT NOT NULL
);
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
    ("releases", "holder", "TEXT"),
)


def _merge_subjects(conn) -> None:
    """Subject ids to their canonical form, units merged with their spends added
    (:mod:`tokendp.service.vault.merge`, imported only when a database needs it)."""
    from tokendp.service.vault.merge import merge_subjects

    merge_subjects(conn)


# Data a database made by an earlier version needs rewritten: (table, function of a connection).
# Each function runs once, in the transaction that creates its table (its mark), under the lock
# that transaction holds (SQLite's write lock; PostgreSQL's advisory lock on the schema); a new
# database, which has nothing to rewrite, skips it.
DATA_MIGRATIONS = (("unit_merges", _merge_subjects),)


def schema(real: str, id: str) -> list[str]:
    """:data:`SCHEMA`'s statements with the backend's types for floats and ids."""
    text = SCHEMA.format(real=real, id=id)
    text = re.sub(r"--[^\n]*", "", text)
    return [s.strip() for s in text.split(";") if s.strip()]
