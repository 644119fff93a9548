"""A command's start-up without the garbage collector's passes over what it imports.

Importing torch and transformers' model code creates millions of objects that live as long as
the process. Python's cyclic garbage collector walks every tracked object at each full
collection: on a 2-core laptop the collections that the imports themselves trigger cost about
0.9 s of a 3.8 s import, and the interpreter's last collection at exit walks them all once more
(about 1 s). :func:`loading` holds off the full collections while a command imports and loads
its model, then freezes what exists (``gc.freeze``: kept out of every later collection, the one
at exit included) and resumes them for the work itself, whose garbage is collected as usual
(docs/performance.md, "The demo end to end").

The ``tokendp`` command uses it around its loading step; the library never touches the
collector on import.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["loading"]


@contextmanager
def loading() -> Iterator[None]:
    """Run the block (imports, model load) without full collections, then freeze every object
    alive and restore the collector's thresholds.

    Young collections still run, so short-lived cycles (a model conversion makes many) are
    freed as usual; only the passes over the oldest generation, where the imported objects
    accumulate, wait until the block ends."""
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], _NEVER)
    try:
        yield
    finally:
        gc.freeze()
        gc.set_threshold(*thresholds)


_NEVER = 2**30
"""A third threshold no count of middle-generation collections reaches while a model loads."""
