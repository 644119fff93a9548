"""The service under interruption (issue 33, item 6): a job whose client goes is cancelled at its
next token (its reservation stays spent once a token was sampled; one cancelled before its first
token is voided, one cancelled before it was planned is never charged), and the first Ctrl-C
shuts the server down at once and cleanly, cancelling the jobs still running."""

from __future__ import annotations

import queue
import signal
import sqlite3
import threading
import time

import pytest

from tokendp.service import batching
from tokendp.service.batching import END, Job, Worker
from tokendp.service.keys import create_key
from tokendp.service.schemas import SanitizeRequest
from tokendp.service.store import BudgetStore

from tests.service.conftest import LETTER, PERSONS, Server, auth, epsilon_after, make_key

LONG = {"text": LETTER, "spans": PERSONS, "beta": 0.01, "alpha": 2.0, "max_new_tokens": 400}


# ------------------------------------------------------------------------------ in process
@pytest.fixture()
def worker(tmp_path, monkeypatch):
    """A worker on the tiny model whose documents never end before T (no end of text)."""
    import tokendp.generation as generation
    from tokendp.backends import load_backend
    from tokendp.text.taggers import get_tagger

    init = generation._StopChecker.__init__
    monkeypatch.setattr(generation._StopChecker, "__init__",
                        lambda self, tok, eos, stops, limits, *rest: init(self, tok, set(), (), limits, *rest))
    store = BudgetStore(tmp_path / "service.db")
    _, tenant = create_key(store.conn, "t", budget=100.0)
    worker = Worker(lambda: (load_backend("tiny"), get_tagger("patterns")), store, max_tokens=64)
    worker.start()
    yield worker, store, tenant
    worker.stop()


class CancelAfter(queue.Queue):
    """A job's token queue whose client goes after ``n`` pieces of text."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.job = n, None

    def put(self, item, *args, **kwargs) -> None:
        super().put(item, *args, **kwargs)
        if item is not END and self.qsize() == self.n:
            self.job.cancel("the client disconnected")


def _job(tenant, tokens=None) -> Job:
    request = SanitizeRequest(id="doc", text=LETTER, spans=PERSONS, epsilon=2, max_new_tokens=60, stream=True)
    return Job("sanitize", request, tenant, tokens=tokens)


def test_a_job_whose_client_goes_stops_at_its_next_token_and_stays_spent(worker):
    worker, store, tenant = worker
    tokens = CancelAfter(3)
    job = tokens.job = _job(tenant, tokens)
    worker.submit(job)
    assert isinstance(job.future.exception(timeout=300), batching.Cancelled)
    pieces = []
    while (piece := tokens.get(timeout=5)) is not END:
        pieces.append(piece)
    assert len(pieces) == 3  # the token after the third was sampled, then the job stopped
    assert job.charged is True and store.requests(tenant) == {"cancelled": 1}
    (unit,) = store.units(tenant, "doc")
    assert unit.spent == pytest.approx(2.0)


def test_a_job_cancelled_before_its_first_token_is_voided(worker, monkeypatch):
    worker, store, tenant = worker
    job = _job(tenant, queue.Queue())
    reserve = store.reserve

    def reserve_then_go(*args, **kwargs):
        rid = reserve(*args, **kwargs)
        job.cancel("the client disconnected")
        return rid

    monkeypatch.setattr(store, "reserve", reserve_then_go)
    worker.submit(job)
    assert isinstance(job.future.exception(timeout=300), batching.Cancelled)
    assert job.tokens.get(timeout=5) is END
    assert job.charged is False and store.units(tenant, "doc") == [] and store.requests(tenant) == {"void": 1}


def test_a_job_cancelled_before_it_is_planned_is_never_charged(worker):
    worker, store, tenant = worker
    job = _job(tenant)
    job.cancel("the client disconnected")
    worker.submit(job)
    assert isinstance(job.future.exception(timeout=300), batching.Cancelled)
    assert store.requests(tenant) == {} and store.units(tenant, "doc") == []


# ------------------------------------------------------------------------------ a real server
try:
    import httpx
except ImportError:  # the server tests skip (Server.start says why)
    httpx = None


@pytest.fixture(scope="module")
def slow_service(tmp_path_factory):
    """A server whose model takes 50 ms a token and never stops before T (400: 20 s a job)."""
    root = tmp_path_factory.mktemp("slow")
    db = root / "service.db"
    keys = {name: make_key(db, name, 100.0) for name in ("stream", "plain")}
    server = Server(db, root / "server.log", "--rate-limit", "1000", slow=True).start()
    yield server, keys
    server.stop()


def _states(server, key, want, timeout=15.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        got = httpx.get(server.url + "/v1/budget", headers=auth(key)).json()["requests"]
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


@pytest.mark.slow
def test_a_stream_whose_client_goes_is_cancelled_at_once(slow_service):
    server, keys = slow_service
    body = {**LONG, "id": "gone-stream", "stream": True}
    with httpx.stream("POST", server.url + "/v1/sanitize", json=body, headers=auth(keys["stream"]), timeout=60) as r:
        assert r.status_code == 200
        assert any(line == "event: token" for line in r.iter_lines())  # generating: then the client goes
    assert _states(server, keys["stream"], {"cancelled": 1}) == {"cancelled": 1}  # 20 s to T otherwise
    (unit,) = httpx.get(server.url + "/v1/budget", headers=auth(keys["stream"])).json()["units"]
    assert unit["epsilon_spent"] == pytest.approx(epsilon_after(1, LONG), rel=1e-12)


@pytest.mark.slow
def test_a_plain_request_whose_client_goes_is_cancelled(slow_service):
    server, keys = slow_service
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/sanitize", json={**LONG, "id": "gone-plain"}, headers=auth(keys["plain"]),
                   timeout=2.0)
    assert _states(server, keys["plain"], {"cancelled": 1}) == {"cancelled": 1}


@pytest.mark.slow
def test_the_first_ctrl_c_cancels_running_jobs_and_exits_cleanly(tmp_path):
    db = tmp_path / "service.db"
    key = make_key(db, "t", 100.0)
    server = Server(db, tmp_path / "server.log", slow=True).start()
    answers = []
    client = threading.Thread(target=lambda: answers.append(httpx.post(
        server.url + "/v1/sanitize", json={**LONG, "id": "at-shutdown"}, headers=auth(key), timeout=60)))
    try:
        client.start()
        assert _states(server, key, {"reserved": 1}) == {"reserved": 1}  # generating
        time.sleep(0.3)
        server.proc.send_signal(signal.SIGINT)
        server.proc.wait(timeout=15)  # the job alone would take 20 s
    finally:
        server.stop()
        client.join(timeout=30)
    log = server.log.read_text()
    assert server.proc.returncode == 0, log[-2000:]
    assert "Traceback" not in log and "terminate called" not in log, log[-2000:]
    (answer,) = answers
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "shutting_down"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT state FROM requests").fetchall() == [("cancelled",)]
