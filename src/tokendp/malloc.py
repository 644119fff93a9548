"""Keep freed large blocks inside the process (glibc only), as long-running CPU inference wants.

Every token step allocates and frees several buffers of a few megabytes (rows x vocabulary).
By default glibc serves blocks that large with fresh ``mmap`` pages and unmaps them on free,
so each step pays the page faults again: on the issue-3 benchmark that was about a third of
the mechanism's time. ``keep_freed_memory()`` raises the mmap threshold to 32 MiB and the trim
threshold to 1 GiB (``mallopt``), so such blocks are reused; the price is that the process keeps
its peak heap. It is the same advice PyTorch gives for CPU inference (or use jemalloc/tcmalloc).

The ``tokendp`` command calls it at start-up; the library never does so on import. Call it
yourself from a long-running Python process if you want the same speed.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["keep_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory() -> bool:
    """Tune glibc's malloc for reuse of large blocks; True if it was applied (False elsewhere)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl, Windows): nothing to do
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(_M_TRIM_THRESHOLD, 1 << 30))
