"""The sparse vector technique as a stateful, batched switch: one SVT run per generated text.

Lyu, Su and Li 2017, "Understanding the Sparse Vector Technique for Differential Privacy"
(PVLDB 10(6)), Alg. 1, run independently for each of N texts (tensors of shape (N,)):

* at construction, each text's noisy threshold T + Lap(Delta/eps1) is drawn ONCE and never
  re-noised (re-noising after a positive answer is Dwork and Roth's variant, with other scales);
* each :meth:`SparseVectorSwitch.decide` call answers one query per text: positive ("use the
  private prediction") iff statistic + Lap(2 c Delta/eps2) >= the noisy threshold, with fresh
  query noise, and counts the positive answers;
* once a text has c positive answers its run has stopped: every later answer is negative without
  looking at the statistic (the caller then samples the public model, which reads no private data).

The scales come from :func:`tokendp.accounting.sparse_vector_noise`; the run is
(eps1 + eps2)-DP per text for queries of sensitivity Delta (docs/privacy.md has the proof sketch).
All work stays on the statistic's device: no host synchronisation, no loop over texts.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tokendp.accounting import PureDpEvent, sparse_vector_noise
from tokendp.accounting._checks import check_count
from tokendp.errors import InvalidInputError

__all__ = ["SparseVectorSwitch", "laplace"]


def laplace(shape: tuple[int, ...] | torch.Size, scale: float, generator: torch.Generator,
            device: torch.device | str | None = None) -> Tensor:
    """Lap(scale) noise ``# shape`` in float64 by inverse CDF from ``generator``."""
    u = torch.rand(shape, generator=generator, device=device, dtype=torch.float64) - 0.5  # (...)
    return -scale * torch.sign(u) * torch.log1p(-2.0 * u.abs())


class SparseVectorSwitch:
    """Per-text sparse vector runs with a cap of c positive answers (module docstring).

    Args:
        threshold: T, in the units of the statistic (public).
        sensitivity: Delta, the most one protected unit can move the statistic of any query.
        epsilon: the pure-DP budget eps1 + eps2 of each run.
        max_positives: c, the positive answers a run may give before it stops.
        num_texts: N, the number of independent runs (one per text).
        generator: the source of the threshold noise (drawn here, once).
        threshold_share: eps1 / epsilon (None: the variance-optimal split of
            :func:`~tokendp.accounting.sparse_vector_noise`).
    """

    def __init__(self, *, threshold: float, sensitivity: float, epsilon: float, max_positives: int, num_texts: int,
                 generator: torch.Generator, threshold_share: float | None = None) -> None:
        self.epsilon = float(epsilon)
        self.sensitivity = float(sensitivity)
        self.max_positives = check_count("max_positives", max_positives)
        n = check_count("num_texts", num_texts)
        self.threshold_scale, self.query_scale = sparse_vector_noise(
            sensitivity=sensitivity, epsilon=epsilon, max_positives=max_positives, threshold_share=threshold_share)
        device = generator.device
        self.noisy_threshold = float(threshold) + laplace((n,), self.threshold_scale, generator, device)  # (N,) f64
        self.positives = torch.zeros(n, dtype=torch.int64, device=device)  # (N,)

    def decide(self, statistic: Tensor, generator: torch.Generator, docs: Tensor | None = None) -> Tensor:
        """One query per text: ``statistic # (Na,)`` of the texts ``docs # (Na,)`` (indices into
        the N runs; default all N) -> ``positive # (Na,)`` bool, counted against the cap."""
        if docs is None:
            docs = torch.arange(self.positives.shape[0], device=self.positives.device)  # (N,)
        if statistic.shape != docs.shape:
            raise InvalidInputError(f"statistic has shape {tuple(statistic.shape)} but there are {docs.shape[0]} texts")
        docs = docs.to(self.positives.device)
        noisy = statistic.to(torch.float64) + laplace(statistic.shape, self.query_scale, generator, statistic.device)  # (Na,)
        open_runs = self.positives[docs] < self.max_positives  # (Na,)
        positive = open_runs & (noisy >= self.noisy_threshold[docs])  # (Na,)
        self.positives.index_add_(0, docs, positive.to(torch.int64))
        return positive

    def event(self) -> PureDpEvent:
        """What one run costs its text's protected units, once for the whole run: epsilon-DP."""
        return PureDpEvent(self.epsilon)
