"""The local engine: one process, one model, a job's items in batches of ``batch_size`` in
output order, each batch written to the sink as soon as it is done."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any

from tokendp.engines.job import Job
from tokendp.engines.summary import Summary, consume
from tokendp.engines.worker import BatchResult


def run_local(job: Job, sink: Any, params: Mapping[str, Any], *, batch_size: int = 8,
              threads: int | None = None, progress: bool = True) -> Summary:
    """Run the items of ``job`` whose outputs are not yet in ``sink.done`` and write them to ``sink``.

    ``params`` are the job's worker's (for sanitize ``sanitize_batch``'s keyword arguments;
    ``threads`` its torch threads); the model is loaded only if something is left to do.
    """
    skipped = len(sink.done)
    results = _results(job, frozenset(sink.done), params, batch_size, threads) if skipped < len(job.ids) else iter(())
    return consume(results, sink, job, skipped=skipped, progress=progress)


def _results(job: Job, done: frozenset, params: Mapping[str, Any], batch_size: int,
             threads: int | None) -> Iterator[BatchResult]:
    it = iter(job.todo(done))  # before the model loads: a job may check its items here
    worker = job.worker(params, threads=threads)
    while batch := list(islice(it, batch_size)):
        yield worker(batch)
