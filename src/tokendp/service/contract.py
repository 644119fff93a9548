"""The API's OpenAPI contract: every status each route answers, with the error body, and the
server's own limits written into the fields they bound (docs/service.md, "The OpenAPI contract").

Each route declares the error codes it can answer (:func:`answers`), composed from the groups
below; :func:`answers` turns them into FastAPI ``responses=``, one per status, each with the
error body (:class:`ErrorBody`) and the meaning of each of its codes, from the one table of codes
(:data:`tokendp.service.codes.CODES`). :func:`state_limits` replaces each ``x-limit`` marker of
the request schemas (:func:`tokendp.service.schemas.limit`) with the bound this server enforces.
``tests/service/test_openapi_contract.py`` runs schemathesis, every check, against a served app.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tokendp.service.codes import CODES
from tokendp.service.limits import Limits

# The body-size middleware answers these on every route, before the app.
EVERY = ("ambiguous_length", "body_too_large")
# Every /v1 route: the key, its rate, and the client address's failed attempts.
KEYED = (*EVERY, "unauthorized", "rate_limited", "auth_rate_limited")
# A route for owner keys only.
OWNER = (*KEYED, "forbidden")
# A route whose parameters or JSON body the schema constrains.
PARAMS = ("invalid_request",)
BODY = ("malformed_body", *PARAMS)
# A route that runs a job on the worker: the library's refusals, the model, shutdown, failures.
JOB = ("invalid_parameter", "invalid_input", "model_unavailable", "shutting_down", "accounting_mismatch",
       "internal_error")
# A vault release: the reader's quota and the release's place in line.
RELEASE = (*JOB, "not_found", "quota_exceeded", "ticket_lapsed")
# A route that runs the server's tagger.
TAGGER = ("invalid_input", "text_too_long", "internal_error")

# One server-sent event of a stream (OpenAPI 3.1: a stream's schema describes each event): its data is JSON,
# {"text"} for a token, the answer for the result, the error body for an error.
EVENT = {"type": "object", "required": ["event", "data"],
         "properties": {"event": {"enum": ["token", "result", "error"]},
                        "data": {"type": "string", "contentMediaType": "application/json"}}}
# What each server limit bounds, as a JSON Schema keyword (docs/service.md, "Limits").
LIMIT_KEYWORDS = {"max_new_tokens": "maximum", "max_tag_chars": "maxLength"}


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description="stable: the codes of each status are listed in its description")
    message: str = Field(description="what was refused and what to do; never document text")


class ErrorBody(BaseModel):
    """Every error: ``{"error": {"code", "message", ...}}``, with fields of its own (``unit``,
    ``fields``, ``charged``, ``retry_after``...) beside code and message."""

    error: ErrorDetail


def answers(*codes: str, stream: bool = False) -> dict[int | str, dict[str, Any]]:
    """FastAPI ``responses=`` for a route that answers ``codes``: one response per status, with
    the error body and each code's meaning; ``stream``: its 200 may be server-sent events."""
    by_status: dict[int, list[str]] = {}
    for code in dict.fromkeys(codes):
        by_status.setdefault(CODES[code][0], []).append(code)
    out: dict[int | str, dict[str, Any]] = {
        status: {"model": ErrorBody, "description": "; ".join(f"`{c}`: {CODES[c][1]}" for c in names)}
        for status, names in sorted(by_status.items())}
    if stream:
        out[200] = {"description": "the JSON answer, or with `stream` (or Accept: text/event-stream) server-sent "
                                   "events: `token` events, then one `result` (the JSON answer) or `error` event",
                    "content": {"text/event-stream": {"schema": EVENT}}}
    return out


def state_limits(document: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """``document`` (an OpenAPI document) with each ``{"x-limit": option}`` marker replaced by the
    bound of ``limits``'s option (:data:`LIMIT_KEYWORDS`), in place."""

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            option = node.pop("x-limit", None)
            if option is not None:
                node[LIMIT_KEYWORDS[option]] = getattr(limits, option)
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(document)
    return document


def describe_limits(limits: Limits) -> str:
    """The server's limits, for the OpenAPI document's description."""
    return (f"This server takes bodies of at most {limits.max_body_bytes} bytes (413 body_too_large), T of at most "
            f"{limits.max_new_tokens} tokens, texts for its tagger of at most {limits.max_tag_chars} characters, "
            f"{limits.requests_per_minute} requests a minute per tenant (its owner keys) and per reader key, and "
            f"{limits.auth_failures_per_minute} failed authentications a minute per client address.")
