"""The vault's routes (docs/vault.md): the owner's documents, ledger and reader quotas; the
readers' listing and releases.

Every route declares who may call it through its dependency: ``owner`` (403 forbidden for a
reader key) or ``anyone`` (owner or reader of the tenant). Everything is scoped to the caller's
tenant: another tenant's document is "not found", exactly like one that does not exist. What
a reader receives is public: ids and titles of confirmed documents, releases and their
certificates, and which documents an answer read (public: :mod:`tokendp.service.vault.retrieval`). A
draft, a missing document and another tenant's are the same 404, named in ``/v1/ask`` too;
nothing about a unit's spend or remaining budget, or a release's lambdas, reaches a reader
(docs/privacy.md, "The vault: one lifetime filter per unit").
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import StreamingResponse

from tokendp.jobs.generate import DEFAULT_MAX_NEW_TOKENS
from tokendp.service import errors
from tokendp.service.batching import Job, Worker
from tokendp.service.contract import BODY, KEYED, OWNER, PARAMS, RELEASE, TAGGER, answers
from tokendp.service.vault.documents import check_document
from tokendp.service.errors import APIError
from tokendp.service.keys import Caller
from tokendp.service.limits import Limits
from tokendp.service.vault.retrieval import Retriever
from tokendp.service.schemas import (DEFAULT_TOP_K, DOCUMENT_ID, KEY_PREFIX, MAX_NEW_TOKENS, AskIn, DocumentBody,
                                     DocumentIn, QuotaIn, limit)
from tokendp.service.streams import event, events, wait
from tokendp.service.tagging import Tagging
from tokendp.service.vault.release import REWRITE, RewriteParams, RewriteRequest
from tokendp.service.vault.ask import ASK, AskParams, AskRequest
from tokendp.service.vault.store import StoredDocument, VaultStore

NOT_FOUND = "no such document in this tenant's vault"
NO_MATCH = ("no confirmed document's public text (spans hidden) shares a word with the question; name the documents "
            "to read with \"documents\", or rephrase")
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
DocumentId = Path(min_length=1, max_length=200, pattern=DOCUMENT_ID,
                  description="the document's id, as stored (at most 200 characters): no '/', no control character")


def vault_routes(worker: Worker, vault: VaultStore, tagging: Tagging, limits: Limits, *,
                 owner: Callable[..., Caller], anyone: Callable[..., Caller]) -> APIRouter:
    """The routes above, on ``worker`` (releases) and ``vault`` (the database)."""
    router = APIRouter(tags=["vault"])
    retriever = Retriever(vault)

    def within_limit(tokens: int | None) -> None:
        """T within this server's --max-new-tokens (the bound the OpenAPI document states), before
        anything is read, planned or counted."""
        if tokens is not None and tokens > limits.max_new_tokens:
            raise APIError("invalid_parameter", f"max_new_tokens {tokens} is above this server's limit of "
                           f"{limits.max_new_tokens}; ask for fewer tokens")

    async def stored(body: DocumentBody, id: str) -> tuple[dict[str, Any], str]:
        """The document checked (spans given: confirmed; none: the server's tagger, a draft)."""
        spans = None if body.spans is None else [s.model_dump() for s in body.spans]
        state = "confirmed"
        if spans is None:
            if len(body.text) > limits.max_tag_chars:
                raise APIError("text_too_long", f"a document without spans is tagged by the server, which takes "
                               f"at most {limits.max_tag_chars} characters (--max-tag-chars); give its spans")
            try:
                found = await tagging.tag(body.text)
            except Exception as err:
                raise errors.to_api_error(err) from None
            spans, state = [{"start": s["start"], "end": s["end"], "label": s["label"]} for s in found], "draft"
        try:
            return check_document(id, body.title, body.text, spans, body.subject), state
        except Exception as err:
            raise errors.to_api_error(err) from None

    @router.post("/v1/documents", status_code=201,
                 responses=answers(*OWNER, *BODY, *TAGGER, "invalid_parameter", "document_exists"))
    async def add_document(body: DocumentIn, who: Caller = Depends(owner)) -> dict[str, Any]:
        """Store a new document (owner). Without spans it is tagged by the server and held as a
        draft until the owner confirms its spans; only confirmed documents are released."""
        doc, state = await stored(body, body.id)
        try:
            version = await asyncio.to_thread(vault.put, who.tenant, doc, state=state, create=True)
        except Exception as err:
            raise errors.to_api_error(err) from None
        return {"id": body.id, "version": version, "state": state, "spans": len(doc["spans"])}

    @router.put("/v1/documents/{id}", responses=answers(*OWNER, *BODY, *TAGGER, "invalid_parameter"))
    async def replace_document(body: DocumentBody, id: str = DocumentId, who: Caller = Depends(owner)
                               ) -> dict[str, Any]:
        """Store or replace a document (owner); its cached rewrites go, its units' spend stays."""
        doc, state = await stored(body, id)
        version = await asyncio.to_thread(vault.put, who.tenant, doc, state=state, create=False)
        return {"id": id, "version": version, "state": state, "spans": len(doc["spans"])}

    @router.get("/v1/documents/{id}", responses=answers(*OWNER, *PARAMS, "not_found"))
    async def get_document(id: str = DocumentId, who: Caller = Depends(owner)) -> dict[str, Any]:
        """A stored document with its text, spans, subjects and state (owner only)."""
        doc = await asyncio.to_thread(vault.get, who.tenant, id)
        if doc is None:
            raise APIError("not_found", NOT_FOUND)
        return doc.owner_view()

    @router.delete("/v1/documents/{id}", responses=answers(*OWNER, *PARAMS, "not_found"))
    async def delete_document(id: str = DocumentId, who: Caller = Depends(owner)) -> dict[str, Any]:
        """Delete a document and its cached rewrites (owner); its units' spend stays."""
        if not await asyncio.to_thread(vault.delete, who.tenant, id):
            raise APIError("not_found", NOT_FOUND)
        return {"id": id, "deleted": True}

    @router.post("/v1/documents/{id}/confirm", responses=answers(*OWNER, *PARAMS, "not_found"))
    async def confirm_document(id: str = DocumentId, who: Caller = Depends(owner)) -> dict[str, Any]:
        """Confirm a draft's spans as stored (owner; to change them, PUT the document with spans)."""
        if not await asyncio.to_thread(vault.confirm, who.tenant, id):
            raise APIError("not_found", NOT_FOUND)
        return {"id": id, "state": "confirmed"}

    @router.get("/v1/documents", responses=answers(*KEYED))
    async def list_documents(who: Caller = Depends(anyone)) -> dict[str, Any]:
        """The tenant's documents: ids and public titles of confirmed ones (a reader), or every
        one with its state (an owner: drafts to confirm included)."""
        listing = await asyncio.to_thread(vault.listing, who.tenant, confirmed_only=who.role != "owner")
        return {"documents": listing}

    @router.get("/v1/documents/{id}/rewrite", responses=answers(*KEYED, *PARAMS, *RELEASE, stream=True))
    async def rewrite(request: Request, id: str = DocumentId,
                      epsilon: float = Query(ge=0, description="each unit's epsilon for this release (at the "
                                             "tenant's delta); the lifetime budget bounds all releases together"),
                      max_new_tokens: int | None = Query(None, ge=1, le=MAX_NEW_TOKENS,
                                                         description="T (default: from the document)",
                                                         json_schema_extra=limit("max_new_tokens")),
                      stream: bool = Query(False, description="server-sent events (or Accept: text/event-stream)"),
                      who: Caller = Depends(anyone)):
        """A DP-Fusion rewrite of a confirmed document under every unit's lifetime filter,
        with its certificate; made once per (document version, parameters), then returned again
        at no cost (``"cached": true``). Never refused for a unit's budget: a unit whose budget
        is spent is read as the public text."""
        streaming = stream or "text/event-stream" in request.headers.get("accept", "")
        within_limit(max_new_tokens)
        doc = await asyncio.to_thread(vault.get, who.tenant, id)
        if doc is None or doc.state != "confirmed":
            raise APIError("not_found", NOT_FOUND)
        try:
            params = RewriteParams(epsilon, max_new_tokens)
        except Exception as err:
            raise errors.to_api_error(err) from None
        cached = await asyncio.to_thread(vault.cached, who.tenant, id, doc.version, params.key())
        if cached is not None:
            body = {**cached, "cached": True}
            if not streaming:
                return body
            return StreamingResponse(iter([event("token", {"text": body["text"]}), event("result", body)]),
                                     media_type="text/event-stream", headers=SSE_HEADERS)
        return await release(Job(REWRITE, RewriteRequest(who, doc, params), who.tenant,
                                 tokens=queue.Queue() if streaming else None), request)

    @router.post("/v1/ask", responses=answers(*KEYED, *BODY, *RELEASE, "forbidden", "no_match", stream=True))
    async def ask(body: AskIn, request: Request, who: Caller = Depends(anyone)):
        """An answer to a question from confirmed documents, with DP-Fusion under every unit's
        lifetime filter (one group per unit across the documents read) and its certificate, and
        the ids of the documents read (public: named, or retrieved from the documents' public
        versions). Never refused for a unit's budget; never stored."""
        streaming = body.stream or "text/event-stream" in request.headers.get("accept", "")
        if body.seed is not None and who.role != "owner":
            raise APIError("forbidden", "only an owner key may fix the seed: an answer's guarantee holds "
                           "against whoever does not know its seed (docs/vault.md)")
        if body.documents is not None and body.top_k is not None:
            raise APIError("invalid_parameter", "give documents (the ones to read) or top_k (how many to "
                           "retrieve), not both")
        within_limit(body.max_new_tokens)
        try:
            params = AskParams(body.epsilon, body.max_new_tokens or min(DEFAULT_MAX_NEW_TOKENS, limits.max_new_tokens),
                               body.temperature)
        except Exception as err:
            raise errors.to_api_error(err) from None
        docs = await asyncio.to_thread(read, who, body)
        return await release(Job(ASK, AskRequest(who, body.question, docs, params, body.seed), who.tenant,
                                 tokens=queue.Queue() if streaming else None), request)

    def read(who: Caller, body: AskIn) -> tuple[StoredDocument, ...]:
        """The documents an answer reads, as a function of public data only: the ids named (each
        confirmed, else the same 404 as a missing one), or the retrieved ones, best first (one
        the owner removed or replaced by a draft since the index was read is left out)."""
        if body.documents is not None:
            docs = [vault.get(who.tenant, id) for id in body.documents]
            if any(d is None or d.state != "confirmed" for d in docs):
                raise APIError("not_found", NOT_FOUND)
            return tuple(docs)
        found = [vault.get(who.tenant, id) for id in retriever.search(who.tenant, body.question,
                                                                        body.top_k or DEFAULT_TOP_K)]
        docs = tuple(d for d in found if d is not None and d.state == "confirmed")
        if not docs:
            raise APIError("no_match", NO_MATCH)
        return docs

    async def release(job: Job, request: Request):
        """Run a release on the worker: its JSON answer, or (a job with a token queue) its events
        once it was planned and reserved; every refusal before that is a plain 4xx."""
        if job.tokens is None:
            return await wait(worker, job, request)
        worker.submit(job)
        try:
            await asyncio.wrap_future(job.admitted)
        except Exception as err:
            raise errors.to_api_error(err) from None
        return StreamingResponse(events(job), media_type="text/event-stream", headers=SSE_HEADERS)

    @router.get("/v1/ledger", responses=answers(*OWNER))
    async def ledger(who: Caller = Depends(owner)) -> dict[str, Any]:
        """Every unit's lifetime budget, committed spend and open reservations, in RDP at the
        vault's order, and releases per state (owner only: data-dependent)."""
        return await asyncio.to_thread(vault.ledger, who.tenant)

    @router.get("/v1/readers", responses=answers(*OWNER))
    async def readers(who: Caller = Depends(owner)) -> dict[str, Any]:
        """The tenant's reader keys (prefixes) and their quotas (owner only)."""
        return {"readers": await asyncio.to_thread(vault.readers, who.tenant)}

    @router.put("/v1/readers/{prefix}/quota", responses=answers(*OWNER, *BODY, "not_found", "invalid_parameter"))
    async def set_quota(body: QuotaIn, prefix: str = Path(min_length=1, max_length=64, pattern=KEY_PREFIX,
                                                          description="the reader key's prefix (GET /v1/readers)"),
                        who: Caller = Depends(owner)) -> dict[str, Any]:
        """Set a reader key's quota: fresh releases and tokens (T) per 24 hours (owner only)."""
        try:
            found = await asyncio.to_thread(vault.set_quota, who.tenant, prefix,
                                            releases_per_day=body.releases_per_day, tokens_per_day=body.tokens_per_day)
        except Exception as err:
            raise errors.to_api_error(err) from None
        if not found:
            raise APIError("not_found", "no reader key of this tenant has that prefix (see GET /v1/readers)")
        return {"prefix": prefix, **body.model_dump()}

    return router

