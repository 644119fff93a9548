"""The workers both engines run: one model loaded once, batches of items turned into output
lines ``{id, text, report}``.

- :class:`SanitizeWorker`: corpus records rewritten with :func:`tokendp.jobs.sanitize.sanitize_batch`,
  one line per document (and, with ``diagnostics``, one diagnostics line apart from it); or,
  with continuous batching (:meth:`SanitizeWorker.stream`, the local engine's ``batching=
  "continuous"``), with :func:`tokendp.jobs.sanitize.sanitize_stream`, each document written as
  it finishes while the next takes its slot.
- :class:`SynthesizeWorker`: whole batches of B references (planned on the driver,
  :mod:`tokendp.engines.synthesis`) turned into one synthetic text each with a
  :class:`tokendp.jobs.synthesize.Synthesizer`.

Determinism: with a run seed, each output samples from its own generator, seeded with
``document_seed(seed, id)`` (a document's id, a text's index in the partition), so neither the
batch nor the worker matters. For sanitize, speculative decoding, which is on by default for a
batch of one, is fixed off unless asked for, so a batch that happens to hold one document runs
the same forward passes (and float32 rounding) as any other. Without a seed, every output is
seeded from the OS.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tokendp.backends import load_backend
from tokendp.engines.arrow import to_records
from tokendp.engines.corpus import CorpusRecord
from tokendp.engines.store import OutputRecord
from tokendp.errors import TokenDPError
from tokendp.fusion import Chunk
from tokendp.generation import document_seed
from tokendp.jobs.config import SanitizeConfig
from tokendp.jobs.sanitize import prepare_sanitize, run_sanitize, sanitize_stream
from tokendp.jobs.synthesize import ReferenceBatch, Synthesizer
from tokendp.text.taggers import get_tagger, spans_from_json


@dataclass(frozen=True)
class BatchResult:
    """A finished batch: its records, the tokens generated, the seconds spent and by whom."""

    records: list[OutputRecord]
    tokens: int
    seconds: float
    worker: str


class _Worker(ABC):
    """What every worker shares: its torch threads (None: leave torch's setting), its name
    (host:pid), the timing of each batch, and errors that name the batch's ids, never its text."""

    noun = "documents"

    def __init__(self, threads: int | None) -> None:
        if threads is not None:
            torch.set_num_threads(threads)
        self.name = f"{socket.gethostname()}:{os.getpid()}"

    def __call__(self, items: Sequence[Any]) -> BatchResult:
        start = time.perf_counter()
        try:
            records, tokens = self.run(items)
        except TokenDPError as err:
            raise _naming(err, self.noun, items) from None
        return BatchResult(records, tokens, time.perf_counter() - start, self.name)

    @abstractmethod
    def run(self, items: Sequence[Any]) -> tuple[list[OutputRecord], int]:
        """The items' output records and the tokens generated."""

    def each(self, items: Sequence[Any], emit: Callable[[BatchResult], None]) -> None:
        """Run ``items`` as one batch and give ``emit`` its results: here the whole batch at its end;
        a worker that can (sanitize) gives each output as soon as it is done."""
        emit(self(items))


class SanitizeWorker(_Worker):
    """Rewrites batches of corpus records with ``sanitize_batch``'s keyword arguments ``params``
    (``model``, ``device`` and ``dtype`` load the backend once; ``seed`` is the run seed; the
    rest is the job's :class:`~tokendp.jobs.config.SanitizeConfig`)."""

    items = staticmethod(to_records)

    def __init__(self, params: Mapping[str, Any], *, threads: int | None = None) -> None:
        super().__init__(threads)
        params = dict(params)
        self.seed = params.pop("seed", None)
        self._tagger_spec = params.pop("tagger", "auto")
        if params.get("speculative") is None:
            params["speculative"] = False
        self.backend = load_backend(params.pop("model", "rewriter"), device=params.pop("device", None),
                                    dtype=params.pop("dtype", None))
        self.diagnostics = bool(params.pop("diagnostics", False))
        self.on_token = params.pop("on_token", None)
        self.config = SanitizeConfig.of(params)

    @functools.cached_property
    def tagger(self) -> Any:
        """The tagger, built on first use (only records without spans need it)."""
        spec = self._tagger_spec
        return get_tagger(spec) if isinstance(spec, str) else spec

    def run(self, records: Sequence[CorpusRecord]) -> tuple[list[OutputRecord], int]:
        seeds = None if self.seed is None else [document_seed(self.seed, r.id) for r in records]
        results = run_sanitize(self._prepare(records), seed=seeds, diagnostics=self.diagnostics)
        return [_output(r, res) for r, res in zip(records, results)], sum(res.report.tokens_generated for res in results)


    def each(self, records: Sequence[CorpusRecord], emit: Callable[[BatchResult], None]) -> None:
        """One static batch, each document given to ``emit`` as its own result as soon as it
        finishes (:func:`tokendp.jobs.sanitize.run_sanitize`'s ``on_result``), while the others
        decode on: the same records as :meth:`__call__`, saved one by one, so an interrupt loses
        only the documents still decoding."""
        start = time.perf_counter()

        def done(i: int, res: Any) -> None:
            nonlocal start
            now = time.perf_counter()
            emit(BatchResult([_output(records[i], res)], res.report.tokens_generated, now - start, self.name))
            start = time.perf_counter()

        seeds = None if self.seed is None else [document_seed(self.seed, r.id) for r in records]
        try:
            run_sanitize(self._prepare(records), seed=seeds, diagnostics=self.diagnostics, on_result=done,
                         on_token=self.on_token)
        except TokenDPError as err:
            raise _naming(err, self.noun, records) from None

    def stream(self, records: Iterable[CorpusRecord], slots: int, *, accelerator_only: bool = False
               ) -> Iterator[BatchResult]:
        """Continuous batching (:func:`tokendp.jobs.sanitize.sanitize_stream`): ``slots`` documents
        decode at once, the next ``slots`` records are prepared (tagged, certificates fixed) when
        the ones before have all joined, and each document is one result as it finishes. Falls
        back to batches of ``slots`` (:meth:`__call__`) where continuous batching does not apply:
        speculative decoding asked for, a model whose cache cannot be joined (sliding window), or,
        with ``accelerator_only``, a model on the CPU."""
        if not self.continuous(accelerator_only=accelerator_only):
            for batch in _batched(records, slots):
                yield self(batch)
            return
        in_flight: dict[str | int, CorpusRecord] = {}  # prepared, not yet written
        failed: list[CorpusRecord] = []  # the chunk whose preparation failed

        def chunks() -> Iterator[Chunk]:
            for batch in _batched(records, slots):
                try:
                    prepared = self._prepare(batch)
                except TokenDPError:
                    failed.extend(batch)
                    raise
                in_flight.update((r.id, r) for r in batch)
                seeds = tuple(None if self.seed is None else document_seed(self.seed, r.id) for r in batch)
                yield Chunk(prepared, tuple(r.id for r in batch), seeds)

        start = time.perf_counter()
        try:
            for key, res in sanitize_stream(chunks(), slots=slots, diagnostics=self.diagnostics):
                record = in_flight.pop(key)
                now = time.perf_counter()
                yield BatchResult([_output(record, res)], res.report.tokens_generated, now - start, self.name)
                start = time.perf_counter()
        except TokenDPError as err:  # a chunk that cannot be prepared, or the documents decoding
            raise _naming(err, self.noun, failed or list(in_flight.values())) from None

    def continuous(self, *, accelerator_only: bool = False) -> bool:
        """Whether :meth:`stream` batches continuously here (see there), rather than in batches."""
        on_cpu = self.backend.device.type == "cpu"
        return not (self.config.speculative or not self.backend.can_join or (accelerator_only and on_cpu))

    def _prepare(self, records: Sequence[CorpusRecord]) -> Any:
        """The records' job; the corpus's labels were checked as a whole by the runner, so a part
        without some protected label is no typo (``whole_input=False``)."""
        spans = [None if r.spans is None else spans_from_json(json.loads(r.spans), r.text) for r in records]
        tagger = self.tagger if any(s is None for s in spans) else None
        return prepare_sanitize([r.text for r in records], spans=spans, config=self.config, tagger=tagger,
                                model=self.backend, whole_input=False)


def _batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(items)
    while batch := list(itertools.islice(it, size)):
        yield batch


def _naming(err: TokenDPError, noun: str, items: Sequence[Any]) -> TokenDPError:
    """``err`` with the ids of the items it concerns (never their text)."""
    ids = ", ".join(json.dumps(item.id) for item in items)
    return type(err)(f"{noun} {ids}: {err}")


def _output(record: CorpusRecord, res: Any) -> OutputRecord:
    """A document's output line (and its diagnostics line apart, when asked for)."""
    return OutputRecord(record.id, json.dumps({"id": record.id, **res.to_dict()}, ensure_ascii=False),
                        None if res.diagnostics is None else
                        json.dumps({"id": record.id, "diagnostics": res.diagnostics}, ensure_ascii=False))


class SynthesizeWorker(_Worker):
    """Writes the synthetic text of each whole reference batch with ``Synthesizer(**params)``
    (``seed`` is the run seed): one line per text, its report the certificate and the ids of the
    references it read. The model loads with the first batch."""

    noun = "texts"

    def __init__(self, params: Mapping[str, Any], *, threads: int | None = None) -> None:
        super().__init__(threads)
        params = dict(params)
        self.seed = params.pop("seed", None)
        self.synthesizer = Synthesizer(**params)

    @staticmethod
    def items(table: Any) -> list[ReferenceBatch]:
        """A Ray block of :func:`reference_rows` back to the batches."""
        return [ReferenceBatch(r["id"], tuple(json.loads(r["references"])), tuple(r["texts"]))
                for r in table.to_pylist()]

    def run(self, batches: Sequence[ReferenceBatch]) -> tuple[list[OutputRecord], int]:
        texts = self.synthesizer(batches, seed=self.seed)
        return [_text_record(b, t) for b, t in zip(batches, texts)], sum(t.tokens_generated for t in texts)

    def each(self, batches: Sequence[ReferenceBatch], emit: Callable[[BatchResult], None]) -> None:
        """Each text given to ``emit`` as soon as it is done (``Synthesizer``'s ``on_text``), so an
        interrupt loses only the texts still being written."""
        start = time.perf_counter()

        def done(i: int, text: Any) -> None:
            nonlocal start
            now = time.perf_counter()
            emit(BatchResult([_text_record(batches[i], text)], text.tokens_generated, now - start, self.name))
            start = time.perf_counter()

        try:
            self.synthesizer(batches, seed=self.seed, on_text=done)
        except TokenDPError as err:
            raise _naming(err, self.noun, batches) from None


def _text_record(batch: ReferenceBatch, text: Any) -> OutputRecord:
    return OutputRecord(batch.id, json.dumps({"id": batch.id, "text": text.text, "report": _report(text)},
                                             ensure_ascii=False))


def reference_rows(batches: Sequence[ReferenceBatch]) -> list[dict[str, Any]]:
    """Reference batches as rows for a Ray dataset (the ids as JSON text: strings or integers)."""
    return [{"id": b.id, "references": json.dumps(list(b.references)), "texts": list(b.texts)} for b in batches]


def _report(text: Any) -> dict[str, Any]:
    """A synthetic text's record minus its text: the certificate, the references' ids, diagnostics."""
    return {k: v for k, v in text.to_dict().items() if k != "text"}
