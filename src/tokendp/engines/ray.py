"""The Ray engine: a Ray dataset of a job's items, an actor pool runs them, the driver writes.

The job's dataset (:class:`~tokendp.engines.job.Job`) holds the items left to do in blocks of
``batch_size``, handed to ``workers`` actors (``map_batches`` with an :class:`ActorPoolStrategy`).
Each actor is one of the job's workers (:mod:`~tokendp.engines.worker`): it loads the model once
and runs each block in one batch, exactly as the local engine does. Results stream back to the
driver, which writes them through the same resumable store, shows progress and counts per
worker, so a cluster run needs no shared filesystem for writing.

For sanitize (:func:`corpus_dataset`), Ray Data reads the corpus on the cluster
(``read_binary_files`` for JSONL, split into records; ``read_parquet``) and drops the documents
already written; the driver has already checked the whole corpus
(:func:`~tokendp.engines.corpus.scan_corpus`), with ids required: Ray's readers do not see line
numbers. For synthesize, the driver plans the batches and ships them
(:mod:`~tokendp.engines.synthesis`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

from tokendp._optional import require
from tokendp.engines.arrow import COLUMNS, parse_jsonl_files, parse_rows, record_schema
from tokendp.engines.corpus import Corpus
from tokendp.engines.job import Job
from tokendp.engines.store import OutputRecord
from tokendp.engines.summary import Summary, consume
from tokendp.engines.worker import BatchResult
import tokendp.errors as errors
from tokendp.errors import InvalidParameterError, TokenDPError

_LIGHT = 0.1  # CPUs reserved by the read and parse tasks, which must not wait for the actors' CPUs


def run_ray(job: Job, sink: Any, params: Mapping[str, Any], *, workers: int = 2, batch_size: int = 8,
            gpus_per_worker: float = 0.0, threads: int | None = None, address: str | None = None,
            progress: bool = True) -> Summary:
    """Run the items of ``job`` whose outputs are not yet in ``sink.done`` on a Ray actor pool.

    ``address``: a running cluster (``"auto"``, ``"HOST:6379"``); None
    starts a private local instance (``workers * threads + 1`` CPUs, the node advertised at
    127.0.0.1) unless Ray is already initialised in this process. Each actor reserves ``threads`` CPUs
    (its torch threads; default 1) and ``gpus_per_worker`` GPUs.
    """
    ray = require("ray", "ray", "--engine ray", why="(with Ray Data)")
    threads = threads or 1
    skipped = len(sink.done)
    if skipped == len(job.ids):
        return consume([], sink, job, skipped=skipped, progress=progress)
    started = _init(ray, address, workers * threads + 1)
    _quiet(ray)
    try:
        if started and address is None:
            _check_gpus(ray, gpus_per_worker)
        ds = job.dataset(ray, frozenset(sink.done), batch_size)
        ds = ds.map_batches(
            _Actor, fn_constructor_kwargs={"worker": job.worker, "params": dict(params), "threads": threads},
            batch_size=batch_size, batch_format="pyarrow", num_cpus=threads,
            num_gpus=gpus_per_worker or None, compute=ray.data.ActorPoolStrategy(size=workers))
        batches = _driver_batches(ds)
        try:
            return consume(batches, sink, job, skipped=skipped, progress=progress)
        finally:
            batches.close()  # an interrupted driver stops the pipeline and its actors now, not at garbage collection
    finally:
        if started:
            ray.shutdown()


def _init(ray: Any, address: str | None, cpus: int) -> bool:
    """Connect to ``address`` or start a local instance (its GPUs detected); True if this call
    started or joined Ray (and so must shut it down)."""
    if ray.is_initialized():
        return False
    quiet = dict(include_dashboard=False, log_to_driver=False, configure_logging=True, logging_level="warning")
    if address is None:
        ray.init(address="local", num_cpus=cpus, _node_ip_address="127.0.0.1", **quiet)
    else:
        ray.init(address=address, **quiet)
    return True


def _check_gpus(ray: Any, per_worker: float) -> None:
    """An actor asking for more GPUs than the cluster has would wait for ever: fail instead."""
    have = ray.cluster_resources().get("GPU", 0)
    if per_worker > have:
        raise InvalidParameterError(f"--gpus-per-worker {per_worker:g}, but the Ray cluster has {have:g} GPUs")


def _quiet(ray: Any) -> None:
    """Ray Data's own progress bars and hints off: the driver's bar counts documents written."""
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.issue_detectors_config.detectors = []  # memory hints about the light parse tasks
    logging.getLogger("ray.data").setLevel(logging.WARNING)


def corpus_dataset(ray: Any, corpus: Corpus, done: frozenset, batch_size: int) -> Any:
    """The records of ``corpus`` left to do, read by Ray Data, in blocks of ``batch_size`` rows."""
    kwargs = {"done": done, "schema": record_schema(corpus)}
    path = str(corpus.path.resolve())
    if corpus.format == "jsonl":
        ds = ray.data.read_binary_files(path).map_batches(parse_jsonl_files, fn_kwargs=kwargs,
                                                          batch_format="pyarrow", num_cpus=_LIGHT)
    else:
        import pyarrow.parquet as pq

        names = set(pq.ParquetFile(corpus.path).schema_arrow.names)
        ds = ray.data.read_parquet(path).select_columns([c for c in COLUMNS if c in names])
        ds = ds.map_batches(parse_rows, fn_kwargs=kwargs, batch_format="pyarrow", num_cpus=_LIGHT)
    return ds.repartition(target_num_rows_per_block=batch_size)


class _Actor:
    """A Ray Data actor: one worker of the job (one model) for its whole life.

    A :class:`TokenDPError` (a document too long, say) comes back as data, its type and
    message in the ``error`` column, because Ray Data hands the driver only its own wrapper of
    an exception raised here; the driver raises it again (:func:`_driver_batches`)."""

    def __init__(self, worker: type, params: dict[str, Any], threads: int) -> None:
        self.worker = worker(params, threads=threads)

    def __call__(self, batch: Any) -> dict[str, list]:
        items = self.worker.items(batch)
        ids, n = [item.id for item in items], len(items)
        if not items:  # every item of the block was done before
            return {"id": [], "line": [], "diagnostics": [], "tokens": [], "seconds": [], "worker": [], "error": []}
        try:
            res = self.worker(items)
        except TokenDPError as err:
            return {"id": ids, "line": [""] * n, "diagnostics": [""] * n, "tokens": [0] * n, "seconds": [0.0] * n,
                    "worker": [self.worker.name] * n, "error": [f"{type(err).__name__}:{err}"] * n}
        return {"id": [r.id for r in res.records], "line": [r.line for r in res.records],
                "diagnostics": [r.diagnostics or "" for r in res.records],
                "tokens": [res.tokens] + [0] * (n - 1), "seconds": [res.seconds] + [0.0] * (n - 1),
                "worker": [res.worker] * n, "error": [""] * n}


def _driver_batches(ds: Any) -> Iterator[BatchResult]:
    """The actors' output blocks as they arrive, one :class:`BatchResult` per worker in a block."""
    for block in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        by_worker: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in block.to_pylist():
            if row["error"]:
                raise _worker_error(row["error"])
            by_worker[row["worker"]].append(row)
        for worker, rows in by_worker.items():
            yield BatchResult([OutputRecord(r["id"], r["line"], r["diagnostics"] or None) for r in rows],
                              sum(r["tokens"] for r in rows), sum(r["seconds"] for r in rows), worker)


def _worker_error(error: str) -> TokenDPError:
    """The error an actor reported as ``"TypeName:message"``, as that tokendp error type."""
    name, _, message = error.partition(":")
    cls = getattr(errors, name, None)
    return (cls if isinstance(cls, type) and issubclass(cls, TokenDPError) else TokenDPError)(message)
