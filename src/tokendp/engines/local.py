"""The local engine: one process, one model, the corpus rewritten in batches of ``batch_size``
documents in input order, each batch written to the sink as soon as it is done."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from typing import Any

from tokendp.engines.corpus import Corpus, CorpusRecord
from tokendp.engines.summary import Summary, consume
from tokendp.engines.worker import BatchResult, SanitizeWorker


def run_local(corpus: Corpus, sink: Any, params: Mapping[str, Any], *, batch_size: int = 8,
              threads: int | None = None, progress: bool = True) -> Summary:
    """Rewrite the documents of ``corpus`` not yet in ``sink.done`` and write them to ``sink``.

    ``params`` are :class:`~tokendp.engines.worker.SanitizeWorker`'s (``sanitize_batch``'s
    keyword arguments, ``threads`` its torch threads); the model is loaded only if something
    is left to do.
    """
    skipped = len(sink.done)
    todo = (r for r in corpus.records() if r.id not in sink.done)
    return consume(_results(todo, params, batch_size, threads, skipped < len(corpus.ids)), sink,
                   total=len(corpus.ids), skipped=skipped, progress=progress)


def _results(todo: Iterable[CorpusRecord], params: Mapping[str, Any], batch_size: int, threads: int | None,
             work_left: bool) -> Iterator[BatchResult]:
    if not work_left:
        return
    worker = SanitizeWorker(params, threads=threads)
    it = iter(todo)
    while batch := list(islice(it, batch_size)):
        yield worker(batch)
