"""``tokendp synthesize REFERENCES --engine local|ray``: the disjoint batches of references fixed
once on the driver, whole batches handed to the workers.

The guarantee of :func:`tokendp.jobs.synthesize.synthesize` is per reference, and it covers the whole
output (parallel composition) only because each reference is read by at most one text. On an
engine this must hold across workers and sessions, so:

* **One partition, fixed on the driver before any worker runs**, from public data only: the
  references' ids in input order (and so their number), B and the number of texts. Batch j is
  the references at positions jB .. jB + B - 1 (:func:`tokendp.jobs.synthesize.partition`, as for a
  list); those past num * B are not read. The texts play no part in it.
* **Whole batches.** A work item is one batch (:class:`~tokendp.jobs.synthesize.ReferenceBatch`, its
  ids and texts read from the file by the driver and checked against the partition); a worker
  receives items, never single references, so no batch is split and no reference reaches two
  texts, whatever the workers.
* **The same partition on resume.** ``run.json`` records the ids (their number and a SHA-256 of
  their list, in order); a resume on references with other ids, another order or another number
  is refused, since a reference moved from a written text's batch into a pending one would be read
  twice. B and the number of texts are parameters, checked likewise. The texts are not hashed: a
  digest of private text kept with the output would not be differentially private, and an edited
  reference is still read by one text only (its batch is written once).

With a seed, text j samples from ``document_seed(seed, j)``'s stream, so both engines, any number
of workers and :func:`tokendp.jobs.synthesize.synthesize` on the same references give the same texts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokendp.engines.corpus import Corpus, scan_corpus
from tokendp.engines.job import Job
from tokendp.engines.runner import CorpusRun, Engine, check_engine, run_fingerprint, run_job
from tokendp.engines.worker import SynthesizeWorker, reference_rows
from tokendp.errors import InvalidInputError
from tokendp.jobs.synthesize import ReferenceBatch, Synthesizer, partition


@dataclass(frozen=True)
class Plan:
    """The partition of a reference corpus: ``batches[j]``, the ids of the B references text j reads."""

    corpus: Corpus
    batches: tuple[tuple[str | int, ...], ...]

    def inputs(self) -> dict[str, Any]:
        """Public facts the partition was planned from: the number of references and a digest of
        their ids in order (JSON, so ``7`` and ``"7"`` differ)."""
        ids = json.dumps(list(self.corpus.ids), ensure_ascii=False).encode()
        return {"references": len(self.corpus.ids), "ids_sha256": hashlib.sha256(ids).hexdigest()}

    def pending(self, done: frozenset) -> list[ReferenceBatch]:
        """The batches whose texts are not in ``done``, with their references read from the file,
        in text order. A reference must be non-empty, and the file must still hold the planned ids."""
        planned = [ref for batch in self.batches for ref in batch]  # in input order
        size = len(self.batches[0])
        texts: dict[int, list[str]] = {j: [] for j in range(len(self.batches)) if j not in done}
        with contextlib.closing(self.corpus.records()) as records:
            for position, ref in enumerate(planned):
                record = next(records, None)
                if record is None or record.id != ref:
                    raise InvalidInputError(f"{self.corpus.path} changed during the run (position {position + 1} no "
                                            "longer holds the planned id); resume with the references the run "
                                            "began with")
                if position // size in texts:
                    if not record.text.strip():
                        raise InvalidInputError(f"{self.corpus.path}: reference {json.dumps(ref)} is empty; every "
                                                "reference must be a non-empty text")
                    texts[position // size].append(record.text)
        return [ReferenceBatch(j, self.batches[j], tuple(refs)) for j, refs in texts.items()]


def plan_batches(path: str | Path, *, batch_size: int, num: int | None = None) -> Plan:
    """Check the references file and fix its partition into ``num`` disjoint batches of ``batch_size``
    (default: all floor(N / B) of them) by position (:func:`tokendp.jobs.synthesize.partition`)."""
    corpus = scan_corpus(path)
    positions = partition(len(corpus.ids), batch_size=batch_size, num=num)
    return Plan(corpus, tuple(tuple(corpus.ids[i] for i in batch) for batch in positions))


def synthesize_corpus(references_path: str | Path, params: Mapping[str, Any], *, num: int | None = None,
                      out: str | Path | None = None, engine: Engine = "local", batch_size: int = 16,
                      threads: int | None = None, progress: bool = True, note: Callable[[str], None] | None = None,
                      **ray_options: Any) -> CorpusRun:
    """Write synthetic texts from a JSONL or Parquet file of references ``{id?, text}`` on an engine.

    ``params``: :class:`~tokendp.jobs.synthesize.Synthesizer`'s keyword arguments and ``seed``;
    ``num``: the number of texts (default floor(N / B)); ``batch_size``: texts per worker batch,
    generated together. The output records are ``{id: j, text, report}``, in text order;
    ``out``, ``threads``, ``note`` and ``ray_options`` as for :func:`tokendp.engines.runner.sanitize_corpus`.
    """
    check_engine(engine, ray_options)
    params = {**params, "concurrency": batch_size}
    # Every parameter checked, and its defaults resolved, before any reference is read.
    settings = Synthesizer(**{k: v for k, v in params.items() if k != "seed"}).settings()
    plan = plan_batches(references_path, batch_size=settings["batch_size"], num=num)
    run = run_fingerprint("synthesize", {**settings, "seed": params.get("seed"), "num": len(plan.batches)},
                          inputs=plan.inputs())
    job = Job("synthesize", "texts", plan.corpus.path, tuple(range(len(plan.batches))), SynthesizeWorker,
              todo=plan.pending, run=run,
              dataset=lambda ray, done, size: ray.data.from_items(reference_rows(plan.pending(done))))
    return run_job(job, params, out=out, engine=engine, batch_size=batch_size, threads=threads, progress=progress,
                   note=note, **ray_options)
