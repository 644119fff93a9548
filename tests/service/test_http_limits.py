"""Issue 25's limits against a real ``tokendp serve`` over HTTP: the body's bytes are counted
whatever its framing, /v1/tag is capped and runs beside the model, the rate is per tenant,
failed authentication is limited per address, and the database files are 0600.

Inconsistent framing (Content-Length with Transfer-Encoding) goes over a raw socket: httpx
will not send it."""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest

httpx = pytest.importorskip("httpx", reason="the service tests need httpx (the dev extra)")

from tests.service.conftest import FIVE_REQUEST, LETTER, Server, auth, make_key  # noqa: E402

pytestmark = pytest.mark.slow

MAX_BODY = 20_000
MAX_TAG = 5_000
RATE = 3
AUTH_FAILURES = 3


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """(server, keys): small limits; the server creates its database (under the usual umask)."""
    root = tmp_path_factory.mktemp("limits")
    db = root / "limits.db"
    old = os.umask(0o022)
    try:
        server = Server(db, root / "server.log", "--max-body-bytes", str(MAX_BODY), "--max-tag-chars", str(MAX_TAG),
                        "--rate-limit", str(RATE), "--max-auth-failures", str(AUTH_FAILURES)).start()
    finally:
        os.umask(old)
    keys = {name: make_key(db, name, 100.0) for name in ("body", "tag", "rate", "auth")}
    yield server, keys
    server.stop()


def raw_post(server, path: str, key: str, headers: list[str], body: bytes) -> tuple[int, dict]:
    """POST exactly these headers and body bytes; (status, JSON answer). The request asks the
    server to close the connection, so the answer is whatever arrives before it does."""
    address = urlsplit(server.url)
    head = "\r\n".join([f"POST {path} HTTP/1.1", f"Host: {address.netloc}", f"Authorization: Bearer {key}",
                        "Content-Type: application/json", "Connection: close", *headers, "", ""]).encode()
    with socket.create_connection((address.hostname, address.port), timeout=60) as sock:
        try:
            sock.sendall(head + body)
        except OSError:  # the server answered and closed before the body was through
            pass
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:  # closed with the body unread: what arrived before still counts
            pass
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2] or b"null")


def chunked(data: bytes, size: int = 4096) -> bytes:
    pieces = [data[i:i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def tag_text(chars: int) -> str:
    """The letter repeated to exactly ``chars`` characters."""
    return ((LETTER + " ") * (chars // len(LETTER) + 1))[:chars]


def tag_body(chars: int) -> bytes:
    return json.dumps({"text": tag_text(chars)}).encode()


# --- item 4: body size ----------------------------------------------------------------------------
@pytest.mark.parametrize("declared", [10, MAX_BODY])
def test_content_length_with_transfer_encoding_is_refused_400_before_the_body_is_read(limited, declared):
    server, keys = limited
    body = tag_body(3 * MAX_BODY)  # 3x the limit behind a Content-Length that claims 10: reached the tagger before
    status, answer = raw_post(server, "/v1/tag", keys["body"],
                              [f"Content-Length: {declared}", "Transfer-Encoding: chunked"], chunked(body))
    assert status == 400 and answer["error"]["code"] == "ambiguous_length"


def test_a_chunked_body_is_counted_and_refused_413_once_past_the_limit(limited):
    server, keys = limited
    status, answer = raw_post(server, "/v1/tag", keys["body"], ["Transfer-Encoding: chunked"],
                              chunked(tag_body(3 * MAX_BODY)))
    assert status == 413 and answer["error"]["code"] == "body_too_large"


def test_a_chunked_body_within_the_limit_is_served(limited):
    server, keys = limited
    status, answer = raw_post(server, "/v1/tag", keys["body"], ["Transfer-Encoding: chunked"],
                              chunked(tag_body(MAX_TAG)))
    assert status == 200 and {s["label"] for s in answer["spans"]} >= {"PERSON"}


# --- item 6: /v1/tag's size -----------------------------------------------------------------------
def test_a_tag_text_above_max_tag_chars_is_refused_413_text_too_long(limited):
    server, keys = limited
    over = httpx.post(server.url + "/v1/tag", json={"text": tag_text(MAX_TAG + 1)}, headers=auth(keys["tag"]),
                      timeout=60)
    assert over.status_code == 413 and over.json()["error"]["code"] == "text_too_long"
    assert "Marsh" not in over.text
    at = httpx.post(server.url + "/v1/tag", json={"text": tag_text(MAX_TAG)}, headers=auth(keys["tag"]), timeout=60)
    assert at.status_code == 200


# --- item 7: rates --------------------------------------------------------------------------------
def test_the_rate_limit_is_per_tenant_so_a_new_key_does_not_open_a_new_window(limited):
    server, keys = limited
    codes = [httpx.get(server.url + "/v1/budget", headers=auth(keys["rate"])).status_code for _ in range(RATE)]
    assert codes == [200] * RATE
    another = make_key(server.db, "rate", 100.0)  # the same tenant's second key
    limited_ = httpx.get(server.url + "/v1/budget", headers=auth(another))
    assert limited_.status_code == 429 and limited_.json()["error"]["code"] == "rate_limited"
    assert int(limited_.headers["retry-after"]) >= 1
    assert httpx.get(server.url + "/v1/budget", headers=auth(keys["tag"])).status_code == 200  # other tenants go on


def from_address(address: str) -> httpx.Client:
    """A client whose connections come from another loopback address (all of 127/8 is loopback)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=60)


def test_failed_authentication_is_limited_per_address_before_the_key_is_looked_up(limited):
    server, keys = limited
    with from_address("127.0.0.2") as guesser, from_address("127.0.0.3") as neighbour:
        codes = [guesser.get(server.url + "/v1/budget", headers=auth(f"tdp_guess-{i}")).status_code
                 for i in range(AUTH_FAILURES)]
        assert codes == [401] * AUTH_FAILURES
        refused = guesser.get(server.url + "/v1/budget", headers=auth(keys["auth"]))  # even a valid key, now
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "auth_rate_limited"
        assert 1 <= int(refused.headers["retry-after"]) <= 61
        assert neighbour.get(server.url + "/v1/budget", headers=auth(keys["auth"])).status_code == 200


# --- item 8: the database's mode ------------------------------------------------------------------
def test_the_servers_database_and_its_wal_and_shm_files_are_0600(limited):
    server, keys = limited
    assert httpx.get(server.url + "/v1/budget", headers=auth(keys["body"])).status_code == 200
    files = [server.db, server.db.with_name(server.db.name + "-wal"), server.db.with_name(server.db.name + "-shm")]
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o600 for f in files}


# --- item 6: tagging beside the model -------------------------------------------------------------
@pytest.fixture(scope="module")
def roomy(tmp_path_factory):
    """(server, key): room for a tag request that takes the tagger seconds."""
    root = tmp_path_factory.mktemp("roomy")
    db = root / "roomy.db"
    key = make_key(db, "acme", 1000.0)
    server = Server(db, root / "server.log", "--max-body-bytes", "2000000", "--max-tag-chars", "1000000",
                    "--rate-limit", "1000").start()
    yield server, key
    server.stop()


def timed_sanitize(server, key: str, doc: str) -> tuple[float, float]:
    """(seconds taken, when it ended) for a short sanitize with the client's spans (no tagging)."""
    start = time.monotonic()
    reply = httpx.post(server.url + "/v1/sanitize", json={**FIVE_REQUEST, "id": doc, "max_new_tokens": 8},
                       headers=auth(key), timeout=300)
    assert reply.status_code == 200, reply.text
    end = time.monotonic()
    return end - start, end


def test_a_large_tag_request_does_not_hold_up_another_tenants_sanitize(roomy):
    server, key = roomy
    alone = min(timed_sanitize(server, key, f"alone-{i}")[0] for i in range(2))
    big = {"text": "Dear Dr Helen Marsh wrote to Tomas Lindqvist on 2 June 2024 about Ward 4. " * 8000}

    def tag() -> float:
        reply = httpx.post(server.url + "/v1/tag", json=big, headers=auth(key), timeout=300)
        assert reply.status_code == 200
        return time.monotonic()

    with ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        tagged = pool.submit(tag)
        time.sleep(0.5)  # the tagger is at work
        during, sanitized = timed_sanitize(server, key, "during")
        tag_end = tagged.result()
    took = tag_end - started
    # On the model's thread the sanitize waited for the whole tag: it ended after it.
    assert sanitized < tag_end, f"sanitize {during:.2f}s (alone {alone:.2f}s) ended after the tag ({took:.2f}s)"
    assert during - alone < took / 3, f"sanitize {during:.2f}s during a {took:.2f}s tag, {alone:.2f}s alone"


def stat_fields(stat_file: Path) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...); None once gone."""
    try:
        return stat_file.read_text().rpartition(")")[2].split()
    except OSError:
        return None


def children(pid: int) -> set[int]:
    """The processes whose parent is ``pid``."""
    return {int(f.parent.name) for f in Path("/proc").glob("[0-9]*/stat")
            if (fields := stat_fields(f)) and int(fields[1]) == pid}


def running(pid: int) -> bool:
    fields = stat_fields(Path(f"/proc/{pid}/stat"))
    return fields is not None and fields[0] != "Z"  # a zombie has ended; its reaper may be slow


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_the_tagger_process_ends_when_its_server_is_killed(tmp_path):
    db = tmp_path / "kill.db"
    key = make_key(db, "acme", 10.0)
    server = Server(db, tmp_path / "server.log").start()
    try:
        tagged = httpx.post(server.url + "/v1/tag", json={"text": LETTER}, headers=auth(key), timeout=60)
        assert tagged.status_code == 200
        tagger = children(server.proc.pid)
        assert tagger, "the tag request ran in no child process"
        server.kill9()
    finally:
        server.stop()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(running(pid) for pid in tagger):
        time.sleep(0.2)
    assert not any(running(pid) for pid in tagger)
