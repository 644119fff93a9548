"""One progress display for every training loop: a tqdm bar of optimiser steps with the last
loss and the run's other numbers (epsilon spent, a running average). It shows counts and
numbers computed by the loop, never text of the data."""

from __future__ import annotations

import math
import sys
from typing import Any, TextIO

from tokendp.training.loop import Progress


class ProgressBar:
    """``with ProgressBar("dpsgd") as bar: loop.run(step, on_progress=bar)``; ``bar.describe``
    changes the label (``"dpsgd: loading model"``). ``mininterval``: seconds between redraws
    (a log file wants tens of seconds, a terminal a fraction of one)."""

    def __init__(self, desc: str, *, file: TextIO | None = None, disable: bool = False,
                 mininterval: float | None = None, total: int | None = None) -> None:
        from tqdm import tqdm

        out = file if file is not None else sys.stderr
        if mininterval is None:
            mininterval = 0.1 if getattr(out, "isatty", lambda: False)() else 30.0
        self.desc = desc
        self._bar: Any = tqdm(desc=desc, total=total, unit="step", file=out, disable=disable, mininterval=mininterval,
                              dynamic_ncols=True)

    def __call__(self, progress: Progress) -> None:
        bar = self._bar
        bar.total = progress.steps
        shown = {} if math.isnan(progress.loss) else {"loss": f"{progress.loss:.3f}"}
        for name, value in progress.metrics.items():
            shown["eps" if name == "epsilon" else name] = f"{value:.3g}"
        if progress.label:
            bar.set_description(f"{self.desc}: {progress.label}", refresh=False)
        bar.set_postfix(shown, refresh=False)
        if progress.step >= bar.n:
            bar.update(progress.step - bar.n)  # redrawn at most every mininterval seconds
        else:
            bar.n = progress.step
            bar.refresh()

    def describe(self, label: str) -> None:
        """Show ``desc: label`` (a phase: loading, training, saving)."""
        self._bar.set_description(f"{self.desc}: {label}" if label else self.desc)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
