"""A command's start-up without the garbage collector's passes over what it imports.

Importing torch and transformers' model code creates millions of objects that live as long as
the process. Python's cyclic garbage collector walks every tracked object at each full
collection: on a 2-core laptop the collections that the imports themselves trigger cost about
0.9 s of a 3.8 s import, and the interpreter's last collection at exit walks them all once more
(about 1 s). :func:`loading` pauses collection while a command imports and loads its model,
then freezes what exists (``gc.freeze``: kept out of every later collection, the one at exit
included) and resumes collection for the work itself, whose garbage is collected as usual
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
    """Run the block (imports, model load) with cyclic collection paused, then freeze every
    object alive and resume collection as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
