"""The resumable training loop every tokendp trainer runs.

:class:`ResumableLoop` owns the step counter, the time spent training, the checkpoints and the
resume; the caller owns what one step computes (``step_fn``: a forward and backward pass and the
optimiser's step, with DP-SGD's per-sample clipping and noise where the caller adds them). Per
step ``t`` (0-based) the loop runs ``step_fn(t)``, counts the step and its seconds, reports a
:class:`Progress`, then, every ``checkpoint_every`` steps, writes a checkpoint
(:mod:`tokendp.training.checkpoint`). A rerun of the same run (same fingerprint) calls
:meth:`ResumableLoop.resume` and continues from the last checkpoint: the trainable parameters,
the optimiser, the scheduler, and the caller's own state (``save_extra`` / ``load_extra``) come
back as they were.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.training.checkpoint import load_checkpoint, save_checkpoint


@dataclass(frozen=True)
class Progress:
    """Where a run stands after a step: ``step`` of ``steps`` done, the step's loss (NaN when the
    step saw no data), seconds spent training, other numbers to show (``epsilon``, ``ema``, ...)
    and a short label (``shard 2/8``)."""

    step: int
    steps: int
    loss: float
    elapsed: float
    metrics: Mapping[str, float] = field(default_factory=dict)
    label: str = ""

    @property
    def epsilon(self) -> float | None:
        """The privacy spent so far, for a DP run (None otherwise)."""
        value = self.metrics.get("epsilon")
        return None if value is None else float(value)


StepResult = float | tuple[float, Mapping[str, float]]


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that train (``requires_grad``), by name, detached copies on the CPU."""
    return {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: torch.nn.Module, state: Mapping[str, torch.Tensor], where: Path) -> None:
    named = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if set(named) != set(state):
        raise InvalidInputError(f"the checkpoint {where} does not fit this model (other trainable parameters); "
                                "remove it to start over")
    with torch.no_grad():
        for name, value in state.items():
            named[name].copy_(value)


class ResumableLoop:
    """``steps`` optimiser steps of ``model``, checkpointed to ``checkpoint`` under the run
    fingerprint ``run`` every ``checkpoint_every`` steps (and after the last with
    ``checkpoint_at_end``).

    ``model`` is the module whose trainable parameters make the checkpoint (the plain module, not
    a wrapper that renames them); ``optimizer`` and ``scheduler`` are saved by ``state_dict()``;
    ``save_extra()`` returns the caller's own entries and ``load_extra(state)`` restores them;
    ``on_checkpoint(step)`` runs after each checkpoint (e.g. to export the adapter so far).
    """

    def __init__(self, *, model: torch.nn.Module, optimizer: Any, steps: int, checkpoint: str | Path, run: str,
                 checkpoint_every: int, scheduler: Any = None, save_extra: Callable[[], Mapping[str, Any]] | None = None,
                 load_extra: Callable[[Mapping[str, Any]], None] | None = None,
                 on_checkpoint: Callable[[int], None] | None = None, checkpoint_at_end: bool = False,
                 map_location: Any = "cpu", label: str = "") -> None:
        for name, value in (("steps", steps), ("checkpoint_every", checkpoint_every)):
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "steps" else 1):
                raise InvalidParameterError(f"{name} must be an integer >= {0 if name == 'steps' else 1}, got {value!r}")
        self.model, self.optimizer, self.scheduler = model, optimizer, scheduler
        self.steps, self.checkpoint_every, self.checkpoint_at_end = steps, checkpoint_every, checkpoint_at_end
        self.path, self.run_id = Path(checkpoint), run
        self.save_extra, self.load_extra, self.on_checkpoint = save_extra, load_extra, on_checkpoint
        self.map_location, self.label = map_location, label
        self.step = 0
        self.elapsed = 0.0

    def resume(self) -> bool:
        """Continue from the checkpoint if there is one (of this run: another run's is refused)."""
        state = load_checkpoint(self.path, run=self.run_id, map_location=self.map_location)
        if state is None:
            return False
        load_trainable_state(self.model, state["model"], self.path)
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state["scheduler"] is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.load_extra is not None:
            self.load_extra(state)
        self.step, self.elapsed = int(state["step"]), float(state["elapsed"])
        return True

    def save(self) -> None:
        """Write the checkpoint of the run as it stands."""
        save_checkpoint(self.path, run=self.run_id, step=self.step, elapsed=self.elapsed,
                        model=trainable_state(self.model), optimizer=self.optimizer.state_dict(),
                        scheduler=None if self.scheduler is None else self.scheduler.state_dict(),
                        extra=None if self.save_extra is None else self.save_extra())
        if self.on_checkpoint is not None:
            self.on_checkpoint(self.step)

    def run(self, step_fn: Callable[[int], StepResult], on_progress: Callable[[Progress], None] | None = None) -> None:
        """Run the steps left: ``step_fn(t)`` returns the step's loss, or (loss, metrics)."""
        while self.step < self.steps:
            start = time.monotonic()
            result = step_fn(self.step)
            loss, metrics = (result if isinstance(result, tuple) else (result, {}))
            self.step += 1
            self.elapsed += time.monotonic() - start
            if on_progress is not None:
                on_progress(Progress(self.step, self.steps, float(loss) if loss is not None else math.nan,
                                     self.elapsed, dict(metrics), self.label))
            last = self.step == self.steps
            if (self.step % self.checkpoint_every == 0 and not last) or (last and self.checkpoint_at_end):
                self.save()
