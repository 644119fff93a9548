"""One worker thread owns the model: it plans, reserves, batches and generates.

Requests become :class:`Job` objects on a queue. The worker takes every job waiting (up to
``max_queue_take``), plans each one and reserves its budget (:mod:`tokendp.service.plans`,
:meth:`~tokendp.service.store.BudgetStore.reserve`), then runs the admitted jobs: sanitize jobs
whose :meth:`~tokendp.service.plans.Plan.batch_key` is equal share one ``sanitize_batch`` call
(one forward pass per generated token for all their documents), up to ``max_batch`` documents;
every other job runs alone. All model, tokenizer and tagger work happens on this one thread
(the tagger tags requests that give no spans; ``/v1/tag`` runs in its own process instead,
:mod:`tokendp.service.tagging`, so that tagging never holds up generation).

Streaming: ``sanitize_batch``'s ``on_token(doc_index, token_id)`` decodes the document's tokens
so far (here, on the worker thread: the tokenizer is not shared across threads) and puts the new
text on its job's queue; :data:`END` follows the last piece (after the result or error is set).
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from tokendp.service.keys import Tenant
from tokendp.service.plans import Plan, plan_generate, plan_sanitize, plan_synthesize
from tokendp.service.store import BudgetStore

log = logging.getLogger("tokendp.service")
END = object()


class ModelUnavailable(Exception):
    """The model failed to load when the server started (503 model_unavailable)."""


@dataclass
class Job:
    """One request: its kind, body, tenant; the future that gets its response body."""

    kind: str  # sanitize | generate | synthesize
    request: Any
    tenant: Tenant | None = None
    future: Future = field(default_factory=Future)
    admitted: Future = field(default_factory=Future)  # set once planned and reserved (or refused)
    tokens: queue.Queue | None = None  # streamed text pieces, then END
    plan: Plan | None = None
    reservation: int | None = None

    def admit(self) -> None:
        self.admitted.set_result(True)

    def done(self, result: Any = None, error: BaseException | None = None) -> None:
        if not self.admitted.done() and error is not None:
            self.admitted.set_exception(error)
        elif not self.admitted.done():
            self.admitted.set_result(True)
        if error is None:
            self.future.set_result(result)
        else:
            self.future.set_exception(error)
        if self.tokens is not None:
            self.tokens.put(END)


def batches(jobs: list[Job], max_batch: int) -> list[list[Job]]:
    """Admitted jobs grouped by batch key (None: alone), in arrival order, at most max_batch each."""
    groups: dict[Any, list[list[Job]]] = {}
    order: list[list[Job]] = []
    for job in jobs:
        key = job.plan.batch_key()
        open_ = groups.get(key) if key is not None else None
        if open_ and len(open_[-1]) < max_batch:
            open_[-1].append(job)
            continue
        batch = [job]
        order.append(batch)
        if key is not None:
            groups.setdefault(key, []).append(batch)
    return order


class Worker:
    """The queue and the thread that runs it (see the module docstring)."""

    def __init__(self, load: Callable[[], tuple[Any, Any]], store: BudgetStore, *, max_tokens: int,
                 max_batch: int = 8, max_queue_take: int = 64) -> None:
        self._load, self.store = load, store
        self.max_tokens, self.max_batch, self.max_queue_take = max_tokens, max_batch, max_queue_take
        self.backend = self.tagger = None
        self.ready = threading.Event()
        self.load_error: str | None = None
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="tokendp-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=60)

    def submit(self, job: Job) -> Job:
        self._queue.put(job)
        return job

    # --- the thread ----------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            self.backend, self.tagger = self._load()
        except Exception as err:  # reported by /healthz; every job fails with it
            self.load_error = type(err).__name__
            log.error("model failed to load: %s", type(err).__name__)
        self.ready.set()
        while True:
            first = self._queue.get()
            if first is None:
                return
            jobs = [first]
            while len(jobs) < self.max_queue_take:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    self._queue.put(None)
                    break
                jobs.append(job)
            try:
                self._run(jobs)
            except Exception as err:  # the thread must outlive any one batch
                log.error("worker error: %s", type(err).__name__)
                for job in jobs:
                    if not job.future.done():
                        job.done(error=err)

    def _run(self, jobs: list[Job]) -> None:
        admitted = []
        for job in jobs:
            try:
                if self.load_error:
                    raise ModelUnavailable(self.load_error)
                job.plan = self._plan(job)
                job.reservation = self.store.reserve(job.tenant, job.kind, job.plan.charges)
                job.admit()
                admitted.append(job)
            except Exception as err:
                job.done(error=err)
        for batch in batches(admitted, self.max_batch):
            self._generate(batch)

    def _plan(self, job: Job) -> Plan:
        if job.kind == "sanitize":
            return plan_sanitize(job.request, self.backend, self.tagger, max_tokens=self.max_tokens)
        if job.kind == "generate":
            return plan_generate(job.request, self.backend, self.tagger, max_tokens=self.max_tokens)
        return plan_synthesize(job.request, self.backend, max_tokens=self.max_tokens)

    def _generate(self, batch: list[Job]) -> None:
        """Run one batch; a job whose certificate matches its plan gets its result and is marked
        spent, any other is marked failed (its reservation stays spent) and gets the error."""
        try:
            results = _RUNNERS[batch[0].kind](self.backend, batch)
        except Exception as err:
            log.error("%s batch of %d failed: %s", batch[0].kind, len(batch), type(err).__name__)
            results = [err] * len(batch)
        for job, result in zip(batch, results):
            error = result if isinstance(result, Exception) else None
            if error is None:
                try:
                    for report in result.pop("_reports"):
                        job.plan.verify(report)
                except Exception as err:
                    log.error("request %s withheld: %s", job.reservation, type(err).__name__)
                    error = err
            try:
                self.store.finish(job.reservation, "failed" if error else "spent")
            finally:  # a state that cannot be written stays "reserved", which counts all the same
                job.done(result if error is None else None, error)


def _run_sanitize(backend: Any, batch: list[Job]) -> list[dict]:
    from tokendp.generation import document_seed
    from tokendp.sanitize import sanitize_batch

    ids: list[list[int]] = [[] for _ in batch]
    shown = [""] * len(batch)

    def on_token(i: int, token: int) -> None:
        if batch[i].tokens is None:
            return
        ids[i].append(token)
        text = backend.tokenizer.decode(ids[i], skip_special_tokens=True)
        if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
            batch[i].tokens.put(text[len(shown[i]):] if text.startswith(shown[i]) else text)
            shown[i] = text

    common = {k: v for k, v in batch[0].plan.params.items() if k not in ("spans", "seed")}
    # A request's seed gives the stream `tokendp sanitize --seed` gives its one document; no seed: the OS's.
    seeds = [secrets.randbits(63) if j.plan.params["seed"] is None else document_seed(j.plan.params["seed"], 0)
             for j in batch]
    results = sanitize_batch([j.request.text for j in batch], spans=[j.plan.params["spans"] for j in batch],
                             model=backend, on_token=on_token, seed=seeds, **common)
    return [{"id": j.request.id, **r.to_dict(), "_reports": [r.report.to_dict()]} for j, r in zip(batch, results)]


def _run_generate(backend: Any, batch: list[Job]) -> list[dict]:
    from tokendp.generate import generate_batch

    (job,) = batch
    (result,) = generate_batch([job.request.prompt], model=backend, **job.plan.params)
    return [{"id": job.request.id, **result.to_dict(), "_reports": [result.report.to_dict()]}]


def _run_synthesize(backend: Any, batch: list[Job]) -> list[dict]:
    from tokendp.synthesize import synthesize

    (job,) = batch
    texts = [t.to_dict() for t in synthesize(job.request.references, model=backend, **job.plan.params)]
    return [{"id": job.request.id, "texts": texts, "_reports": texts}]


_RUNNERS = {"sanitize": _run_sanitize, "generate": _run_generate, "synthesize": _run_synthesize}
