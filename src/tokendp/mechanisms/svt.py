"""The sparse vector technique as a stateful, batched switch: one SVT run per generated text, on integers.

Lyu, Su and Li 2017, "Understanding the Sparse Vector Technique for Differential Privacy"
(PVLDB 10(6)), Alg. 1, run independently for each of N texts (tensors of shape (N,)), with every
number on a grid of step g so that no floating-point rounding can leak (docs/privacy.md
"Laplace noise in the sparse-vector switch"; textbook floating-point Laplace noise is attackable,
Mironov 2012):

* statistics s become integers q = ceil(s/g) (g a power of two: exact), the threshold
  T becomes ceil(T/g); the integer queries have sensitivity K = ceil(Delta/g) + 1 for statistics
  whose computed values move by at most Delta + g/4 (:func:`tokendp.accounting.sparse_vector_grid`);
* at construction, each text's noisy threshold ceil(T/g) + Lap_Z(t1) is drawn ONCE and never
  re-noised (re-noising after a positive answer is Dwork and Roth's variant, with other scales);
* each :meth:`SparseVectorSwitch.decide` call answers one query per text: positive ("use the
  private prediction") iff q + Lap_Z(t2) >= the noisy threshold, with fresh query noise, and
  counts the positive answers;
* once a text has c positive answers its run has stopped: every later answer is negative without
  looking at the statistic (the caller then samples the public model, which reads no private data).

Lap_Z(t) is the discrete Laplace distribution, P(z) proportional to exp(-|z|/t) on the integers,
sampled exactly by :func:`discrete_laplace` from uniform integers of the generator (Canonne, Kamath
and Steinke 2020, Algs. 1 and 2); comparisons are between int64 values. The integer scales come
from :func:`tokendp.accounting.sparse_vector_discrete_noise`; the run is (eps1 + eps2)-DP per text.
With one generator for all texts, all work stays on the generator's device, with no loop over
texts: the loops run over rejection rounds (a few dozen per call, each with one host
synchronisation to test for the end). With one generator per text (``Sequence``), text n's
noise comes from its own stream, drawn text by text (as the sampler draws per-document
streams), so that a text's output does not depend on which texts share its batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from tokendp.accounting import PureDpEvent, sparse_vector_discrete_noise, sparse_vector_grid
from tokendp.accounting._checks import check_count
from tokendp.errors import InvalidInputError

__all__ = ["SparseVectorSwitch", "discrete_laplace"]

_BITS = 62  # uniform bits per draw: randint over [0, 2^62) is exactly uniform (a power of two)
_LIMIT = 2**52  # integer statistics are clamped to [-_LIMIT, _LIMIT] (monotone, so no sensitivity is added)


def _uniform_below(bound: Tensor, generator: torch.Generator) -> Tensor:
    """Exactly uniform integers in [0, bound) for ``bound # (n,)`` int64 in [1, 2^40], by
    rejection: a 62-bit draw r is kept when r < 2^62 - (2^62 mod bound), then r mod bound."""
    out = torch.randint(0, 2**_BITS, bound.shape, generator=generator, device=bound.device, dtype=torch.int64)  # (n,)
    redo = out >= 2**_BITS - (2**_BITS % bound)  # (n,): probability < 2^-22 each
    while bool(redo.any()):
        idx = redo.nonzero().squeeze(1)  # (m,)
        out[idx] = torch.randint(0, 2**_BITS, idx.shape, generator=generator, device=bound.device, dtype=torch.int64)
        redo = out >= 2**_BITS - (2**_BITS % bound)
    return out % bound


def _bernoulli_exp(numerator: Tensor, denominator: Tensor, generator: torch.Generator) -> Tensor:
    """Bernoulli(exp(-x)) ``# (n,)`` for x = numerator / denominator in [0, 1] (int64 ``# (n,)``), exactly.

    Canonne, Kamath, Steinke 2020, Alg. 1: draw A_k ~ Bernoulli(x / k) for k = 1, 2, ... until the
    first A_k = 0; the result is 1 iff that k is odd, an event of probability exp(-x). Each A_k
    compares a uniform integer in [0, k d) with n. Each round draws only for the running entries.
    """
    k = torch.ones_like(numerator)  # (n,)
    idx = torch.arange(numerator.shape[0], device=numerator.device)  # (m,) running entries
    while idx.numel():
        a = _uniform_below(k[idx] * denominator[idx], generator) < numerator[idx]  # (m,) Bernoulli(n/(k d))
        idx = idx[a]
        k[idx] += 1
    return (k % 2) == 1


def _geometric(scale: int, size: int, generator: torch.Generator, device: torch.device) -> Tensor:
    """G ``# (size,)`` with P(G = g) = (1 - e^(-1/t)) e^(-g/t) for g = 0, 1, ... (t = ``scale``), exactly.

    Canonne, Kamath, Steinke 2020, Alg. 2, steps 1-4: U uniform in {0, ..., t-1}, kept with
    probability exp(-U/t) (else redrawn); V the number of Bernoulli(e^-1) successes before the
    first failure; G = U + t V.
    """
    t = torch.full((size,), scale, dtype=torch.int64, device=device)  # (n,)
    u = torch.zeros_like(t)
    idx = torch.arange(size, device=device)  # (m,) entries without an accepted U
    while idx.numel():
        cand = _uniform_below(t[idx], generator)  # (m,)
        keep = _bernoulli_exp(cand, t[idx], generator)  # (m,)
        u[idx[keep]] = cand[keep]
        idx = idx[~keep]
    v = torch.zeros_like(t)
    one = torch.ones_like(t)
    idx = torch.arange(size, device=device)  # (m,) entries still counting successes
    while idx.numel():
        idx = idx[_bernoulli_exp(one[idx], one[idx], generator)]
        v[idx] += 1
    return u + scale * v


def discrete_laplace(scale: int, shape: tuple[int, ...] | torch.Size, generator: torch.Generator,
                     device: torch.device | str | None = None) -> Tensor:
    """Lap_Z(t) noise ``# shape`` int64: P(z) = (1 - q)/(1 + q) q^|z|, q = exp(-1/t), t = ``scale``.

    The difference of two independent geometric variables of ratio q (:func:`_geometric`) has
    exactly this law: P(G1 - G2 = z) = sum_g (1-q)^2 q^(g + |z|) q^g = (1-q)/(1+q) q^|z|. Every
    random number is a uniform integer from ``generator``; no floating point is involved.
    """
    scale = check_count("scale", scale)
    if scale >= 2**40:
        raise InvalidInputError(f"discrete Laplace scale {scale} is too large (at most 2^40)")
    device = torch.device(device) if device is not None else generator.device
    shape = tuple(shape)
    size = math.prod(shape)
    return (_geometric(scale, size, generator, device) - _geometric(scale, size, generator, device)).view(shape)


def _noise(scale: int, n: int, generator: torch.Generator | Sequence[torch.Generator], device: torch.device) -> Tensor:
    """Lap_Z(scale) ``# (n,)`` int64 on ``device``: from one stream, or entry i from ``generator[i]``."""
    if isinstance(generator, torch.Generator):
        return discrete_laplace(scale, (n,), generator, device)
    if len(generator) != n:
        raise InvalidInputError(f"got {len(generator)} generators for {n} texts; give one per text")
    noise = [discrete_laplace(scale, (1,), g).to(device) for g in generator]
    return torch.cat(noise) if noise else torch.zeros(0, dtype=torch.int64, device=device)


class SparseVectorSwitch:
    """Per-text sparse vector runs with a cap of c positive answers (module docstring).

    Args:
        threshold: T, in the units of the statistic (public).
        sensitivity: Delta, the most one protected unit can move the statistic of any query; the
            statistic as computed may move by Delta + g/4 (g = ``self.grid``), so callers bound
            their floating-point error by g/4 (:class:`~tokendp.mechanisms.AminEtAl` checks it).
        epsilon: the pure-DP budget eps1 + eps2 of each run.
        max_positives: c, the positive answers a run may give before it stops.
        num_texts: N, the number of independent runs (one per text).
        generator: the source of the threshold noise (drawn here, once): one stream for all
            runs, or one per run.
        threshold_share: eps1 / epsilon (None: the variance-optimal split of
            :func:`~tokendp.accounting.sparse_vector_noise`).
    """

    def __init__(self, *, threshold: float, sensitivity: float, epsilon: float, max_positives: int, num_texts: int,
                 generator: torch.Generator | Sequence[torch.Generator], threshold_share: float | None = None) -> None:
        self.epsilon = float(epsilon)
        self.sensitivity = float(sensitivity)
        self.max_positives = check_count("max_positives", max_positives)
        n = check_count("num_texts", num_texts)
        self.grid, self.steps = sparse_vector_grid(sensitivity=sensitivity)  # g, K
        self.threshold_scale, self.query_scale = sparse_vector_discrete_noise(
            steps=self.steps, epsilon=epsilon, max_positives=max_positives, threshold_share=threshold_share)
        device = generator.device if isinstance(generator, torch.Generator) else generator[0].device
        base = math.ceil(float(threshold) / self.grid)  # public: any integer is fine
        self.noisy_threshold = base + _noise(self.threshold_scale, n, generator, device)  # (N,) int64
        self.positives = torch.zeros(n, dtype=torch.int64, device=device)  # (N,)

    def to_grid(self, statistic: Tensor) -> Tensor:
        """q = ceil(s / g) ``# (...)`` int64, clamped to +-2^52: exact (g is a power of two) and
        monotone, so the integer queries have sensitivity K = ``self.steps``."""
        q = torch.ceil(statistic.to(torch.float64) / self.grid).clamp_(-_LIMIT, _LIMIT)  # (...)
        return q.nan_to_num_(nan=float(_LIMIT)).to(torch.int64)

    def decide(self, statistic: Tensor, generator: torch.Generator | Sequence[torch.Generator],
               docs: Tensor | None = None) -> Tensor:
        """One query per text: ``statistic # (Na,)`` of the texts ``docs # (Na,)`` (indices into
        the N runs; default all N) -> ``positive # (Na,)`` bool, counted against the cap.
        ``generator``: one stream for the query noise of all Na texts, or one per text."""
        if docs is None:
            docs = torch.arange(self.positives.shape[0], device=self.positives.device)  # (N,)
        if statistic.shape != docs.shape:
            raise InvalidInputError(f"statistic has shape {tuple(statistic.shape)} but there are {docs.shape[0]} texts")
        docs = docs.to(self.positives.device)
        noise = _noise(self.query_scale, statistic.shape[0], generator, self.positives.device)  # (Na,)
        noisy = self.to_grid(statistic).to(self.positives.device) + noise  # (Na,) int64
        open_runs = self.positives[docs] < self.max_positives  # (Na,)
        positive = open_runs & (noisy >= self.noisy_threshold[docs])  # (Na,)
        self.positives.index_add_(0, docs, positive.to(torch.int64))
        return positive

    def event(self) -> PureDpEvent:
        """What one run costs its text's protected units, once for the whole run: epsilon-DP."""
        return PureDpEvent(self.epsilon)
