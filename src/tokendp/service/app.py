"""The FastAPI app: /v1 endpoints behind Bearer keys, /healthz, and the page at /.

Every /v1 call authenticates its key (401 unauthorized), counts against the key's requests per
minute (429 rate_limited), checks the key's role (403 forbidden: every route declares the roles
it admits, :func:`create_app`'s ``owner`` and ``anyone``; docs/vault.md) and sees only its own
tenant's data. A reader key may list the stored documents' ids and titles, ask for releases of
them (:mod:`tokendp.service.vault.routes`), use the accountant (/v1/account, pure arithmetic) and
ask its own tenant and role (/v1/whoami); every other route is the owner's. Jobs go through the one
:class:`~tokendp.service.batching.Worker`; the endpoints only wait for them. /v1/sanitize
answers JSON, or server-sent events when the body has ``"stream": true`` or the Accept header
asks for ``text/event-stream``: ``token`` events (``{"text": new text}``), then one ``result``
(the JSON answer) or ``error`` event. Every refusal (budget, parameters, input) comes before the
stream starts, as a plain 4xx; no token is sent before the job's charges have been checked
against its reservation.

A job whose client disconnects (a plain request's connection closed, or a stream's) is cancelled
at its next token (:meth:`tokendp.service.batching.Job.cancel`). :func:`create_app`'s app has
``cancel_jobs()``, which ``tokendp serve`` calls on the first SIGINT or SIGTERM: every job stops at
its next token and is answered 503 ``shutting_down``, so the server exits at once.
"""

from __future__ import annotations

import asyncio
import math
import queue
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Query, Request, Security
from fastapi.responses import FileResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles

from tokendp.accounting import (amin_clip, amin_epsilon, dp_fusion_beta, dp_fusion_epsilon, invisibleink_clip,
                                invisibleink_epsilon)
from tokendp.service import errors, logs
from tokendp.models.registry import answering_model
from tokendp.service.batching import Job, Models, Worker
from tokendp.service.contract import (BODY, EVERY, JOB, KEYED, OWNER, PARAMS, TAGGER, answers, describe_limits,
                                      state_limits)
from tokendp.service.errors import APIError
from tokendp.service.headers import SecurityHeaders
from tokendp.service.keys import Caller, authenticate
from tokendp.service.limits import BodyLimit, Limits, RateLimiter
from tokendp.service.schemas import (PLAIN_ID, AccountRequest, GenerateRequest, SanitizeRequest,
                                     SynthesizeRequest, TagRequest)
from tokendp.service.store import BudgetStore
from tokendp.service.streams import events, wait
from tokendp.service.tagging import Tagging
from tokendp.service.vault.routes import vault_routes
from tokendp.service.vault.store import DEFAULT_LEASE_S, VaultStore

STATIC = Path(__file__).parent / "static"
BEARER = HTTPBearer(auto_error=False, description="a key from `tokendp keys create` (owner or reader)")


def create_app(db: str | Path, *, model: str = "rewriter", tagger: str = "auto", limits: Limits = Limits(),
               version: str = "dev", docs: bool = False, vault_lease: float = DEFAULT_LEASE_S,
               answer_model: str | None = None):
    """The ASGI app (FastAPI wrapped in the body-size limit and the security headers) for
    ``tokendp serve`` on ``db`` (a SQLite file or a PostgreSQL DSN); ``version`` is tokendp's,
    shown by /healthz and /openapi.json. ``docs`` serves the Swagger UI at /docs and ReDoc at
    /redoc, which load their scripts from a CDN. ``vault_lease``: seconds after this process's
    last heartbeat when its vault tickets expire (docs/vault.md, "Crashes and concurrency")."""
    store = BudgetStore(db)
    vault = VaultStore(lambda: store.conn, lease=vault_lease)
    answer_model = answer_model or answering_model(model)
    worker = Worker(lambda: _load(model, tagger, answer_model), store, max_tokens=limits.max_new_tokens,
                    max_batch=limits.max_batch, vault=vault)
    rate, failures = RateLimiter(limits.requests_per_minute), RateLimiter(limits.auth_failures_per_minute)
    tagging = Tagging(tagger)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        logs.install()
        store.recover()
        worker.start()
        tagging.start()
        yield
        worker.cancel_all()
        tagging.stop()
        worker.stop()

    app = FastAPI(title="tokendp", version=version, lifespan=lifespan,
                  docs_url="/docs" if docs else None, redoc_url="/redoc" if docs else None,
                  description="Token-level differential privacy with a durable privacy budget per "
                              "(tenant, document id, privacy group), and a vault of stored documents with one "
                              "lifetime budget per person. Budget semantics: docs/service.md and docs/vault.md. "
                              + describe_limits(limits))
    errors.install(app)
    generate_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        """FastAPI's document with this server's limits written into the fields they bound."""
        if app.openapi_schema is None:
            app.openapi_schema = state_limits(generate_openapi(), limits)
        return app.openapi_schema

    app.openapi = openapi

    def caller(request: Request, bearer: HTTPAuthorizationCredentials | None = Security(BEARER)) -> Caller:
        """The key's tenant and role, within its rate. An address with too many failed attempts
        in the last minute is refused before its key is looked up; an owner's rate is its
        tenant's, so that a new key does not open a new window, and each reader key has its own."""
        address = request.client.host if request.client else ""
        pause = failures.blocked(address)
        if pause is not None:
            raise _too_many("auth_rate_limited", f"more than {limits.auth_failures_per_minute} failed authentication "
                            "attempts in a minute from this address", pause)
        key = bearer.credentials.strip() if bearer is not None else ""
        found = authenticate(store.conn, key) if key else None
        if found is None:
            if key:  # a key that matches none: a guess, or a revoked key
                failures.record(address)
            raise APIError("unauthorized", "send Authorization: Bearer <key> with a key from `tokendp keys create`",
                           headers={"WWW-Authenticate": "Bearer"})
        # Owners share their tenant's window (a new key opens none); each reader key has its own,
        # so that a reader cannot stall its owner or the other readers (only owners make keys).
        window = found.tenant.name if found.role == "owner" else f"{found.tenant.name}/{found.key_hash}"
        pause = rate.admit(window)
        if pause is not None:
            raise _too_many("rate_limited", f"more than {limits.requests_per_minute} requests in a minute for this "
                            + ("tenant" if found.role == "owner" else "reader key"), pause)
        return found

    def owner(who: Caller = Depends(caller)) -> Caller:
        """An owner key (403 forbidden for a reader)."""
        if who.role != "owner":
            raise APIError("forbidden", "this route needs an owner key; a reader key may only list documents "
                           "and ask for their releases (docs/vault.md)")
        return who

    def anyone(who: Caller = Depends(caller)) -> Caller:
        """An owner or a reader key."""
        return who

    async def run(job: Job, request: Request) -> Any:
        return await wait(worker, job, request)

    @app.get("/healthz", tags=["service"], responses=answers(*EVERY))
    async def healthz() -> dict[str, Any]:
        """Liveness and model state: ``loading``, ``ok`` or ``error``; the rewriting model and the
        answering one (/v1/generate, /v1/ask)."""
        state = "loading" if not worker.ready.is_set() else "error" if worker.load_error else "ok"
        return {"status": state, "model": getattr(worker.backend, "name", None),
                "answer_model": getattr(worker.answerer, "name", None), "version": version}

    @app.post("/v1/tag", tags=["v1"], responses=answers(*OWNER, *BODY, *TAGGER))
    async def tag(body: TagRequest, who: Caller = Depends(owner)) -> dict[str, Any]:
        """The server's tagger's spans: ``{"spans": [{start, end, label, score, source}]}``. Runs in
        the tagger's own process (service/tagging.py), at most ``--max-tag-chars`` characters."""
        if len(body.text) > limits.max_tag_chars:
            raise APIError("text_too_long", f"/v1/tag takes at most {limits.max_tag_chars} characters on this "
                           "server (--max-tag-chars); tag the document in parts")
        try:
            return {"spans": await tagging.tag(body.text)}
        except Exception as err:
            raise errors.to_api_error(err) from None

    @app.post("/v1/sanitize", tags=["v1"], responses=answers(*OWNER, *BODY, *JOB, *TAGGER, "budget_exceeded",
                                                             stream=True))
    async def sanitize(body: SanitizeRequest, request: Request, who: Caller = Depends(owner)):
        """Rewrite a document with DP-Fusion: ``{"id", "text", "report"}`` (or events, see the module doc)."""
        streaming = body.stream or "text/event-stream" in request.headers.get("accept", "")
        if not streaming:
            return await run(Job("sanitize", body, who.tenant), request)
        job = worker.submit(Job("sanitize", body, who.tenant, tokens=queue.Queue()))
        try:
            await asyncio.wrap_future(job.admitted)
        except Exception as err:
            raise errors.to_api_error(err) from None
        return StreamingResponse(events(job), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    @app.post("/v1/generate", tags=["v1"], responses=answers(*OWNER, *BODY, *JOB, *TAGGER, "budget_exceeded"))
    async def generate(body: GenerateRequest, request: Request, who: Caller = Depends(owner)) -> dict[str, Any]:
        """Answer a prompt from a private context document: ``{"id", "text", "report"}``."""
        return await run(Job("generate", body, who.tenant), request)

    @app.post("/v1/synthesize", tags=["v1"], responses=answers(*OWNER, *BODY, *JOB, "budget_exceeded"))
    async def synthesize(body: SynthesizeRequest, request: Request, who: Caller = Depends(owner)) -> dict[str, Any]:
        """Synthetic texts from a reference set: ``{"id", "texts": [...]}``, epsilon per reference."""
        return await run(Job("synthesize", body, who.tenant), request)

    @app.post("/v1/account", tags=["v1"], responses=answers(*KEYED, *BODY, "invalid_parameter"))
    async def account(body: AccountRequest, who: Caller = Depends(anyone)) -> dict[str, Any]:
        """The accountant alone (no budget is touched): epsilon from parameters, or the
        parameter (beta, clip) that meets a target epsilon."""
        try:
            return _account(body)
        except Exception as err:
            raise errors.to_api_error(err) from None

    @app.get("/v1/whoami", tags=["v1"], responses=answers(*KEYED))
    async def whoami(who: Caller = Depends(anyone)) -> dict[str, str]:
        """The key's tenant and role (``owner`` or ``reader``), and nothing else: the page shows
        the view of the role, and a reader's view fetches nothing a reader may not have."""
        return {"tenant": who.tenant.name, "role": who.role}

    @app.get("/v1/budget", tags=["v1"], responses=answers(*OWNER, *PARAMS))
    async def budget(id: str | None = Query(None, min_length=1, max_length=200, pattern=PLAIN_ID,
                                            description="one document's units only"),
                     who: Caller = Depends(owner)) -> dict[str, Any]:
        """The tenant's units: epsilon spent (composed), remaining, and requests per state."""
        units = await asyncio.to_thread(store.units, who.tenant, id)
        t = who.tenant
        return {"tenant": t.name, "budget": t.budget, "delta": t.delta,
                "units": [u.to_dict() for u in units], "requests": await asyncio.to_thread(store.requests, t)}

    app.include_router(vault_routes(worker, vault, tagging, limits, owner=owner, anyone=anyone))

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    wrapped = SecurityHeaders(BodyLimit(app, limits.max_body_bytes))
    wrapped.cancel_jobs = worker.cancel_all  # for the server's first shutdown signal
    return wrapped


def _too_many(code: str, message: str, wait: float) -> APIError:
    return APIError(code, message, headers={"Retry-After": str(int(wait) + 1)}, retry_after=round(wait, 1))


def _load(model: str, tagger: str, answer_model: str) -> Models:
    from tokendp.backends import load_backend
    from tokendp.text.taggers import get_tagger

    writer = load_backend(model)
    return Models(writer, get_tagger(tagger), writer if answer_model == model else load_backend(answer_model))


def _account(body: AccountRequest) -> dict[str, Any]:
    """The accountant's answer; a value beyond float64 (an epsilon of +inf) is refused, as JSON has no infinity."""
    answer = _accounted(body)
    if not all(math.isfinite(v) for v in answer.values() if isinstance(v, float)):
        raise APIError("invalid_parameter", "these parameters give a value beyond floating point's range (an "
                       "unbounded epsilon); lower beta, clip or T")
    return answer


def _accounted(body: AccountRequest) -> dict[str, Any]:
    if (body.beta is None) == (body.epsilon is None) and body.method == "dp-fusion":
        raise APIError("invalid_parameter", "give exactly one of beta or epsilon")
    if body.method == "dp-fusion":
        args = dict(alpha=body.alpha, groups=body.groups, max_tokens=body.max_tokens, delta=body.delta)
        if body.beta is not None:
            return {"method": body.method, **args, "beta": body.beta, "epsilon": dp_fusion_epsilon(beta=body.beta, **args)}
        return {"method": body.method, **args, "epsilon": body.epsilon, "beta": dp_fusion_beta(epsilon=body.epsilon, **args)}
    if (body.clip is None) == (body.epsilon is None):
        raise APIError("invalid_parameter", "give exactly one of clip or epsilon")
    to_eps, to_clip = (invisibleink_epsilon, invisibleink_clip) if body.method == "invisibleink" else (amin_epsilon, amin_clip)
    args = dict(batch_size=body.batch_size, temperature=body.temperature, max_tokens=body.max_tokens, delta=body.delta)
    if body.clip is not None:
        return {"method": body.method, **args, "clip": body.clip, "epsilon": to_eps(clip=body.clip, **args)}
    return {"method": body.method, **args, "epsilon": body.epsilon, "clip": to_clip(epsilon=body.epsilon, **args)}
