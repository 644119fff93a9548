"""Progress and the end-of-run summary, the same for every engine and job: the driver consumes
the workers' batch results, writes them and counts outputs (documents, or synthetic texts),
tokens and seconds per worker."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tokendp.engines.job import Job
from tokendp.engines.store import OutputRecord


class BatchLike(Protocol):
    records: list[OutputRecord]
    tokens: int
    seconds: float
    worker: str


class Sink(Protocol):
    def write(self, records: list[OutputRecord]) -> int: ...


@dataclass
class WorkerStats:
    """One worker's share: outputs, generated tokens and seconds spent in its batches."""

    documents: int = 0
    tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Summary:
    """A run: outputs (``noun``: documents, texts) written now and skipped as already done,
    tokens, wall seconds, workers."""

    noun: str = "documents"
    documents: int = 0
    skipped: int = 0
    tokens: int = 0
    seconds: float = 0.0
    workers: dict[str, WorkerStats] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {self.noun: self.documents, "skipped": self.skipped, "tokens": self.tokens,
                "seconds": round(self.seconds, 3),
                "tokens_per_second": round(self.tokens / self.seconds, 2) if self.seconds > 0 else 0.0,
                "workers": {k: {self.noun: w.documents, "tokens": w.tokens, "seconds": round(w.seconds, 3),
                                "tokens_per_second": round(w.tokens_per_second, 2)}
                            for k, w in sorted(self.workers.items())}}

    def format(self) -> str:
        rate = self.tokens / self.seconds if self.seconds > 0 else 0.0
        lines = [f"{self.documents} {self.noun} written ({self.skipped} already done), {self.tokens} tokens "
                 f"in {self.seconds:.1f} s: {rate:.1f} tokens/s"]
        lines += [f"  worker {name}: {w.documents} {self.noun}, {w.tokens} tokens, {w.tokens_per_second:.1f} tokens/s"
                  for name, w in sorted(self.workers.items())]
        return "\n".join(lines)


class Tally:
    """Writes each result to ``sink`` as it arrives and counts it, with a progress bar on stderr:
    :meth:`add` for engines that push results as they come, :func:`consume` for an iterable."""

    def __init__(self, sink: Sink, job: Job, *, skipped: int, progress: bool = True) -> None:
        from tqdm import tqdm

        self.sink, self.summary = sink, Summary(noun=job.noun, skipped=skipped)
        self._start = time.perf_counter()
        self._bar = tqdm(total=len(job.ids), initial=skipped, unit=job.noun.rstrip("s"), desc=job.name,
                         file=sys.stderr, disable=not progress)

    def add(self, batch: BatchLike) -> None:
        written = self.sink.write(batch.records)
        stats = self.summary.workers.setdefault(batch.worker, WorkerStats())
        stats.documents += written
        stats.tokens += batch.tokens
        stats.seconds += batch.seconds
        self.summary.documents += written
        self.summary.tokens += batch.tokens
        self._bar.update(written)

    def __enter__(self) -> Tally:
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.close()
        self.summary.seconds = time.perf_counter() - self._start


def consume(batches: Iterable[BatchLike], sink: Sink, job: Job, *, skipped: int, progress: bool = True) -> Summary:
    """Write every batch of ``job`` to ``sink`` as it arrives, with a progress bar on stderr; the
    summary."""
    with Tally(sink, job, skipped=skipped, progress=progress) as tally:
        for batch in batches:
            tally.add(batch)
    return tally.summary
