"""The limits on their own: the body-size middleware over a fake ASGI exchange."""

from __future__ import annotations

import asyncio
import json

from tokendp.service.limits import BodyLimit


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
