"""Errors as JSON with a stable code: ``{"error": {"code", "message", ...}}``.

Codes: unauthorized (401), budget_exceeded (403), forbidden (403: a reader key on an owner's
route, or fixing /v1/ask's seed), not_found (404), no_match (404: no confirmed document's public
version shares a word with a /v1/ask question), document_exists (409: POST of an id the vault
holds; PUT replaces),
quota_exceeded (429: a reader key's own releases or tokens per day), body_too_large (413: more
body bytes arrived than --max-body-bytes, whatever the framing), ambiguous_length (400: both
Content-Length and Transfer-Encoding), text_too_long (413: a /v1/tag text above
--max-tag-chars), invalid_request (422: the body does not match the schema), invalid_parameter
and invalid_input (400: the library refused a value), rate_limited (429: the tenant's requests
per minute), auth_rate_limited (429: the client address's failed authentication attempts per
minute), accounting_mismatch (500: output withheld), internal_error (500), model_unavailable
(503), shutting_down (503: the server stopped the request as it shut down),
client_closed_request (499: the client went away; nobody reads it but the log).
body_too_large and ambiguous_length come from :class:`tokendp.service.limits.BodyLimit`, before
the app. Messages never carry document text: schema errors list the field and the rule,
never the value given.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tokendp.errors import InvalidInputError, InvalidParameterError, MissingDependencyError
from tokendp.service.batching import Cancelled, ModelUnavailable
from tokendp.service.plans import AccountingMismatch
from tokendp.service.store import BudgetRefused
from tokendp.service.vault_store import DocumentExists, QuotaExceeded, TicketLapsed

log = logging.getLogger("tokendp.service")


class APIError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers, self.extra = status, code, message, headers, extra


def error_body(code: str, message: str, **extra) -> dict:
    return {"error": {"code": code, "message": message, **extra}}


def to_api_error(err: BaseException, *, charged: bool = False) -> APIError:
    """The APIError for an exception raised by a job, a plan or the store; ``charged``: whether
    the request's reservation stands (a job that failed after it sampled a token)."""
    if isinstance(err, APIError):
        return err
    if isinstance(err, BudgetRefused):
        document, group = err.unit
        return APIError(403, "budget_exceeded",
                        f"document {document!r}, group {group!r} would reach epsilon {err.after:.4g} "
                        f"(spent {err.spent:.4g}, budget {err.budget:g}); nothing was charged or generated",
                        unit={"id": document, "group": group}, epsilon_spent=err.spent,
                        epsilon_after=err.after, budget=err.budget)
    if isinstance(err, QuotaExceeded):
        return APIError(429, "quota_exceeded", f"{err}; nothing was charged or generated (the tenant's owner sets "
                        "quotas)", quota={"per_day": err.what, "limit": err.limit})
    if isinstance(err, DocumentExists):
        return APIError(409, "document_exists", "the vault holds a document with this id; PUT /v1/documents/{id} "
                        "replaces it")
    if isinstance(err, InvalidParameterError):
        return APIError(400, "invalid_parameter", str(err))
    if isinstance(err, (InvalidInputError, MissingDependencyError)):
        return APIError(400, "invalid_input", str(err))
    if isinstance(err, TicketLapsed):
        return APIError(503, "ticket_lapsed", "this server missed its lease on the release's place in line (it "
                        "stalled); nothing was generated and nothing was charged; ask again",
                        headers={"Retry-After": "1"})
    if isinstance(err, ModelUnavailable):
        return APIError(503, "model_unavailable", f"the server's model failed to load ({err}); see the server's log")
    spent = ("the reservation stays spent" if charged
             else "nothing was generated and nothing was charged")
    if isinstance(err, Cancelled) and err.shutdown:
        return APIError(503, "shutting_down", f"the server is shutting down: the request was stopped; {spent}; "
                        "retry when it is back", charged=charged)
    if isinstance(err, Cancelled):
        return APIError(499, "client_closed_request", f"{err}: the request was stopped; {spent}", charged=charged)
    if isinstance(err, AccountingMismatch):
        return APIError(500, "accounting_mismatch", f"the output was withheld: its certificate differs from the "
                        f"reservation; {spent}; please report this", charged=charged)
    log.error("internal error: %s", type(err).__name__)
    return APIError(500, "internal_error", f"internal error; {spent}", charged=charged)


def install(app: FastAPI) -> None:
    """Register the handlers that turn every error into the JSON shape above."""

    @app.exception_handler(APIError)
    async def _api(_: Request, err: APIError) -> JSONResponse:
        return JSONResponse(error_body(err.code, err.message, **err.extra), status_code=err.status, headers=err.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        fields = [{"field": ".".join(str(p) for p in e.get("loc", ())), "rule": e.get("msg", "")} for e in err.errors()]
        return JSONResponse(error_body("invalid_request", "the request body does not match the schema (see /openapi.json)",
                                       fields=fields), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, err: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code, "http_error")
        return JSONResponse(error_body(code, str(err.detail)), status_code=err.status_code)

    @app.exception_handler(Exception)
    async def _other(_: Request, err: Exception) -> JSONResponse:
        api = to_api_error(err)
        return JSONResponse(error_body(api.code, api.message, **api.extra), status_code=api.status)
