"""What the server's logs may hold: the method, the path, the status, never a query string.

Uvicorn's access log writes each request line with its query string, and ``GET /v1/budget?id=``
carries a document id, which a client may have made from private data (a patient's name, a case
number). :class:`DropQueryString` removes the query from every access-log line; document text
never reaches a log in the first place (errors log an exception's type only).
"""

from __future__ import annotations

import logging

ACCESS_LOGGER = "uvicorn.access"


class DropQueryString(logging.Filter):
    """Rewrites uvicorn's access-log record ``(client, method, path?query, http, status)``."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], args[2].split("?", 1)[0], *args[3:])
        return True


def install() -> None:
    """Filter the access log (idempotent); call once logging is configured (at start-up)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, DropQueryString) for f in logger.filters):
        logger.addFilter(DropQueryString())
