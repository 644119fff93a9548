"""Request limits: body size (an ASGI middleware), requests per tenant per minute, and failed
authentication attempts per client address per minute."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass

from tokendp.service.codes import status

WINDOW_S = 60.0


@dataclass(frozen=True)
class Limits:
    """The server's limits; ``tokendp serve`` sets them from its options."""

    max_body_bytes: int = 1_000_000
    max_new_tokens: int = 512
    requests_per_minute: int = 60
    max_batch: int = 8
    max_tag_chars: int = 100_000
    auth_failures_per_minute: int = 10


class RateLimiter:
    """A sliding one-minute window of event times per key (in memory, per process).

    Keys whose window has emptied are dropped once more than ``max_keys`` are held, so a client
    that rotates addresses cannot grow the table without bound."""

    def __init__(self, per_minute: int, max_keys: int = 10_000) -> None:
        self.per_minute, self.max_keys = per_minute, max_keys
        self._times: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def admit(self, key: str, now: float | None = None) -> float | None:
        """Count one event for ``key`` and return None if the window had room; else count
        nothing and return the seconds until the oldest event leaves the window."""
        now = time.monotonic() if now is None else now
        with self._lock:
            times = self._window(key, now)
            wait = self._wait(times, now)
            if wait is None:
                times.append(now)
            return wait

    def blocked(self, key: str, now: float | None = None) -> float | None:
        """Like :meth:`admit` without counting: None while ``key`` has room, else the wait."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return self._wait(self._window(key, now), now)

    def record(self, key: str, now: float | None = None) -> None:
        """Count one event for ``key`` whether or not the window has room."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._window(key, now).append(now)

    def _window(self, key: str, now: float) -> deque[float]:
        """``key``'s event times within the last minute (older ones are dropped)."""
        if len(self._times) > self.max_keys:
            self._forget_idle(now)
        times = self._times.setdefault(key, deque())
        while times and times[0] <= now - WINDOW_S:
            times.popleft()
        return times

    def _wait(self, times: deque[float], now: float) -> float | None:
        return None if len(times) < self.per_minute else max(0.0, times[0] + WINDOW_S - now)

    def _forget_idle(self, now: float) -> None:
        for key in [k for k, times in self._times.items() if not times or times[-1] <= now - WINDOW_S]:
            del self._times[key]


class BodyTooLarge(Exception):
    """More body bytes arrived than the limit allows."""


class BodyLimit:
    """ASGI middleware that bounds the bytes a request body may hold, whatever its framing.

    A request that carries both Content-Length and Transfer-Encoding is refused (400
    ambiguous_length): RFC 9112 section 6.1 lets the server pick Transfer-Encoding, so the
    declared length would mean nothing, and a proxy in front may have framed it the other way.
    A declared Content-Length above the limit is refused before anything is read; every body,
    declared or chunked, is then read here while its bytes are counted, and refused (413
    body_too_large) as soon as the count passes the limit, so no framing can carry more to the
    app. The app reads the counted body from memory: it would buffer it for JSON anyway. Both
    refusals close the connection, since the rest of the body is left unread."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        names = {name.lower() for name, _ in scope["headers"]}
        if b"content-length" in names and b"transfer-encoding" in names:
            return await _refuse(send, "ambiguous_length",
                                 "send either Content-Length or Transfer-Encoding, not both (RFC 9112, 6.1)")
        if self._declared(scope) > self.max_bytes:
            return await self._too_large(send)
        try:
            messages = await self._read(receive)
        except BodyTooLarge:
            return await self._too_large(send)
        if messages[-1]["type"] == "http.disconnect":
            return None
        return await self.app(scope, _replay(messages, receive), send)

    @staticmethod
    def _declared(scope) -> int:
        """The Content-Length the client declared (0 if none; the server checked its syntax)."""
        value = dict(scope["headers"]).get(b"content-length", b"0")
        return int(value) if value.isdigit() else 0

    async def _read(self, receive) -> list[dict]:
        """Every message of the body, up to the last one or a disconnect; raise BodyTooLarge as
        soon as the bytes received pass the limit."""
        messages, count = [], 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages
            count += len(message.get("body", b""))
            if count > self.max_bytes:
                raise BodyTooLarge
            if not message.get("more_body", False):
                return messages

    async def _too_large(self, send) -> None:
        await _refuse(send, "body_too_large", f"the request body is above this server's limit of "
                      f"{self.max_bytes} bytes (--max-body-bytes)")


def _replay(messages: list[dict], receive):
    """A receive() that gives the body's messages again, then waits on the real one (where a
    streaming response learns that its client went away)."""
    pending = deque(messages)

    async def replayed():
        return pending.popleft() if pending else await receive()

    return replayed


async def _refuse(send, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status(code),
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
