"""The limits on their own: the body-size middleware over a fake ASGI exchange, and the
one-minute windows (per tenant for requests, per address for failed authentication)."""

from __future__ import annotations

import asyncio
import json

import pytest

from tokendp.service.limits import BodyLimit, RateLimiter


def exchange(headers: dict[str, str], chunks: list[bytes], max_bytes: int = 100):
    """Run BodyLimit over an app that reads the whole body: (status, error code or body the app
    read, number of chunks the middleware took from the client)."""
    received, sent = [], []

    async def receive():
        if len(received) == len(chunks):
            return {"type": "http.disconnect"}
        received.append(chunks[len(received)])
        return {"type": "http.request", "body": received[-1], "more_body": len(received) < len(chunks)}

    async def send(message):
        sent.append(message)

    async def app(scope, receive_, send_):
        body = b""
        while (message := await receive_())["type"] == "http.request":
            body += message["body"]
            if not message["more_body"]:
                break
        await send_({"type": "http.response.start", "status": 200, "headers": []})
        await send_({"type": "http.response.body", "body": body})

    scope = {"type": "http", "method": "POST",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    asyncio.run(BodyLimit(app, max_bytes)(scope, receive, send))
    status, body = sent[0]["status"], sent[1]["body"]
    return status, body if status == 200 else json.loads(body)["error"]["code"], len(received)


def test_a_body_is_counted_whatever_content_length_claimed_and_refused_at_the_first_chunk_past_the_limit():
    chunks = [b"x" * 40] * 1000
    assert exchange({"content-length": "10"}, chunks) == (413, "body_too_large", 3)
    assert exchange({"transfer-encoding": "chunked"}, chunks) == (413, "body_too_large", 3)


def test_a_declared_length_above_the_limit_is_refused_before_reading():
    assert exchange({"content-length": "101"}, [b"x" * 101]) == (413, "body_too_large", 0)


def test_both_framings_at_once_are_refused_before_reading():
    both = {"content-length": "10", "transfer-encoding": "chunked"}
    assert exchange(both, [b"x" * 10]) == (400, "ambiguous_length", 0)


def test_a_body_within_the_limit_reaches_the_app_whole_under_either_framing():
    assert exchange({"content-length": "100"}, [b"a" * 60, b"b" * 40]) == (200, b"a" * 60 + b"b" * 40, 2)
    assert exchange({"transfer-encoding": "chunked"}, [b"a" * 60, b"b" * 40]) == (200, b"a" * 60 + b"b" * 40, 2)


def test_the_window_admits_per_minute_then_says_how_long_to_wait():
    rate = RateLimiter(2)
    assert rate.admit("acme", now=0.0) is None and rate.admit("acme", now=10.0) is None
    assert rate.admit("acme", now=20.0) == pytest.approx(40.0)
    assert rate.admit("other", now=20.0) is None
    assert rate.admit("acme", now=60.5) is None  # the request at 0 left the window


def test_failures_are_recorded_and_checked_apart():
    failures = RateLimiter(2)
    failures.record("10.0.0.1", now=0.0)
    assert failures.blocked("10.0.0.1", now=1.0) is None  # checking counts nothing
    failures.record("10.0.0.1", now=2.0)
    assert failures.blocked("10.0.0.1", now=3.0) == pytest.approx(57.0)
    assert failures.blocked("10.0.0.2", now=3.0) is None
    assert failures.blocked("10.0.0.1", now=62.5) is None


def test_idle_keys_are_forgotten_once_the_table_is_full():
    rate = RateLimiter(1, max_keys=10)
    for i in range(100):
        rate.record(f"10.0.0.{i}", now=float(i))
    assert len(rate._times) <= 10 + 60  # at most the keys of the last minute beyond the bound
