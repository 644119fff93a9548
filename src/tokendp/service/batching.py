"""One worker thread owns the models: it plans, reserves, batches and generates.

Requests become :class:`Job` objects on a queue. The worker takes every job waiting (up to
``max_queue_take``), plans each one and reserves its budget (:mod:`tokendp.service.plans`,
:meth:`~tokendp.service.store.BudgetStore.reserve`), then runs the admitted jobs: sanitize jobs
whose :meth:`~tokendp.service.plans.Plan.batch_key` is equal share one ``run_sanitize`` call
(one forward pass per generated token for all their documents), up to ``max_batch`` documents;
every other job runs alone. Answers (``generate`` and the vault's ``ask``) run on the answering
model, everything else on the rewriting one (:class:`Models`; one model when they are the same).
All model, tokenizer and tagger work happens on this one thread
(the tagger tags requests that give no spans; ``/v1/tag`` runs in its own process instead,
:mod:`tokendp.service.tagging`, so that tagging never holds up generation).

Before a batch decodes, each job's charges are recomputed from the prepared job that is about to
run and compared with its reservation as the store recorded it (:meth:`Plan.check`), so a
streamed request sends no token before its certificate has been checked.

Streaming: the run's ``on_token(doc_index, token_id)`` decodes the document's tokens so far
(here, on the worker thread: the tokenizer is not shared across threads) and puts the new text on
its job's queue; :data:`END` follows the last piece (after the result or error is set).

Vault releases (kinds ``rewrite``, :mod:`tokendp.service.vault.release`, and ``ask``,
:mod:`tokendp.service.vault.ask`) take the same path with the vault's ledger
(:class:`~tokendp.service.vault.store.VaultStore`) in place of the budget store, in arrival order (docs/privacy.md, "The vault: one lifetime filter per unit"). :meth:`submit`
hands them to a ticket thread, which takes each one's ticket in the order they came (or refuses
the reader's quota), whatever the model is doing; the worker then plans it and sets it aside
until its ticket may reserve (every earlier ticket of its units has closed), rechecking the
releases set aside after every batch (tickets close there) and every ``poll_s`` seconds while
any waits (tickets close in other processes), never in a busy loop. Tickets whose process missed
its lease are expired on the way. A rewrite whose ticket may reserve looks for its stored rewrite
first: an identical release it waited behind (the same document version and parameters) may have
stored it, and it is then answered that, ``"cached": true``, its ticket removed unreserved and
nothing charged or counted. Reserved, the prepared job is given its reservations, checked
against them before the first token, and after the last the actual spend committed (what the
filter left returns to the unit) and a rewrite cached. A release that fails after a token
keeps its reservations spent in full; one cancelled after a token commits what its filter spent
up to there; one cancelled or refused while it waits is voided. The heartbeat
(:mod:`tokendp.service.vault.heartbeat`) keeps this process's tickets alive while the worker runs; a
ticket the database would not close is closed again at the next round (a commit as a failure).

Cancelling (:meth:`Job.cancel`: its client went away, or the server is shutting down,
:meth:`Worker.cancel_all`): a job not yet planned ends unplanned and uncharged; one reserved but
not started is voided, like a failure before its first token; one generating stops at its next
token (``on_token`` raises :class:`tokendp.generation.StopDocument`; the rest of its batch goes
on) and its reservation stays spent, state ``cancelled``. Either way it ends with :class:`Cancelled`.
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tokendp.service.vault.heartbeat import Heartbeat
from tokendp.service.keys import Tenant
from tokendp.service.plans import Plan, plan_generate, plan_sanitize, plan_synthesize
from tokendp.service.store import BudgetStore
from tokendp.service.vault.release import REWRITE, LeastTokens, plan_rewrite
from tokendp.service.vault.ask import ASK, plan_ask
from tokendp.service.vault.store import VaultStore

log = logging.getLogger("tokendp.service")
END = object()
RECHECK = object()  # the worker's queue was quiet for poll_s while releases wait for their tickets
VAULT_KINDS = frozenset({REWRITE, ASK})  # releases charged to the vault's units, not the budget store
BATCHED = frozenset({"sanitize", REWRITE, ASK})  # kinds whose jobs may share a batch (on_token's index is a job's)
ANSWERS = frozenset({"generate", ASK})  # kinds that run on the answering model


class Models(NamedTuple):
    """What the worker loads: the rewriting model (sanitize, synthesize, vault rewrites), the tagger,
    and the answering model (generate, vault answers), the rewriting one when None."""

    writer: Any
    tagger: Any
    answerer: Any = None


class ModelUnavailable(Exception):
    """The model failed to load when the server started (503 model_unavailable)."""


class Cancelled(Exception):
    """A job cancelled before it finished (its message says why: the client went away, or the
    server is shutting down)."""

    def __init__(self, reason: str, *, shutdown: bool = False) -> None:
        super().__init__(reason)
        self.shutdown = shutdown


@dataclass(eq=False)  # compared (and hashed) by identity: the worker keeps its live jobs in a set
class Job:
    """One request: its kind, body, tenant; the future that gets its response body."""

    kind: str  # sanitize | generate | synthesize | rewrite | ask
    request: Any
    tenant: Tenant | None = None
    future: Future = field(default_factory=Future)
    admitted: Future = field(default_factory=Future)  # set once planned and reserved (or refused)
    tokens: queue.Queue | None = None  # streamed text pieces, then END
    plan: Plan | None = None
    reservation: int | None = None
    charged: bool = False  # whether the job's reservation stands (set by the worker)
    left: dict[str, float] | None = None  # vault releases: what the filter left of each unit's reservation
    cancelled: Cancelled | None = None  # set (from any thread) by cancel: the job stops at its next token

    def cancel(self, reason: str, *, shutdown: bool = False) -> None:
        """Stop the job at its next token, or before it starts (see the module docstring)."""
        if self.cancelled is None:
            self.cancelled = Cancelled(reason, shutdown=shutdown)

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

    def __init__(self, load: Callable[[], tuple], store: BudgetStore, *, max_tokens: int,
                 max_batch: int = 8, max_queue_take: int = 64, vault: VaultStore | None = None,
                 poll_s: float = 0.2) -> None:
        self._load, self.store, self.vault = load, store, vault
        self.max_tokens, self.max_batch, self.max_queue_take = max_tokens, max_batch, max_queue_take
        self.poll_s = poll_s
        self.backend = self.tagger = self.answerer = None
        self.ready = threading.Event()
        self.load_error: str | None = None
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="tokendp-worker", daemon=True)
        self._arrivals: queue.Queue = queue.Queue()  # vault releases before their ticket
        self._ticketer = threading.Thread(target=self._take_tickets, name="tokendp-tickets", daemon=True)
        self._waiting: list[Job] = []  # vault releases planned, ticket not yet free to reserve
        self._unclosed: list[tuple[Callable[[int], None], int]] = []  # tickets to close again (_close_ticket)
        self._heartbeat = Heartbeat(vault) if vault is not None else None
        self._live: set[Job] = set()  # submitted and not done
        self._lock = threading.Lock()
        self.closing = False
        self.least_tokens = LeastTokens()  # each stored version's fewest tokens, from its first planning

    def start(self) -> None:
        if self._heartbeat is not None:
            self.vault.expire_untracked()
            self._heartbeat.start()
        self._ticketer.start()
        self._thread.start()

    def stop(self) -> None:
        self._arrivals.put(None)
        self._ticketer.join(timeout=60)
        self._queue.put(None)
        self._thread.join(timeout=60)
        if self._heartbeat is not None:
            self._heartbeat.stop()

    def submit(self, job: Job) -> Job:
        with self._lock:
            if self.closing:
                job.cancel("the server is shutting down", shutdown=True)
            self._live.add(job)
        job.future.add_done_callback(lambda _: self._forget(job))
        (self._arrivals if job.kind in VAULT_KINDS else self._queue).put(job)
        return job

    def _take_tickets(self) -> None:
        """The ticket thread: each vault release's ticket in the order the releases came."""
        while (job := self._arrivals.get()) is not None:
            if job.cancelled is not None:
                job.done(error=job.cancelled)
                continue
            request = job.request
            try:
                job.reservation = self.vault.ticket(request.caller, request.record, request.params.key(),
                                                    request.units(), request.tokens)
            except Exception as err:  # a quota refused, or the database: no ticket
                job.done(error=err)
                continue
            self._queue.put(job)

    def _forget(self, job: Job) -> None:
        with self._lock:
            self._live.discard(job)

    def cancel_all(self, reason: str = "the server is shutting down") -> None:
        """Cancel every job submitted and not done (a shutdown): each stops at its next token or
        before it starts; jobs submitted after this are cancelled at once."""
        with self._lock:
            self.closing = True
            live = list(self._live)
        for job in live:
            job.cancel(reason, shutdown=True)

    # --- the thread ----------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            self.backend, self.tagger, answerer = Models(*self._load())
            self.answerer = answerer or self.backend
        except Exception as err:  # reported by /healthz; every job fails with it
            self.load_error = type(err).__name__
            log.error("model failed to load: %s", type(err).__name__)
        self.ready.set()
        while True:
            try:
                first = self._queue.get(timeout=self.poll_s if self._waiting or self._unclosed else None)
            except queue.Empty:  # only releases set aside: recheck their tickets
                first = RECHECK
            if first is None:
                self._close_waiting()
                return
            jobs = [] if first is RECHECK else [first]
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
                    if not job.future.done() and job not in self._waiting:
                        self._refuse(job, err)  # nothing generated: a release's ticket closes

    def _run(self, jobs: list[Job]) -> None:
        admitted = []
        for job in jobs:
            if job.cancelled is not None:  # gone before it was planned: nothing reserved
                job.done(error=job.cancelled)
                continue
            try:
                if self.load_error:
                    raise ModelUnavailable(self.load_error)
                job.plan = self._plan(job)  # every check of the request; nothing is reserved before it passes
                if job.kind in VAULT_KINDS:
                    self._waiting.append(job)  # reserves when its ticket may (below)
                    continue
                job.reservation = self.store.reserve(job.tenant, job.kind, job.plan.charges)
            except Exception as err:
                self._refuse(job, err)
                continue
            job.charged = True
            job.admit()
            admitted.append(job)
        admitted += self._admit_waiting()
        for batch in batches(admitted, self.max_batch):
            self._generate(batch)

    def _refuse(self, job: Job, err: BaseException) -> None:
        """End a job that generated nothing (a vault release's ticket is voided)."""
        if job.kind in VAULT_KINDS and job.reservation is not None:
            self._close_ticket(self.vault.void, job.reservation)
            job.charged = False
        job.done(error=err)

    def _admit_waiting(self) -> list[Job]:
        """The releases set aside whose tickets may now reserve, reserved, in ticket order. A
        ticket's reservation waits for every earlier ticket of its units (in any process);
        those whose process missed its lease are expired first. A rewrite that an identical
        release stored meanwhile is answered that instead (:meth:`_answered_stored`)."""
        self._retry_unclosed()
        admitted, still = [], []
        for job in sorted(self._waiting, key=lambda j: j.reservation):
            if job.cancelled is not None:  # gone while it waited: nothing reserved
                self._refuse(job, job.cancelled)
                continue
            try:
                if self._blocked(job):
                    still.append(job)
                    continue
                if self._answered_stored(job):
                    continue
                taken = self._reserve(job)
            except Exception as err:
                self._refuse(job, err)
                continue
            if taken is None:
                still.append(job)
                continue
            job.charged = True
            job.admit()
            admitted.append(job)
        self._waiting = still
        return admitted

    def _blocked(self, job: Job) -> bool:
        """Whether an earlier ticket of the release's units is open in a live process (those whose
        process missed its lease are expired first)."""
        live, lapsed = self.vault.blocked(job.reservation)
        for ticket in lapsed:
            self.vault.expire(ticket)
        return live

    def _answered_stored(self, job: Job) -> bool:
        """Answer a rewrite whose ticket may reserve with its stored rewrite, if an identical
        release it waited behind stored one: returning it again is free (docs/vault.md,
        "Releases"). Its ticket is removed unreserved, so it counts against no quota."""
        if not job.plan.stored:
            return False
        request = job.request
        body = self.vault.cached(request.caller.tenant, request.document.id, request.document.version,
                                 request.params.key())
        if body is None:
            return False
        self._close_ticket(self.vault.void, job.reservation)
        body = {**body, "cached": True}
        job.admit()
        if job.tokens is not None:
            job.tokens.put(body["text"])
        job.done(result=body)
        return True

    def _reserve(self, job: Job):
        """Reserve a release whose ticket may, giving its job the reservations; None if the
        database, under its locks, still holds an earlier ticket of its units open."""
        plan = job.plan
        taken = self.vault.reserve(job.request.caller, job.reservation, plan.tokens, plan.units, plan.release_budget)
        if taken is not None:
            plan.use(taken.units)  # on failure the caller voids the ticket: nothing was generated
        return taken

    def _close_waiting(self) -> None:
        """The worker stops: releases still set aside end voided, as cancelled by the shutdown."""
        for job in self._waiting:
            self._refuse(job, job.cancelled or Cancelled("the server is shutting down", shutdown=True))
        self._waiting = []

    def _reserved(self, job: Job) -> Any:
        return self.vault.reserved(job.reservation) if job.kind in VAULT_KINDS else self.store.reserved(job.reservation)

    def _plan(self, job: Job) -> Plan:
        model = self.model(job.kind)
        if job.kind in VAULT_KINDS:
            settings = self.vault.settings(job.request.caller.tenant)
            if job.kind == REWRITE:
                return plan_rewrite(job.request, model, settings, max_tokens=self.max_tokens, least=self.least_tokens)
            return plan_ask(job.request, model, settings, max_tokens=self.max_tokens)
        if job.kind == "sanitize":
            return plan_sanitize(job.request, model, self.tagger, max_tokens=self.max_tokens)
        if job.kind == "generate":
            return plan_generate(job.request, model, self.tagger, max_tokens=self.max_tokens)
        return plan_synthesize(job.request, model, max_tokens=self.max_tokens)

    def model(self, kind: str) -> Any:
        """The backend that runs a job of this kind."""
        return self.answerer if kind in ANSWERS else self.backend

    def _generate(self, batch: list[Job]) -> None:
        """Run one batch of reserved jobs. Each job's charges are checked against its reservation
        (as the store recorded it) before the first token; each report against the prepared
        certificate after the last. A job that fails keeps its reservation spent if it sampled a
        token, and has it voided if it sampled none (nothing was released)."""
        ready = []
        for job in batch:
            if job.cancelled is not None:  # reserved, no token sampled: voided
                self._end(job, error=job.cancelled, sampled=False)
                continue
            try:
                job.plan.check(self._reserved(job))
                ready.append(job)
            except Exception as err:
                log.error("request %s withheld before generation: %s", job.reservation, type(err).__name__)
                self._end(job, error=err, sampled=False)
        if not ready:
            return
        kind, sampled = ready[0].kind, [False] * len(ready)
        stopped = [False] * len(ready)
        tokenizer = self.model(kind).tokenizer
        streams = [_TextStream(j.tokens, tokenizer) if j.tokens is not None else None for j in ready]

        def on_token(i: int, token: int) -> None:
            from tokendp.generation import StopDocument

            i = i if kind in BATCHED else 0  # only these batch jobs; the others' index is a text's
            sampled[i] = True
            if ready[i].cancelled is not None:  # sampled (and charged), not sent: the job ends here
                stopped[i] = True
                raise StopDocument
            if streams[i] is not None:
                streams[i](token)

        try:
            results = _RUNNERS[kind](ready, on_token)  # each job holds its prepared job and model
        except Exception as err:
            log.error("%s batch of %d failed: %s", kind, len(ready), type(err).__name__)
            results = [err] * len(ready)
        for job, result, any_token, cut in zip(ready, results, sampled, stopped):
            error = result if isinstance(result, Exception) else job.cancelled if cut else None
            if error is None:
                try:
                    job.plan.verify(result["texts"] if kind == "synthesize" else [result["report"]])
                except Exception as err:
                    log.error("request %s withheld: %s", job.reservation, type(err).__name__)
                    error = err
            self._end(job, result, error, any_token)

    def _end(self, job: Job, result: Any = None, error: BaseException | None = None, sampled: bool = True) -> None:
        if job.kind in VAULT_KINDS:
            return self._end_release(job, result, error, sampled)
        try:
            if error is not None and not sampled:
                self.store.void(job.reservation)
                job.charged = False
            else:
                state = "spent" if error is None else "cancelled" if isinstance(error, Cancelled) else "failed"
                self.store.finish(job.reservation, state)
        finally:  # a state that cannot be written stays "reserved", which counts all the same
            job.done(result if error is None else None, error)


    def _end_release(self, job: Job, result: Any, error: BaseException | None, sampled: bool) -> None:
        """A vault release ends: voided (no token), committed (what its filter spent; a rewrite
        that finished is cached, an answer never is), or failed (its reservations spent in full)."""
        try:
            if error is not None and not sampled:
                self._close_ticket(self.vault.void, job.reservation)
                job.charged = False
            elif job.left is not None and (error is None or isinstance(error, Cancelled)):
                self._close_ticket(lambda rid: self.vault.commit(rid, job.left, result if error is None and job.plan.stored else None),
                                   job.reservation, retry=self.vault.fail)
            else:
                self._close_ticket(self.vault.fail, job.reservation)
        finally:  # a state that cannot be written stays "open", which counts as spent
            job.done(result if error is None else None, error)

    def _close_ticket(self, close: Callable[[int], None], release: int, retry: Callable[[int], None] | None = None
                      ) -> None:
        """Close a release's ticket; if the database refuses, close it again at the worker's next
        round (with ``retry``: a commit is retried as a failure, spent in full), so that an open
        ticket of a live process never holds its units back for ever."""
        try:
            close(release)
        except Exception as err:
            log.error("release %s could not be closed (retried): %s", release, type(err).__name__)
            self._unclosed.append((retry or close, release))

    def _retry_unclosed(self) -> None:
        pending, self._unclosed = self._unclosed, []
        for close, release in pending:
            self._close_ticket(close, release)


class _TextStream:
    """A streaming job's tokens decoded as they come (on the worker thread: the tokenizer is not
    shared across threads); each new piece of text goes on the job's queue."""

    def __init__(self, pieces: queue.Queue, tokenizer: Any) -> None:
        self.pieces, self.tokenizer, self.ids, self.shown = pieces, tokenizer, [], ""

    def __call__(self, token: int) -> None:
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
            self.pieces.put(text[len(self.shown):] if text.startswith(self.shown) else text)
            self.shown = text


def _run_sanitize(batch: list[Job], on_token: Callable[[int, int], None]) -> list[dict]:
    from tokendp.fusion import PreparedFusion
    from tokendp.generation import document_seed
    from tokendp.jobs.sanitize import run_sanitize

    # A request's seed gives the stream `tokendp sanitize --seed` gives its one document; no seed: the OS's.
    seeds = [secrets.randbits(63) if j.request.seed is None else document_seed(j.request.seed, 0) for j in batch]
    results = run_sanitize(PreparedFusion.concat([j.plan.job for j in batch]), seed=seeds, on_token=on_token)
    return [{"id": j.request.id, **r.to_dict()} for j, r in zip(batch, results)]


def _run_generate(batch: list[Job], on_token: Callable[[int, int], None]) -> list[dict]:
    from tokendp.jobs.generate import run_generate

    (job,) = batch
    (result,) = run_generate(job.plan.job, seed=job.request.seed, on_token=on_token)
    return [{"id": job.request.id, **result.to_dict()}]


def _run_synthesize(batch: list[Job], on_token: Callable[[int, int], None]) -> list[dict]:
    (job,) = batch
    prepared = job.plan.job
    texts = prepared.synthesizer(list(prepared.batches), seed=job.request.seed, on_token=on_token)
    return [{"id": job.request.id, "texts": [t.to_dict() for t in texts]}]


def _run_rewrite(batch: list[Job], on_token: Callable[[int, int], None]) -> list[dict]:
    """Vault rewrites, batched: each with its own reservations as its filter budgets and a seed
    from the OS; what each filter left goes on its job for the commit."""
    from tokendp.fusion import PreparedFusion
    from tokendp.jobs.sanitize import run_sanitize_spending

    seeds = [secrets.randbits(63) if j.request.seed is None else j.request.seed for j in batch]
    results, left = run_sanitize_spending(PreparedFusion.concat([j.plan.job for j in batch]), seed=seeds,
                                          on_token=on_token)
    for job, rest in zip(batch, left):
        job.left = dict(zip(job.plan.units, rest))
    return [j.plan.response(r) for j, r in zip(batch, results)]


def _run_ask(batch: list[Job], on_token: Callable[[int, int], None]) -> list[dict]:
    """Vault answers, batched: as rewrites (each with its own reservations as its filter budgets);
    a seed, an owner's only, gives the stream `tokendp generate --seed` gives its one prompt."""
    from tokendp.fusion import PreparedFusion
    from tokendp.generation import document_seed
    from tokendp.jobs.generate import run_generate_spending

    seeds = [secrets.randbits(63) if j.request.seed is None else document_seed(j.request.seed, 0) for j in batch]
    results, left = run_generate_spending(PreparedFusion.concat([j.plan.job for j in batch]), seed=seeds,
                                          on_token=on_token)
    for job, rest in zip(batch, left):
        job.left = dict(zip(job.plan.units, rest))
    return [j.plan.response(r) for j, r in zip(batch, results)]


_RUNNERS = {"sanitize": _run_sanitize, "generate": _run_generate, "synthesize": _run_synthesize,
            REWRITE: _run_rewrite, ASK: _run_ask}
