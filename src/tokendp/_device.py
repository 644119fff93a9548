"""Whether reading a tensor's value on the host is free: the one device test of the step.

On the CPU a tensor's value is already in host memory, so the decoding step may read a flag
to skip work (an early exit once every bracket of the lambda search is closed, a check of a
caller's caps). On an accelerator each such read waits for the device's queue to drain (a
host synchronisation) and prevents capturing the step in a CUDA graph, so the step runs a
fixed amount of work there, with masks instead of data-dependent branches
(docs/performance.md, "The step without host reads").

Every early exit of the step asks this one predicate, never ``x.device.type == "cpu"`` itself,
so that the tests can make the CPU take the accelerator's path (tests/host_reads.py) and
check that both paths release the same distributions.
"""

from __future__ import annotations

from torch import Tensor

__all__ = ["reads_are_free"]


def reads_are_free(tensor: Tensor) -> bool:
    """True when ``tensor`` lives in host memory (the CPU), where reading its value costs no
    synchronisation; False on accelerators (CUDA, MPS, XPU, ...)."""
    return tensor.device.type == "cpu"
