"""The one checkpoint format of tokendp's training loops.

A checkpoint is one file written by ``torch.save``, atomically (a temporary name, then
``os.replace``: a crash leaves the previous checkpoint or the new one, never half of one). It
is a dict with

- ``format``: :data:`CHECKPOINT_FORMAT`;
- ``fingerprint``: the run's :func:`~tokendp.training.fingerprint.fingerprint`; a checkpoint
  is loaded only by the run of the same fingerprint;
- ``step``, ``elapsed``: optimiser steps done and seconds spent in them;
- ``model``: the trainable parameters by name (a LoRA adapter's, or every weight);
- ``optimizer``, ``scheduler``: their ``state_dict()`` (``scheduler`` None without one);

and the caller's own entries beside them (a sampler's state, a ledger, running averages).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from tokendp.errors import InvalidInputError
from tokendp.training.fingerprint import mismatch_error

CHECKPOINT_FORMAT = "tokendp.checkpoint/1"
RESERVED = ("format", "fingerprint", "step", "elapsed", "model", "optimizer", "scheduler")


def save_checkpoint(path: str | Path, *, run: str, step: int, elapsed: float, model: Mapping[str, torch.Tensor],
                    optimizer: Mapping[str, Any], scheduler: Mapping[str, Any] | None = None,
                    extra: Mapping[str, Any] | None = None) -> Path:
    """Write a checkpoint of the run ``run`` (its fingerprint) to ``path``, atomically."""
    extra = dict(extra or {})
    clash = sorted(set(extra) & set(RESERVED))
    if clash:
        raise ValueError(f"checkpoint entries {clash} are reserved by the format")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"format": CHECKPOINT_FORMAT, "fingerprint": run, "step": int(step), "elapsed": float(elapsed),
             "model": dict(model), "optimizer": optimizer, "scheduler": scheduler, **extra}
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | Path, *, run: str, map_location: Any = "cpu") -> dict[str, Any] | None:
    """The checkpoint at ``path`` (None when there is none), refused unless it is of this format
    and of the run ``run``: other data or settings never resume an old run."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as exc:  # a truncated or foreign file: say which, never load it half
        raise InvalidInputError(f"{path} is not a readable checkpoint ({type(exc).__name__}); remove it to start over") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise InvalidInputError(f"{path} is not a tokendp checkpoint (expected format {CHECKPOINT_FORMAT!r}); "
                                "remove it to start over")
    if state.get("fingerprint") != run:
        raise mismatch_error(path.parent)
    return state
