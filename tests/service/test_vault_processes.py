"""The vault's ledger across processes (docs/vault.md, "Crashes and concurrency"): two ``tokendp
serve`` processes on one SQLite file, two readers asking at once about three documents that share
a subject, never past its lifetime budget and charged exactly what the releases spent; every
unit's spend kept across a restart; a release cut off by ``kill -9`` stays reserved, as spent."""

from __future__ import annotations

import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import httpx
import pytest

from tests.service.conftest import Server, auth
from tests.service.vault_helpers import SUBJECT, call, document, ledger, make_keys, rewrite, unit

pytestmark = pytest.mark.slow
SUBJECT_UNIT = json.dumps(["subject", SUBJECT])


def test_two_processes_and_two_readers_never_overspend_a_shared_subject_and_a_restart_keeps_it(tmp_path):
    db = tmp_path / "vault.db"
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
        with sqlite3.connect(db) as conn:
            rows = conn.execute("SELECT reserved, spent FROM reservations WHERE unit = ?", (SUBJECT_UNIT,)).fetchall()
        assert len(rows) == len(asks)
        exact = sum((Fraction(s) for _, s in rows), Fraction(0))
        assert exact <= Fraction(subject["spent"]) <= Fraction(book["budget"])  # never past the lifetime budget
        assert float(exact) == pytest.approx(subject["spent"], rel=1e-12)  # charged exactly what was spent
        assert all(s <= r for r, s in rows)
        assert sum(r for r, _ in rows) > book["budget"]  # releases asked for more than B in all: the budget bound

        servers[0].stop()
        servers[0] = Server(db, tmp_path / "server0.log", "--rate-limit", "1000", "--max-new-tokens", "12").start()
        assert ledger(servers[0], owner)["units"] == book["units"]  # a restart keeps every unit's spend
    finally:
        for server in servers:
            server.stop()


def test_a_release_cut_off_by_kill_9_stays_reserved_as_spent(tmp_path):
    db = tmp_path / "crash.db"
    owner, reader = make_keys(db, "clinic", "owner", "reader")
    server = Server(db, tmp_path / "server.log", "--rate-limit", "1000", "--max-new-tokens", "400", slow=True).start()
    try:
        assert call(server, "POST", "/v1/documents", owner, json=document("d1")).status_code == 201
        with httpx.stream("GET", server.url + "/v1/documents/d1/rewrite", headers=auth(reader), timeout=120,
                          params={"epsilon": 3, "max_new_tokens": 400, "stream": "true"}) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line == "event: token":  # generating: the reservation is committed
                    server.kill9()
                    break
            else:
                pytest.fail("no token was streamed")
    except httpx.HTTPError:
        pass  # the connection died with the server
    finally:
        server.stop()
    server = Server(db, tmp_path / "server.log", "--rate-limit", "1000", "--max-new-tokens", "400").start()
    try:
        book = ledger(server, owner)
        held = unit(book, subject=SUBJECT)
        assert held["spent"] == 0 and held["reserved"] > 0 and book["releases"] == {"open": 1}
        assert held["remaining"] <= book["budget"] - held["reserved"]
        assert rewrite(server, reader, "d1", max_new_tokens=3).status_code == 200  # still released, never refused
    finally:
        server.stop()
