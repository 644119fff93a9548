"""A vault made before subject ids had one form (docs/vault.md, "Subjects"): its subjects
rewritten canonical (:func:`~tokendp.service.vault.units.canonical_subject`), and units whose
canonical ids coincide merged into one, their spends ADDED (never reset).

:func:`merge_subjects` runs once per database, in the transaction that creates the
``unit_merges`` table (:data:`tokendp.service.db.schema.DATA_MIGRATIONS`), which holds the
write lock (SQLite) or the schema's advisory lock (PostgreSQL) before any server process of
this version reads the vault. Each merge is recorded in ``unit_merges``, which the owner's
ledger shows under the unit it went into.

A subject id the canonical form refuses (a control character, or nothing but white space and
invisible characters) could only come from a version that stored it unchecked: it keeps its
unit, as before. Open reservations and tickets of a merged unit (of a server that died before
this version started) move with it, so what they hold counts against the merged unit.
"""

from __future__ import annotations

import json
from collections import defaultdict
from fractions import Fraction
from typing import Any

from tokendp.accounting._rounding import ceil_float
from tokendp.errors import InvalidInputError
from tokendp.service.keys import now
from tokendp.service.vault.units import canonical_subject, subject_key


def merge_subjects(conn: Any) -> None:
    """Rewrite every stored subject id canonical and merge the units that then coincide (in the
    caller's write transaction)."""
    when = now()
    for row in conn.execute("SELECT tenant, id, subject, spans FROM documents").fetchall():
        spans = json.loads(row["spans"])
        canonical = [{**s, "subject": _canonical(s["subject"])} if s.get("subject") is not None else s for s in spans]
        subject = None if row["subject"] is None else _canonical(row["subject"])
        if canonical != spans or subject != row["subject"]:
            conn.execute("UPDATE documents SET subject = ?, spans = ? WHERE tenant = ? AND id = ?",
                         (subject, json.dumps(canonical, ensure_ascii=False), row["tenant"], row["id"]))
    moved: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)  # (tenant, new key) -> [(old, spent)]
    for row in conn.execute("SELECT tenant, unit, spent FROM units").fetchall():
        kind, *rest = json.loads(row["unit"])
        if kind == "subject":
            moved[(row["tenant"], subject_key(_canonical(rest[0])))].append((row["unit"], row["spent"]))
    for (tenant, key), old in sorted(moved.items()):
        if [unit for unit, _ in old] == [key]:
            continue
        spent = ceil_float(sum((Fraction(s) for _, s in old), Fraction(0)))
        for unit, _ in old:
            conn.execute("DELETE FROM units WHERE tenant = ? AND unit = ?", (tenant, unit))
        conn.execute("INSERT INTO units (tenant, unit, spent) VALUES (?, ?, ?)", (tenant, key, spent))
        for unit, was in old:
            if unit != key:
                conn.execute("INSERT INTO unit_merges (tenant, unit, merged, spent, created) VALUES (?, ?, ?, ?, ?)",
                             (tenant, key, unit, was, when))
        _move_holds(conn, tenant, [unit for unit, _ in old], key)


def _canonical(subject: str) -> str:
    try:
        return canonical_subject(subject)
    except InvalidInputError:
        return subject


def _move_holds(conn: Any, tenant: str, units: list[str], key: str) -> None:
    """Tickets and reservations of ``units`` now of ``key``: one ticket row per release, and one
    reservation per release holding the sum of what it held of them (rounded up)."""
    marks = ", ".join("?" * len(units))
    releases = {r["release_id"] for r in conn.execute(
        f"SELECT release_id FROM tickets WHERE tenant = ? AND unit IN ({marks})", (tenant, *units)).fetchall()}
    conn.execute(f"DELETE FROM tickets WHERE tenant = ? AND unit IN ({marks})", (tenant, *units))
    conn.executemany("INSERT INTO tickets (release_id, tenant, unit) VALUES (?, ?, ?)",
                     [(r, tenant, key) for r in sorted(releases)])
    held: dict[int, list[Any]] = defaultdict(list)
    for r in conn.execute(f"SELECT release_id, reserved, spent FROM reservations WHERE tenant = ? AND unit IN ({marks})",
                          (tenant, *units)).fetchall():
        held[r["release_id"]].append(r)
    conn.execute(f"DELETE FROM reservations WHERE tenant = ? AND unit IN ({marks})", (tenant, *units))
    for release, rows in sorted(held.items()):
        spent = None if any(r["spent"] is None for r in rows) else _sum_up(r["spent"] for r in rows)
        conn.execute("INSERT INTO reservations (release_id, tenant, unit, reserved, spent) VALUES (?, ?, ?, ?, ?)",
                     (release, tenant, key, _sum_up(r["reserved"] for r in rows), spent))


def _sum_up(values) -> float:
    return ceil_float(sum((Fraction(v) for v in values), Fraction(0)))
