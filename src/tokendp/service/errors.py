"""Errors as JSON with a stable code: ``{"error": {"code", "message", ...}}``.

Each code has one HTTP status, in :data:`tokendp.service.codes.CODES` with what it means (the
OpenAPI document's responses come from the same table). :func:`to_api_error` turns what a job, a
plan or a store raises into its code; :func:`install` answers every other error in the same
shape: a body that does not match the schema (422 invalid_request, listing fields and rules,
never the values given), a body that is not UTF-8 (400 malformed_body), an unknown path (404
not_found) and a method the path does not take (405 method_not_allowed, with ``Allow`` listing
every method of every route on that path). ambiguous_length and body_too_large come from
:class:`tokendp.service.limits.BodyLimit`, before the app. Messages never carry document text.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from tokendp.errors import InvalidInputError, InvalidParameterError, MissingDependencyError
from tokendp.service.batching import Cancelled, ModelUnavailable
from tokendp.service.codes import status
from tokendp.service.plans import AccountingMismatch
from tokendp.service.store import BudgetRefused
from tokendp.service.vault.store import DocumentExists, QuotaExceeded, TicketLapsed

log = logging.getLogger("tokendp.service")
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")  # RFC 9110, 9.3; Allow's order


class APIError(Exception):
    """An answer with ``code`` (its status from :data:`~tokendp.service.codes.CODES`), a message,
    optional headers and extra fields of the error body."""

    def __init__(self, code: str, message: str, headers: dict[str, str] | None = None, **extra) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers, self.extra = status(code), code, message, headers, extra


def error_body(code: str, message: str, **extra) -> dict:
    return {"error": {"code": code, "message": message, **extra}}


def to_api_error(err: BaseException, *, charged: bool = False) -> APIError:
    """The APIError for an exception raised by a job, a plan or the store; ``charged``: whether
    the request's reservation stands (a job that failed after it sampled a token)."""
    if isinstance(err, APIError):
        return err
    if isinstance(err, BudgetRefused):
        document, group = err.unit
        return APIError("budget_exceeded",
                        f"document {document!r}, group {group!r} would reach epsilon {err.after:.4g} "
                        f"(spent {err.spent:.4g}, budget {err.budget:g}); nothing was charged or generated",
                        unit={"id": document, "group": group}, epsilon_spent=err.spent,
                        epsilon_after=err.after, budget=err.budget)
    if isinstance(err, QuotaExceeded):
        return APIError("quota_exceeded", f"{err}; nothing was charged or generated (the tenant's owner sets "
                        "quotas)", quota={"per_day": err.what, "limit": err.limit})
    if isinstance(err, DocumentExists):
        return APIError("document_exists", "the vault holds a document with this id; PUT /v1/documents/{id} "
                        "replaces it")
    if isinstance(err, InvalidParameterError):
        return APIError("invalid_parameter", str(err))
    if isinstance(err, (InvalidInputError, MissingDependencyError)):
        return APIError("invalid_input", str(err))
    if isinstance(err, TicketLapsed):
        return APIError("ticket_lapsed", "this server missed its lease on the release's place in line (it "
                        "stalled); nothing was generated and nothing was charged; ask again",
                        headers={"Retry-After": "1"})
    if isinstance(err, ModelUnavailable):
        return APIError("model_unavailable", f"the server's model failed to load ({err}); see the server's log")
    spent = ("the reservation stays spent" if charged
             else "nothing was generated and nothing was charged")
    if isinstance(err, Cancelled) and err.shutdown:
        return APIError("shutting_down", f"the server is shutting down: the request was stopped; {spent}; "
                        "retry when it is back", charged=charged)
    if isinstance(err, Cancelled):
        return APIError("client_closed_request", f"{err}: the request was stopped; {spent}", charged=charged)
    if isinstance(err, AccountingMismatch):
        return APIError("accounting_mismatch", f"the output was withheld: its certificate differs from the "
                        f"reservation; {spent}; please report this", charged=charged)
    log.error("internal error: %s", type(err).__name__)
    return APIError("internal_error", f"internal error; {spent}", charged=charged)


def install(app: FastAPI) -> None:
    """Register the handlers that turn every error into the JSON shape above."""

    @app.exception_handler(APIError)
    async def _api(_: Request, err: APIError) -> JSONResponse:
        return JSONResponse(error_body(err.code, err.message, **err.extra), status_code=err.status, headers=err.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        fields = [{"field": ".".join(str(p) for p in e.get("loc", ())), "rule": e.get("msg", "")} for e in err.errors()]
        return JSONResponse(error_body("invalid_request", "the request does not match the schema (see /openapi.json)",
                                       fields=fields), status_code=status("invalid_request"))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException) -> JSONResponse:
        code = {400: "malformed_body", 404: "not_found", 405: "method_not_allowed"}.get(err.status_code, "http_error")
        headers = {"Allow": allowed(request)} if err.status_code == 405 else err.headers
        return JSONResponse(error_body(code, str(err.detail)), status_code=err.status_code, headers=headers)

    @app.exception_handler(Exception)
    async def _other(_: Request, err: Exception) -> JSONResponse:
        api = to_api_error(err)
        return JSONResponse(error_body(api.code, api.message, **api.extra), status_code=api.status)


def allowed(request: Request) -> str:
    """The methods the request's path takes: each method some route fully matches on that path
    (Starlette's own 405 names only the first matching route's, and a path such as
    /v1/documents/{id} has three). A mount matches every method and refuses in its app: under
    the one mount, the static files, that is GET and HEAD."""
    scope = {k: v for k, v in request.scope.items() if k in ("type", "path", "raw_path", "root_path", "app")}
    routes = [route for route in request.app.router.routes if not isinstance(route, Mount)]
    methods = [method for method in METHODS
               if any(route.matches({**scope, "method": method})[0] is Match.FULL for route in routes)]
    return ", ".join(methods or ("GET", "HEAD"))
