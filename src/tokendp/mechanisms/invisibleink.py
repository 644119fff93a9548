"""InvisibleInk (Vinod, Pillutla and Thakurta, NeurIPS 2025): DClip, Top-k+ and the exponential mechanism.

Step, for logits (..., 1+B, V) with row 0 public (phi_pub) and rows 1..B the references:
  DClip:  phi = phi_pub + (1/B) sum_i clip(phi_i - phi_pub, -C, C)   (only the private part is clipped)
  Top-k+: S = {y : phi_pub(y) >= l_k - 2C/B}, l_k the k-th largest public logit; S contains
          the public top-k and depends on public logits only, so choosing it costs nothing.
  EM:     softmax(phi / tau) restricted to S (other tokens get probability 0).
Claim. Adjacency: replace-by-null on one reference (its row becomes the public row). Unit:
the reference; every reference in the batch is charged. Per step: phi moves by at most C/B
in every coordinate, so sampling is an exponential mechanism with a bounded range of width
2C/(B tau), hence rho-zCDP with rho = C^2 / (2 B^2 tau^2) (Cesar and Rogers 2021; docs/privacy.md
"InvisibleInk (synthetic text from B references)"). Composition: rho adds over the T generated tokens.
Floating point (docs/privacy.md "InvisibleInk, Amin, DP-Prompt and DP-Decoding"): the step runs in
float64 on public logits shifted to their maximum and floored at -2^16 below it (a public
transformation), and clips to C' = C minus a public room for its rounding and the sampler's, so
the released distribution is (2C/(B tau))-bounded range exactly as accounted.
Caveat (docs/privacy.md, "Note on the Top-k+ threshold"): a coordinate of phi can exceed the public one by up to C, not C/B, so
the paper's threshold l_k - 2C/B is not always a superset of the private top-k. That costs
utility, not privacy. C = 0 gives the public model's text.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tokendp.accounting import invisibleink_rho_per_token
from tokendp.accounting.events import ZcdpEvent
from tokendp.errors import InvalidParameterError
from tokendp.mechanisms._float import LIBM, SAMPLER_SLACK, UNIT, shrunk
from tokendp.mechanisms.base import MechanismStep, check_logits, check_nonnegative, check_positive

PUBLIC_FLOOR = 2.0**16  # public logits below max - PUBLIC_FLOOR are raised to it (probability < e^-65536/tau)

__all__ = ["InvisibleInk"]


class InvisibleInk:
    """InvisibleInk's per-token step with clip C, temperature tau and Top-k+ size k (None: no truncation)."""

    name = "invisibleink"

    def __init__(self, clip: float, temperature: float, top_k: int | None = None) -> None:
        self.clip = check_nonnegative("clip", clip)
        self.temperature = check_positive("temperature", temperature)
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise InvalidParameterError(f"top_k must be an integer >= 1 or None, got {top_k!r}")
        self.top_k = top_k

    def step(self, logits: Tensor) -> MechanismStep:
        """logits (..., 1+B, V) -> log-probabilities (..., V); diagnostics "topk_plus_size" (...).

        With Top-k+, DClip and the softmax run on the candidates only (every other token has
        probability 0, and each token's score depends on its own column alone): the set is the
        n largest public logits, gathered as the top max(n) columns of every row.
        """
        check_logits(logits, min_rows=2)
        clip = self.effective_clip(batch_size=logits.shape[-2] - 1, vocab_size=logits.shape[-1])
        logits = logits.float()
        pub = logits[..., 0, :]  # (..., V)
        if self.top_k is None or self.top_k >= logits.shape[-1]:
            scores = self._scores(logits, clip)  # (..., V) float64
            size = torch.full(pub.shape[:-1], pub.shape[-1], device=pub.device)
            return MechanismStep(_log_normalise(scores), {"topk_plus_size": size})
        kth = pub.topk(self.top_k, dim=-1).values[..., -1:]  # (..., 1)
        size = (pub >= kth - 2.0 * self.clip / (logits.shape[-2] - 1)).sum(-1)  # (...), public data only
        index = pub.topk(int(size.max()), dim=-1).indices  # (..., K'): sorted, the set first
        columns = logits.gather(-1, index.unsqueeze(-2).expand(*logits.shape[:-1], index.shape[-1]))  # (..., 1+B, K')
        scores = self._scores(columns, clip)  # (..., K') float64
        in_set = torch.arange(index.shape[-1], device=pub.device) < size.unsqueeze(-1)  # (..., K')
        scores = _log_normalise(scores.masked_fill(~in_set, -math.inf))
        out = torch.full(pub.shape, -math.inf, dtype=torch.float64, device=pub.device).scatter_(-1, index, scores)  # (..., V)
        return MechanismStep(out, {"topk_plus_size": size})

    def effective_clip(self, *, batch_size: int, vocab_size: int) -> float:
        """C' = C - B tau (4 e + 2^-40) / 2 (:func:`~tokendp.mechanisms._float.shrunk`), with
        e = u ((B + 5) C / tau + 3 (L + C) / tau + ln V + 2) + 2^-44 (L = PUBLIC_FLOOR) bounding how
        far the float64 log-weights stray from the exact ones at C' (docs/privacy.md "InvisibleInk,
        Amin, DP-Prompt and DP-Decoding"): the clipped differences lie in [-C', C'] exactly, their mean is within
        (B + 1) u C', adding the public logit in [-L, 0], dividing by tau and subtracting the
        log-normaliser each round by at most u ((L + C')/tau + ln V + 1)."""
        if self.clip == 0:
            return 0.0
        b, tau = batch_size, self.temperature
        err = UNIT * (((b + 5) * self.clip + 3 * (PUBLIC_FLOOR + self.clip)) / tau + math.log(vocab_size) + 2.0) + LIBM
        return shrunk("clip", self.clip, 2.0 / (b * tau), 4.0 * err + SAMPLER_SLACK)

    def _scores(self, logits: Tensor, clip: float) -> Tensor:
        """DClip at temperature in float64: (phi_pub + mean_i clip(phi_i - phi_pub, -C', C')) / tau,
        with phi_pub shifted to its maximum and floored at -PUBLIC_FLOOR (public; -inf stays -inf),
        (..., 1+B, W) -> (..., W).
        A NaN difference is clipped to 0, so each clipped row depends on its own reference alone."""
        logits = logits.to(torch.float64)
        pub = logits[..., 0, :]  # (..., W)
        diff = (logits[..., 1:, :] - pub.unsqueeze(-2)).clamp_(-clip, clip).nan_to_num_(nan=0.0)  # (..., B, W)
        base = (pub - pub.amax(-1, keepdim=True)).clamp_(min=-PUBLIC_FLOOR)  # (..., W) public, in [-L, 0]
        base = base.masked_fill_(pub == -math.inf, -math.inf)  # a token the public model excludes stays excluded
        return (base + diff.mean(-2)) / self.temperature

    def event(self, *, batch_size: int) -> dict[str, ZcdpEvent]:
        """{"reference": ZcdpEvent(C^2 / (2 B^2 tau^2))} per token, charged to every reference in the batch."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidParameterError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        return {"reference": ZcdpEvent(invisibleink_rho_per_token(clip=self.clip, batch_size=batch_size, temperature=self.temperature))}


def _log_normalise(scores: Tensor) -> Tensor:
    """scores - logsumexp(scores), (..., W) -> (..., W): one rounding per token (the log-normaliser
    is a per-row constant, which the sampler's exact normalisation makes irrelevant)."""
    return scores - scores.logsumexp(-1, keepdim=True)
