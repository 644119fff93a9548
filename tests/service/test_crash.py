"""``kill -9`` during a generation: after a restart the reservation is still there, spent."""

from __future__ import annotations

import pytest

httpx = pytest.importorskip("httpx", reason="the service tests need httpx (the dev extra)")

from tests.service.conftest import LETTER, PERSONS, Server, auth, epsilon_after, make_key  # noqa: E402

pytestmark = pytest.mark.slow

LONG = {"id": "letter-crash", "text": LETTER, "spans": PERSONS, "beta": 0.01, "alpha": 2.0, "max_new_tokens": 400,
        "stream": True}


def test_a_reservation_survives_kill_9_during_generation_and_counts_after_restart(tmp_path):
    db = tmp_path / "crash.db"
    key = make_key(db, "acme", (epsilon_after(1, LONG) + epsilon_after(2, LONG)) / 2)
    server = Server(db, tmp_path / "server.log", "--rate-limit", "5").start()
    try:
        server.kill9_while_streaming("POST", "/v1/sanitize", key, json=LONG)
    finally:
        server.stop()
    assert server.proc.returncode == -9

    server = Server(db, tmp_path / "server.log", "--rate-limit", "5").start()
    try:
        budget = httpx.get(server.url + "/v1/budget", headers=auth(key)).json()
        (unit,) = budget["units"]
        assert (unit["id"], unit["group"], unit["requests"]) == ("letter-crash", "PERSON", 1)
        assert unit["epsilon_spent"] == pytest.approx(epsilon_after(1, LONG), rel=1e-12)
        assert budget["requests"] == {"interrupted": 1}
        again = httpx.post(server.url + "/v1/sanitize", json={**LONG, "stream": False}, headers=auth(key))
        assert again.status_code == 403 and again.json()["error"]["code"] == "budget_exceeded"

        # requests per tenant per minute: 2 calls so far, the limit is 5
        codes = [httpx.get(server.url + "/v1/budget", headers=auth(key)).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        limited = httpx.get(server.url + "/v1/budget", headers=auth(key))
        assert limited.json()["error"]["code"] == "rate_limited" and int(limited.headers["retry-after"]) >= 1
    finally:
        server.stop()
