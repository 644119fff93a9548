"""Where jobs run: the local batched engine and the Ray Data actor pool (``tokendp.engines.ray``;
Ray, the ``ray`` extra, is imported only when that engine runs).

Two jobs (:mod:`~tokendp.engines.job`): sanitize reads a corpus of records ``{id, text, spans?}``
(:mod:`~tokendp.engines.corpus`) and rewrites each document; synthesize reads a file of
references, fixes their disjoint batches on the driver and writes one text per batch
(:mod:`~tokendp.engines.synthesis`). Both engines run a job's items in batches with the same
worker (:mod:`~tokendp.engines.worker`) and write ``{id, text, report}`` records through the
same resumable store (:mod:`~tokendp.engines.store`). With a seed, an output depends only on
(seed, id) and its input (``tokendp.generation.document_seed``), so the engines, and any number
of workers, give the same records.
"""

import importlib
from typing import Any

_LAZY = {"Corpus": "corpus", "CorpusRecord": "corpus", "scan_corpus": "corpus", "CorpusRun": "runner",
         "sanitize_corpus": "runner", "synthesize_corpus": "synthesis", "plan_batches": "synthesis",
         "RunStore": "store", "Summary": "summary"}


def __getattr__(name: str) -> Any:
    """Lazy exports: importing one engine module (a Ray task does) does not import torch."""
    if name in _LAZY:
        return getattr(importlib.import_module(f"tokendp.engines.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'tokendp.engines' has no attribute {name!r}")


__all__ = sorted(_LAZY)
