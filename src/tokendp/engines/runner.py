"""``sanitize_corpus`` and :func:`run_job`: check the input, open its resumable output, run an
engine, finish.

What ``tokendp sanitize CORPUS --engine local|ray`` runs (and, through
:func:`tokendp.engines.synthesis.synthesize_corpus`, ``tokendp synthesize REFERENCES --engine
...``); a thin layer over the corpus, the store and the engines, usable from Python too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tokendp._optional import require
from tokendp.engines.corpus import Corpus, scan_corpus
from tokendp.engines.job import Job
from tokendp.engines.local import Batching, check_batching, run_local
from tokendp.engines.ray import corpus_dataset, run_ray
from tokendp.engines.store import MemorySink, RunStore
from tokendp.engines.summary import Summary
from tokendp.engines.worker import SanitizeWorker
from tokendp.errors import InvalidParameterError
from tokendp.jobs.config import SanitizeConfig
from tokendp.text.taggers import get_tagger, spans_from_json
from tokendp.text.taggers.labels import LabelChoice

Engine = Literal["local", "ray"]
# What may differ between the sessions of one resumable run: where and how fast it runs.
_PLACEMENT = ("device",)


@dataclass(frozen=True)
class CorpusRun:
    """A finished (or partly finished) run: its summary, and the output path (None: not all
    outputs are done, or no --out) or the output lines in output order (no --out); ``complete``:
    the output was finished before this call, which wrote nothing (:mod:`tokendp.engines.store`). Diagnostics,
    when asked for, stay apart: their lines in output order (no --out) or the file beside the
    output they were written to (:func:`tokendp.engines.store.diagnostics_path`)."""

    summary: Summary
    output: Path | None
    lines: list[str] | None
    diagnostics: list[str] | None = None
    diagnostics_path: Path | None = None
    complete: bool = False  # ``out`` was already finished by a run with the same job, parameters and input


def check_engine(engine: str, ray_options: Mapping[str, Any]) -> None:
    """A known engine, Ray options only with Ray, and Ray installed for it (before any input is read)."""
    if engine not in ("local", "ray"):
        raise InvalidParameterError(f"engine must be 'local' or 'ray', got {engine!r}")
    if engine == "local" and ray_options:
        raise InvalidParameterError(f"{', '.join(sorted(ray_options))} apply to the ray engine only")
    if engine == "ray":
        require("ray", "ray", "--engine ray", why="(with Ray Data)")


def sanitize_corpus(corpus_path: str | Path, params: Mapping[str, Any], *, out: str | Path | None = None,
                    engine: Engine = "local", batch_size: int = 8, threads: int | None = None,
                    progress: bool = True, batching: Batching = "static", note: Callable[[str], None] | None = None,
                    **ray_options: Any) -> CorpusRun:
    """Rewrite every document of a JSONL or Parquet corpus with ``sanitize_batch(**params)``.

    ``out``: ``FILE.jsonl``, ``FILE.parquet`` or a directory (see :mod:`tokendp.engines.store`);
    a run with the same ``out`` and parameters resumes where the last one stopped. None keeps
    the records in memory and returns them as ``lines``. With ``params["diagnostics"]`` the
    documents' diagnostics are kept apart from the records (:class:`CorpusRun`). ``threads``:
    torch threads per worker (local default: torch's; Ray default: 1). ``ray_options`` go to
    :func:`tokendp.engines.ray.run_ray` (``workers``, ``gpus_per_worker``, ``address``, ...).
    ``batching`` (local engine): ``"static"``, batches of ``batch_size`` documents; ``"continuous"``,
    ``batch_size`` documents decoding at once, a finished one's slot refilled at once; ``"auto"``,
    continuous on an accelerator and static on a CPU (:func:`tokendp.engines.local.run_local`).
    Like the batch size it changes no output's distribution and is not part of the run's
    parameters: a resume may use another. The Ray engine runs static batches (``"auto"`` too).
    ``note(message)`` hears what the run is about to do (how many documents are left, the model
    loading) before it does it. A finished ``out`` run again with the same parameters and input
    is complete: nothing loads and nothing is written (``CorpusRun.complete``).
    """
    check_batching(batching)
    if engine != "local" and batching == "continuous":
        raise InvalidParameterError("continuous batching applies to the local engine only")
    check_engine(engine, ray_options)
    SanitizeConfig.of(params)  # every parameter is checked before the input is read
    corpus = scan_corpus(corpus_path, require_ids=engine == "ray")
    return sanitize_checked(corpus, params, out=out, engine=engine, batch_size=batch_size, threads=threads,
                            progress=progress, batching=batching, note=note, **ray_options)


def sanitize_checked(corpus: Corpus, params: Mapping[str, Any], *, out: str | Path | None, engine: Engine,
                     batch_size: int, threads: int | None, progress: bool, batching: Batching,
                     note: Callable[[str], None] | None = None, **ray_options: Any) -> CorpusRun:
    """:func:`sanitize_corpus` from a checked corpus on: its labels against the job's, the
    tagger, the run. ``corpus``: a :class:`Corpus`, or (local engine) any object with its
    ``path`` (named in messages), ``ids``, ``needs_tagger`` and ``records()``."""
    check_corpus_labels(corpus, SanitizeConfig.of(params).label_choice)
    if corpus.needs_tagger and isinstance(params.get("tagger", "auto"), str):
        get_tagger(params.get("tagger", "auto"))  # a missing tagger package fails here, before any model loads
    job = Job("sanitize", "documents", corpus.path, corpus.ids, SanitizeWorker,
              todo=lambda done: (r for r in corpus.records() if r.id not in done),
              dataset=lambda ray, done, size: corpus_dataset(ray, corpus, done, size),
              run=run_fingerprint("sanitize", params))
    return run_job(job, params, out=out, engine=engine, batch_size=batch_size, threads=threads, progress=progress,
                   batching=batching, note=note, **ray_options)


def check_corpus_labels(corpus: Corpus, choice: LabelChoice) -> None:
    """The label choice against the whole corpus, before any model loads: the labels of the spans
    its records carry must each be protected or kept, and (when every record carries spans) each
    protected name must match a span somewhere. Records without spans are tagged later, each
    checked as it is prepared."""
    if choice.protect is None:
        return
    labels = [s.label for r in corpus.records() if r.spans is not None
              for s in spans_from_json(json.loads(r.spans), r.text)]
    if corpus.needs_tagger:
        choice.check_names(labels)
    choice.check(labels, whole_input=not corpus.needs_tagger)


def run_job(job: Job, params: Mapping[str, Any], *, out: str | Path | None, engine: Engine, batch_size: int,
            threads: int | None, progress: bool, batching: Batching = "static",
            note: Callable[[str], None] | None = None, **ray_options: Any) -> CorpusRun:
    """Run ``job`` on ``engine`` with its workers' ``params``, into the resumable ``out`` (None: in
    memory); ``note`` as for :func:`sanitize_corpus`."""

    def run(sink: Any) -> Summary:
        left = len(job.ids) - len(sink.done)
        if note is not None and left:
            model = params.get("model")
            done = f", {len(sink.done)} already done" if sink.done else ""
            where = "in this process" if engine == "local" else "on Ray workers"
            note(f"{left} {job.noun} to write{done}; loading model{f' {model}' if model else ''} {where}")
        if engine == "local":
            return run_local(job, sink, params, batch_size=batch_size, threads=threads, progress=progress,
                             batching=batching)
        return run_ray(job, sink, params, batch_size=batch_size, threads=threads, progress=progress, **ray_options)

    if out is None:
        sink = MemorySink()
        summary = run(sink)
        return CorpusRun(summary, None, sink.lines(job), sink.diagnostics(job))
    with RunStore(out, job, job.run) as store:
        if store.complete:  # nothing to run: no engine starts, no model loads
            summary = Summary(noun=job.noun, skipped=len(job.ids))
        else:
            summary = run(store)
        written = store.diagnostics_path if store.diagnostics_path.exists() else None
        return CorpusRun(summary, store.finish(), None, diagnostics_path=written, complete=store.complete)


def run_fingerprint(job: str, params: Mapping[str, Any], *, inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a resumed run must share with the first: the job, every parameter that can change an
    output or its guarantee (not the engine, the workers, the batch size or the device), and
    public facts about the input its work was planned from, if any (``inputs``)."""
    kept = {k: _public(v) for k, v in params.items() if k not in _PLACEMENT}
    run = {"job": job, "parameters": kept}
    return run if inputs is None else {**run, "inputs": dict(inputs)}


def _public(value: Any) -> Any:
    """A parameter as JSON: itself, a list of them, or the name of an object (a backend, a tagger)."""
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_public(v) for v in value]
    return getattr(value, "name", type(value).__name__)
