"""The worker both engines run: one model loaded once, batches of records rewritten with
:func:`tokendp.sanitize.sanitize_batch`, one ``{id, text, report}`` line per document.

Determinism: with a run seed, document ``id`` samples from its own generator seeded with
``document_seed(seed, id)``; speculative decoding, which is on by default for a batch of one,
is fixed off unless asked for, so a batch that happens to hold one document runs the same
forward passes (and float32 rounding) as any other. Without a seed, every document is seeded
from the OS.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tokendp.backends import load_backend
from tokendp.engines.corpus import CorpusRecord
from tokendp.engines.store import OutputRecord
from tokendp.errors import TokenDPError
from tokendp.generation import document_seed
from tokendp.sanitize import sanitize_batch
from tokendp.text.taggers import get_tagger, spans_from_json


@dataclass(frozen=True)
class BatchResult:
    """A rewritten batch: its records, the tokens generated, the seconds spent and by whom."""

    records: list[OutputRecord]
    tokens: int
    seconds: float
    worker: str


class SanitizeWorker:
    """Rewrites batches of corpus records with ``sanitize_batch``'s keyword arguments ``params``
    (``model``, ``device`` and ``dtype`` load the backend once; ``seed`` is the run seed).
    ``threads``: torch's intra-op threads in this process (None: leave torch's setting)."""

    def __init__(self, params: Mapping[str, Any], *, threads: int | None = None) -> None:
        if threads is not None:
            torch.set_num_threads(threads)
        params = dict(params)
        self.seed = params.pop("seed", None)
        self._tagger_spec = params.pop("tagger", "auto")
        if params.get("speculative") is None:
            params["speculative"] = False
        self.backend = load_backend(params.pop("model", "rewriter"), device=params.pop("device", None),
                                    dtype=params.pop("dtype", None))
        self.params = params
        self.name = f"{socket.gethostname()}:{os.getpid()}"

    @functools.cached_property
    def tagger(self) -> Any:
        """The tagger, built on first use (only records without spans need it)."""
        spec = self._tagger_spec
        return get_tagger(spec) if isinstance(spec, str) else spec

    def __call__(self, records: Sequence[CorpusRecord]) -> BatchResult:
        start = time.perf_counter()
        seeds = None if self.seed is None else [document_seed(self.seed, r.id) for r in records]
        spans = [None if r.spans is None else spans_from_json(json.loads(r.spans), r.text) for r in records]
        tagger = self.tagger if any(s is None for s in spans) else None
        try:
            results = sanitize_batch([r.text for r in records], spans=spans, tagger=tagger, model=self.backend,
                                     seed=seeds, **self.params)
        except TokenDPError as err:
            ids = ", ".join(json.dumps(r.id) for r in records)
            raise type(err)(f"documents {ids}: {err}") from None
        out = [OutputRecord(r.id, json.dumps({"id": r.id, **res.to_dict()}, ensure_ascii=False))
               for r, res in zip(records, results)]
        tokens = sum(res.report.tokens_generated for res in results)
        return BatchResult(out, tokens, time.perf_counter() - start, self.name)
