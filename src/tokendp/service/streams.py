"""Waiting for a job and streaming it: shared by every route that submits work to the worker.

:func:`wait` submits a job and waits for its answer, cancelling it when its client goes first.
:func:`events` turns a streaming job into server-sent events: ``token`` events
(``{"text": new text}``), then one ``result`` (the JSON answer) or ``error`` event.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request

from tokendp.service import errors
from tokendp.service.batching import END, Job, Worker


async def wait(worker: Worker, job: Job, request: Request) -> Any:
    """Submit ``job`` and wait for its answer, cancelling it if its client goes first."""
    worker.submit(job)
    answer = asyncio.wrap_future(job.future)
    gone = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not answer.done():
            job.cancel("the client disconnected")
        return await answer
    except asyncio.CancelledError:  # the server gave up on the request
        job.cancel("the server is shutting down", shutdown=True)
        raise
    except Exception as err:
        raise errors.to_api_error(err, charged=job.charged) from None
    finally:
        gone.cancel()


async def disconnected(request: Request) -> None:
    """Return when the client has gone (the body was read before: only a disconnect comes)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def events(job: Job) -> AsyncIterator[str]:
    """Server-sent events of a streaming job. The stream stops when its client goes (the server
    cancels it, or a send fails at the next token): the job is then cancelled."""
    try:
        while (piece := await asyncio.to_thread(job.tokens.get)) is not END:
            yield event("token", {"text": piece})
        error = job.future.exception()
        if error is None:
            yield event("result", job.future.result())
        else:
            api = errors.to_api_error(error, charged=job.charged)
            yield event("error", errors.error_body(api.code, api.message, **api.extra))
    finally:
        if not job.future.done():
            job.cancel("the client disconnected")


def event(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
