"""The service as a real process: ``python -m tokendp serve`` on 127.0.0.1, a free port, the
embedded ``tiny`` model and a fresh SQLite file per server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


SRC = Path(__file__).resolve().parents[2] / "src"
START_TIMEOUT_S = 180
LETTER = "Dear Dr Helen Marsh, I am writing about my patient Mr Tomas Lindqvist, admitted on 2 June 2024."
PERSONS = [{"start": 5, "end": 19, "label": "PERSON"}, {"start": 51, "end": 69, "label": "PERSON"}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ``tokendp serve`` whose model takes at least 50 ms a token and never stops before T (no end of
# text, no stop string), so that a test can act while a job is still generating.
SLOW_SERVE = """
import sys, time
import tokendp.generation as generation
from tokendp.backends import HFBackend
from tokendp.cli import main

init, extend = generation._StopChecker.__init__, HFBackend.extend
generation._StopChecker.__init__ = lambda self, tok, eos, stops, limits, *rest: init(self, tok, set(), (), limits, *rest)
HFBackend.extend = lambda self, *a, **k: (time.sleep(0.05), extend(self, *a, **k))[1]
main(sys.argv[1:], prog_name="tokendp")
"""


class Server:
    """One ``tokendp serve`` process on ``db``; :meth:`start` waits for /healthz to say ok.
    ``slow``: the model of :data:`SLOW_SERVE`."""

    def __init__(self, db: Path, log: Path, *args: str, slow: bool = False) -> None:
        self.db, self.log, self.args, self.slow = db, log, args, slow
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> Server:
        pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'tokendp[serve]')")
        httpx = pytest.importorskip("httpx", reason="the service tests need httpx (the dev extra)")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *(["-c", SLOW_SERVE] if self.slow else ["-m", "tokendp"]), "serve", "--host",
                 "127.0.0.1", "--port", str(port),
                 "--db", str(self.db), "--model", "tiny", "--tagger", "auto", *self.args],
                stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tokendp serve exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).json()["status"] == "ok":
                    return self
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("tokendp serve did not become healthy in time")

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def kill9_while_streaming(self, method: str, path: str, key: str, **request) -> None:
        """Stream ``method path`` with ``key`` and kill -9 the server at the first token (the
        reservation is committed and the job is generating); fails if no token comes."""
        import httpx

        try:
            with httpx.stream(method, self.url + path, headers=auth(key), timeout=120, **request) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    if line == "event: token":
                        self.kill9()
                        return
                pytest.fail("no token was streamed")
        except httpx.HTTPError:
            pass  # the connection died with the server

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill9()


def make_key(db: Path, tenant: str, budget: float, delta: float = 1e-5) -> str:
    from tokendp.service.db import open_db
    from tokendp.service.keys import create_key

    conn = open_db(db)
    try:
        return create_key(conn, tenant, budget=budget, delta=delta)[0]
    finally:
        conn.close()


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# The shared server: tenant "acme" admits exactly FIVE requests of FIVE_REQUEST on one unit.
FIVE_REQUEST = {"text": LETTER, "spans": PERSONS, "beta": 0.05, "alpha": 2.0, "max_new_tokens": 4}


def charge_of(request: dict) -> float:
    """The RDP value one FIVE_REQUEST-like request charges its unit (one group, order alpha)."""
    from tokendp.accounting import dp_fusion_rdp_per_token

    return request["max_new_tokens"] * dp_fusion_rdp_per_token(alpha=request["alpha"], beta=request["beta"], groups=1)


def epsilon_after(k: int, request: dict, delta: float = 1e-5) -> float:
    from tokendp.service.composition import Charge, epsilon

    return epsilon([Charge("rdp", charge_of(request), request["alpha"])] * k, delta=delta)


@pytest.fixture(scope="session")
def service(tmp_path_factory):
    """(server, keys): a server with tenants acme (admits 5 FIVE_REQUESTs per unit), other and page."""
    root = tmp_path_factory.mktemp("service")
    db = root / "service.db"
    keys = {"acme": make_key(db, "acme", (epsilon_after(5, FIVE_REQUEST) + epsilon_after(6, FIVE_REQUEST)) / 2),
            "other": make_key(db, "other", 100.0), "page": make_key(db, "page", 40.0)}
    server = Server(db, root / "server.log", "--rate-limit", "1000", "--max-body-bytes", "20000",
                    "--max-new-tokens", "64").start()
    yield server, keys
    server.stop()


def sse_events(response) -> list[tuple[str | None, dict]]:
    """A streamed response's server-sent events: (event name, its JSON data), in order."""
    out, name = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            out.append((name, json.loads(line[6:])))
    return out
