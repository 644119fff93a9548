"""Let OpenMP threads sleep while they wait, so that a busy neighbour costs a job one core, not all.

PyTorch's CPU kernels run on OpenMP threads. By default GNU OpenMP (the one in torch's CPU
wheels) lets a thread that waits for its team spin for a while before it sleeps. On a machine
whose other cores are busy, a spinning thread takes a core from the very thread it waits for,
and the job collapses: on 2 cores beside one CPU-bound process, the rewriter's forward passes
took 1.6 to 2x their quiet time, against 1.0 to 1.2x with sleeping waits (benchmarks/threads.py,
docs/performance.md). Quiet, the two policies run within the benchmark's noise of each other.

OpenMP reads ``OMP_WAIT_POLICY`` once, when torch loads it, so :func:`sleeping_openmp` must run
before ``import torch``. The ``tokendp`` command calls it at start-up; a value the user set is
kept. The library never sets it on import: from Python, set ``OMP_WAIT_POLICY=PASSIVE`` in the
environment before torch is imported.
"""

from __future__ import annotations

import os
import sys

__all__ = ["sleeping_openmp"]


def sleeping_openmp() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless set; True if it will apply (torch not yet loaded)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return "torch" not in sys.modules
