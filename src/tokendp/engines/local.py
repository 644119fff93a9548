"""The local engine: one process, one model, a job's items in batches of ``batch_size`` in
output order; or, for sanitize with continuous batching, ``batch_size`` documents decoding at
once while the next document takes a finished one's place
(:meth:`tokendp.engines.worker.SanitizeWorker.stream`). Either way each output (a rewrite, a
synthetic text) is written to the sink as soon as it is done (the workers' ``each``), so an
interrupt loses only the ones still decoding.

``batching="auto"`` (the command line's default) is continuous batching on an accelerator and
static batches on a CPU, where a step's cost grows with its rows and a fuller batch was measured
no faster (docs/performance.md, "Continuous batching")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import islice
from typing import Any, Literal

from tokendp.engines.job import Job
from tokendp.engines.summary import Summary, Tally
from tokendp.engines.worker import BatchResult
from tokendp.errors import InvalidParameterError

Batching = Literal["auto", "static", "continuous"]
BATCHING = ("auto", "static", "continuous")


def check_batching(batching: str) -> None:
    if batching not in BATCHING:
        raise InvalidParameterError(f"batching must be one of {', '.join(BATCHING)}, got {batching!r}")


def run_local(job: Job, sink: Any, params: Mapping[str, Any], *, batch_size: int = 8,
              threads: int | None = None, progress: bool = True, batching: Batching = "static") -> Summary:
    """Run the items of ``job`` whose outputs are not yet in ``sink.done`` and write them to ``sink``.

    ``params`` are the job's worker's (for sanitize ``sanitize_batch``'s keyword arguments;
    ``threads`` its torch threads); the model is loaded only if something is left to do.
    ``batching``: ``"static"``, batches of ``batch_size`` items, each decoded until its last
    item finishes (a sanitize document is written as it finishes); ``"continuous"``, for a
    worker that can stream (sanitize), ``batch_size`` documents at once, a finished one's slot
    refilled at once (other workers: static);
    ``"auto"``: continuous where the model runs on an accelerator, static on a CPU.
    """
    check_batching(batching)
    skipped = len(sink.done)
    with Tally(sink, job, skipped=skipped, progress=progress) as tally:
        if skipped < len(job.ids):
            _run(job, frozenset(sink.done), params, batch_size, threads, batching, tally.add)
    return tally.summary


def _run(job: Job, done: frozenset, params: Mapping[str, Any], batch_size: int, threads: int | None,
         batching: str, emit: Callable[[BatchResult], None]) -> None:
    it = iter(job.todo(done))  # before the model loads: a job may check its items here
    worker = job.worker(params, threads=threads)
    if batching != "static" and hasattr(worker, "stream") and worker.continuous(accelerator_only=batching == "auto"):
        for result in worker.stream(it, batch_size, accelerator_only=batching == "auto"):
            emit(result)
        return
    while batch := list(islice(it, batch_size)):
        worker.each(batch, emit)
