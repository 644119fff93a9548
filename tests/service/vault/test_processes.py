"""The vault's ledger across processes (docs/vault.md, "Crashes and concurrency"), on both
backends: two ``tokendp serve`` processes on one SQLite file, and on one PostgreSQL database.

- two readers asking at once about three documents that share a subject: never past its
  lifetime budget, charged exactly what the releases spent; every unit's spend kept across a
  restart;
- releases of one subject in arrival order: a short release arriving second, on the other
  server, waits (its ticket ``waiting``) while a long one runs, and reserves on what the long
  one's commit left;
- a release cut off by ``kill -9`` keeps its ticket until the dead server's lease lapses; the
  next release of its subject then expires it (its reservation spent in full) and goes on.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from urllib.parse import urlsplit

import httpx
import pytest

from tests.service.conftest import Server, auth
from tests.service.postgres import postgres_server, vault_db  # noqa: F401 (fixtures)
from tests.service.vault.helpers import RELEASE, SUBJECT, call, document, ledger, make_keys, rewrite, unit
from tokendp.accounting import lifetime_reservation

pytestmark = pytest.mark.slow
SUBJECT_UNIT = json.dumps(["subject", SUBJECT])
FAST = ("--rate-limit", "1000", "--max-new-tokens", "400")


def no_password_in_logs(db, folder) -> None:
    """A DSN's password never reaches a server's log."""
    password = urlsplit(str(db)).password
    assert password is None or all(password not in log.read_text() for log in folder.glob("*.log"))


def rows(db, sql: str, params=()) -> list[dict]:
    from tokendp.service.db import open_db

    conn = open_db(db)
    try:
        return [dict(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def test_two_processes_and_two_readers_never_overspend_a_shared_subject_and_a_restart_keeps_it(vault_db, tmp_path):
    db = vault_db
    owner, first_reader, second_reader = make_keys(db, "clinic", "owner", "reader", "reader")
    servers = [Server(db, tmp_path / f"server{i}.log", "--rate-limit", "1000", "--max-new-tokens", "12").start()
               for i in range(2)]
    try:
        for id in ("d1", "d2", "d3"):
            assert call(servers[0], "POST", "/v1/documents", owner, json=document(id)).status_code == 201
        # (server, reader, document, T): every (document, T) once, so that none is a cached release
        asks = [(servers[i % 2], (first_reader, second_reader)[i // 2 % 2], f"d{1 + i % 3}", 4 + i % 8)
                for i in range(12)]
        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda a: rewrite(a[0], a[1], a[2], max_new_tokens=a[3]), asks))
        assert [r.status_code for r in replies] == [200] * len(asks)  # never refused for a budget
        book = ledger(servers[1], owner)
        subject = unit(book, subject=SUBJECT)
        assert subject["reserved"] == 0 and book["releases"] == {"done": len(asks)}
        held = rows(db, "SELECT reserved, spent FROM reservations WHERE unit = ?", (SUBJECT_UNIT,))
        assert len(held) == len(asks)
        exact = sum((Fraction(r["spent"]) for r in held), Fraction(0))
        assert exact <= Fraction(subject["spent"]) <= Fraction(book["budget"])  # never past the lifetime budget
        assert float(exact) == pytest.approx(subject["spent"], rel=1e-12)  # charged exactly what was spent
        assert all(r["spent"] <= r["reserved"] for r in held)
        assert sum(r["reserved"] for r in held) > book["budget"]  # releases asked for more than B in all
        assert rows(db, "SELECT COUNT(*) AS n FROM tickets") == [{"n": 0}]  # every ticket closed

        servers[0].stop()
        servers[0] = Server(db, tmp_path / "server0.log", "--rate-limit", "1000", "--max-new-tokens", "12").start()
        assert ledger(servers[0], owner)["units"] == book["units"]  # a restart keeps every unit's spend
    finally:
        for server in servers:
            server.stop()
    no_password_in_logs(db, tmp_path)


def test_a_short_release_arriving_second_reserves_after_the_long_one_commits(vault_db, tmp_path):
    db = vault_db
    owner, first_reader, second_reader = make_keys(db, "clinic", "owner", "reader", "reader")
    slow = Server(db, tmp_path / "slow.log", *FAST, slow=True).start()  # 50 ms a token, never stops early
    fast = Server(db, tmp_path / "fast.log", *FAST).start()
    try:
        for id in ("long", "short"):
            assert call(fast, "POST", "/v1/documents", owner, json=document(id)).status_code == 201
        short: dict = {}

        def ask_short() -> None:
            short["reply"] = rewrite(fast, second_reader, "short", max_new_tokens=3)
            short["at"] = time.monotonic()

        asker = threading.Thread(target=ask_short)
        seen = None
        with httpx.stream("GET", slow.url + "/v1/documents/long/rewrite", headers=auth(first_reader), timeout=180,
                          params={"epsilon": RELEASE, "max_new_tokens": 200, "stream": "true"}) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            for line in lines:
                if line == "event: token":  # the long release has reserved and is generating
                    break
            asker.start()  # the short one arrives second, at the other server
            deadline = time.monotonic() + 60
            while seen is None and time.monotonic() < deadline:
                book = ledger(fast, owner)
                if book["releases"].get("waiting"):
                    seen = book["releases"]
                time.sleep(0.1)
            for line in lines:
                pass
        committed = time.monotonic()
        asker.join(timeout=120)
        assert seen == {"open": 1, "waiting": 1}  # it waited, not reserved beside the long one
        assert short["reply"].status_code == 200 and short["at"] >= committed - 5
        long_id, short_id = (rows(db, "SELECT id FROM releases WHERE document = ?", (d,))[0]["id"]
                             for d in ("long", "short"))
        assert long_id < short_id
        first = rows(db, "SELECT reserved, spent FROM reservations WHERE release_id = ? AND unit = ?",
                     (long_id, SUBJECT_UNIT))[0]
        second = rows(db, "SELECT reserved FROM reservations WHERE release_id = ? AND unit = ?",
                      (short_id, SUBJECT_UNIT))[0]
        book = ledger(fast, owner)
        budget, release = book["budget"], first["reserved"]  # the long one's B_rel (its subject had all of B)
        # The short release reserved on the ledger the long one's commit left, nothing outstanding.
        assert second["reserved"] == lifetime_reservation(budget=budget, spent=first["spent"], outstanding=0.0,
                                                          release=release)
        assert book["releases"] == {"done": 2}
    finally:
        slow.stop()
        fast.stop()


def test_a_killed_servers_ticket_expires_with_its_reservation_spent_and_unblocks_the_subject(vault_db, tmp_path):
    db = vault_db
    owner, reader = make_keys(db, "clinic", "owner", "reader")
    lease = ("--vault-lease", "2")
    doomed = Server(db, tmp_path / "doomed.log", *FAST, *lease, slow=True).start()
    survivor = Server(db, tmp_path / "survivor.log", *FAST, *lease).start()
    try:
        assert call(survivor, "POST", "/v1/documents", owner, json=document("d1")).status_code == 201
        doomed.kill9_while_streaming("GET", "/v1/documents/d1/rewrite", reader,
                                     params={"epsilon": RELEASE, "max_new_tokens": 400, "stream": "true"})
        book = ledger(survivor, owner)
        held = unit(book, subject=SUBJECT)
        assert book["releases"] == {"open": 1} and held["reserved"] > 0 and held["spent"] == 0
        # The next release of the subject waits for the dead server's lease, expires its ticket, goes on.
        assert rewrite(survivor, reader, "d1", max_new_tokens=3).status_code == 200
        book = ledger(survivor, owner)
        assert book["releases"] == {"expired": 1, "done": 1}
        cut = rows(db, "SELECT r.reserved, r.spent FROM reservations r JOIN releases l ON l.id = r.release_id "
                       "WHERE l.state = 'expired' AND r.unit = ?", (SUBJECT_UNIT,))[0]
        assert cut["spent"] == cut["reserved"] == held["reserved"]  # a crash is never voided
        assert unit(book, subject=SUBJECT)["spent"] >= held["reserved"]
    finally:
        doomed.stop()
        survivor.stop()
    no_password_in_logs(db, tmp_path)
