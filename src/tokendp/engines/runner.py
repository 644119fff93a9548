"""``sanitize_corpus``: check a corpus, open its resumable output, run an engine, finish.

What ``tokendp sanitize CORPUS --engine local|ray`` runs; a thin layer over the corpus, the
store and the engines, usable from Python too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tokendp._optional import require
from tokendp.engines.corpus import scan_corpus
from tokendp.engines.local import run_local
from tokendp.engines.ray import run_ray
from tokendp.engines.store import MemorySink, RunStore
from tokendp.engines.summary import Summary
from tokendp.errors import InvalidParameterError
from tokendp.text.taggers import get_tagger

Engine = Literal["local", "ray"]
# What may differ between the sessions of one resumable run: where and how fast it runs.
_PLACEMENT = ("device",)


@dataclass(frozen=True)
class CorpusRun:
    """A finished (or partly finished) run: its summary, and the output path (None: not all
    documents are done, or no --out) or the output lines in input order (no --out)."""

    summary: Summary
    output: Path | None
    lines: list[str] | None


def sanitize_corpus(corpus_path: str | Path, params: Mapping[str, Any], *, out: str | Path | None = None,
                    engine: Engine = "local", batch_size: int = 8, threads: int | None = None,
                    progress: bool = True, **ray_options: Any) -> CorpusRun:
    """Rewrite every document of a JSONL or Parquet corpus with ``sanitize_batch(**params)``.

    ``out``: ``FILE.jsonl``, ``FILE.parquet`` or a directory (see :mod:`tokendp.engines.store`);
    a run with the same ``out`` and parameters resumes where the last one stopped. None keeps
    the records in memory and returns them as ``lines``. ``threads``: torch threads per worker
    (local default: torch's; Ray default: 1). ``ray_options`` go to
    :func:`tokendp.engines.ray.run_ray` (``workers``, ``gpus_per_worker``, ``address``, ...).
    """
    if engine not in ("local", "ray"):
        raise InvalidParameterError(f"engine must be 'local' or 'ray', got {engine!r}")
    if engine == "local" and ray_options:
        raise InvalidParameterError(f"{', '.join(sorted(ray_options))} apply to the ray engine only")
    if engine == "ray":  # before any text is read
        require("ray", "ray", "--engine ray", why="(with Ray Data)")
    corpus = scan_corpus(corpus_path, require_ids=engine == "ray")
    if corpus.needs_tagger and isinstance(params.get("tagger", "auto"), str):
        get_tagger(params.get("tagger", "auto"))  # a missing tagger package fails here, before any model loads

    def run(sink: Any) -> Summary:
        if engine == "local":
            return run_local(corpus, sink, params, batch_size=batch_size, threads=threads, progress=progress)
        return run_ray(corpus, sink, params, batch_size=batch_size, threads=threads, progress=progress,
                       **ray_options)

    if out is None:
        sink = MemorySink()
        summary = run(sink)
        return CorpusRun(summary, None, sink.lines(corpus))
    with RunStore(out, corpus, run_fingerprint(params)) as store:
        summary = run(store)
        return CorpusRun(summary, store.finish(), None)


def run_fingerprint(params: Mapping[str, Any]) -> dict[str, Any]:
    """What a resumed run must share with the first: the job and every parameter that can change
    a rewrite or its guarantee (not the engine, the workers or the device)."""
    kept = {k: (v if isinstance(v, (str, int, float, bool, type(None))) else getattr(v, "name", type(v).__name__))
            for k, v in params.items() if k not in _PLACEMENT}
    return {"job": "sanitize", "parameters": kept}

