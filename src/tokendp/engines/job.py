"""What an engine runs: a :class:`Job` names its outputs, the work items left to do, and the
worker that turns a batch of items into output records.

Two jobs: sanitize (an item is a corpus document, an output its rewrite) and synthesize (an item
is a whole batch of B references, planned on the driver, an output the text that reads it;
:mod:`tokendp.engines.synthesis`). Both engines run any job the same way: the local engine
takes ``todo(done)`` in batches of ``batch_size`` items, the Ray engine maps ``dataset(ray, done,
batch_size)`` over an actor pool; both write every output once through the same store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Job:
    """One job on one input.

    ``name``: the command (the progress bar's label, ``run.json``'s job); ``noun``: what an
    output is ("documents", "texts"); ``path``: the input file; ``ids``: the outputs' ids in
    output order; ``worker``: the worker class, built on each worker as ``worker(params,
    threads=...)``, with ``worker.items(table)`` (a Ray block -> items) and ``worker(items)``
    (-> a ``BatchResult``); ``todo(done)``: the items whose outputs are not in ``done``, in
    output order; ``dataset(ray, done, batch_size)``: the same items as a Ray dataset; ``run``:
    what a resumed run must share with the first (``run.json``).
    """

    name: str
    noun: str
    path: Path
    ids: tuple[str | int, ...]
    worker: type
    todo: Callable[[frozenset], Iterable[Any]]
    dataset: Callable[[Any, frozenset, int], Any]
    run: dict[str, Any]
