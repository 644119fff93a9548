"""Request limits: body size (an ASGI middleware) and requests per key per minute."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """The server's limits; ``tokendp serve`` sets them from its options."""

    max_body_bytes: int = 1_000_000
    max_new_tokens: int = 512
    requests_per_minute: int = 60
    max_batch: int = 8


class RateLimiter:
    """A sliding one-minute window of request times per key (in memory, per process)."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._times: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def admit(self, key: str, now: float | None = None) -> float | None:
        """None if admitted, else the seconds until the oldest request leaves the window."""
        now = time.monotonic() if now is None else now
        with self._lock:
            times = self._times.setdefault(key, deque())
            while times and times[0] <= now - 60:
                times.popleft()
            if len(times) >= self.per_minute:
                return max(0.0, times[0] + 60 - now)
            times.append(now)
            return None


class BodyLimit:
    """ASGI middleware: a request with a body must say its size (Content-Length; else 411
    length_required) and stay within ``max_bytes`` (else 413 body_too_large), checked before
    anything is read."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            headers = dict(scope["headers"])
            length = headers.get(b"content-length")
            if length is None or not length.isdigit():
                if headers.get(b"transfer-encoding") is not None:
                    return await _refuse(send, 411, "length_required", "send the body with a Content-Length")
            elif int(length) > self.max_bytes:
                return await _refuse(send, 413, "body_too_large",
                                     f"the request body is above this server's limit of {self.max_bytes} bytes")
        return await self.app(scope, receive, send)


async def _refuse(send, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
