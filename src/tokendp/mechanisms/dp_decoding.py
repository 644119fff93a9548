"""DP-Decoding (Majmudar et al. 2022): mix the private next-token distribution with the uniform one.

Claim. Adjacency: any change of the private context (the unit "context"). Per-step bound: the
output q' = lam q + (1 - lam)/V satisfies q'(y) / q''(y) <= (lam + (1 - lam)/V) / ((1 - lam)/V)
= 1 + lam V / (1 - lam) for any two private distributions q, q'' and any token y, so each token
is eps-DP with eps = log(1 + lam V / (1 - lam)) (pure DP; docs/privacy.md "DP-Decoding (baseline)").
Composition: epsilons add over the T generated tokens.
Floating point (docs/privacy.md "InvisibleInk, Amin, DP-Prompt and DP-Decoding"): a float32 mixture can exceed that ratio by
a few ulps; the step computes the mixture in float64 with lam' = lam minus a public room for its
rounding and the sampler's, so the released distribution is eps-DP exactly as accounted.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tokendp.accounting import dp_decoding_epsilon_per_token
from tokendp.accounting.events import PureDpEvent
from tokendp.errors import InvalidParameterError
from tokendp.mechanisms._float import LIBM, SAMPLER_SLACK, UNIT, shrunk
from tokendp.mechanisms.base import MechanismStep, check_logits, check_positive

__all__ = ["DPDecoding"]


class DPDecoding:
    """q' = lam q + (1 - lam) / V on row 1 (the private row); row 0 is ignored."""

    name = "dp-decoding"

    def __init__(self, lam: float) -> None:
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not (0.0 <= lam < 1.0):
            raise InvalidParameterError(f"lam must be in [0, 1) (1 would give no privacy), got {lam!r}")
        self.lam = float(lam)

    def effective_lam(self, *, vocab_size: int) -> float:
        """lam' = lam - 2 s (:func:`~tokendp.mechanisms._float.shrunk`; d eps / d lam >= 1), with
        s = 2^-40 + 2^-42 (ln V + |ln(1 - lam)| + 1) + 2.1 (V + 8) u the most the float64 step and
        the sampler can add to the log-ratio (docs/privacy.md "InvisibleInk, Amin, DP-Prompt and DP-Decoding"): p = e / sum e
        gives p_y in [0, 1] with sum within 1.01 (V + 2) u of 1, q_y = fl(lam' p_y + fl((1 - lam')/V))
        lies in [c0, (lam' + c0)(1 + u)^2], and log adds 2^-44 |log q_y| per token."""
        if self.lam == 0.0:
            return 0.0
        v = vocab_size
        slack = SAMPLER_SLACK + 4 * LIBM * (math.log(v) + abs(math.log1p(-self.lam)) + 1.0) + 2.1 * (v + 8) * UNIT
        return shrunk("lam", self.lam, 1.0, slack)

    def step(self, logits: Tensor, *, temperature: float = 1.0) -> MechanismStep:
        """logits (..., R >= 2, V) -> float64 log(lam' softmax(row 1 / temperature) + (1 - lam') / V)."""
        check_logits(logits, min_rows=2)
        temperature = check_positive("temperature", temperature)
        vocab = logits.shape[-1]
        lam = self.effective_lam(vocab_size=vocab)
        if lam == 0.0:
            return MechanismStep(torch.full(logits.shape[:-2] + (vocab,), -math.log(vocab), dtype=torch.float64,
                                            device=logits.device), {})
        row = logits[..., 1, :].to(torch.float64) / temperature  # (..., V)
        weights = (row - row.amax(-1, keepdim=True)).exp_().nan_to_num_(nan=0.0)  # (..., V) in [0, 1]
        total = weights.sum(-1, keepdim=True)  # (..., 1) >= every weight
        private = torch.where(total > 0, weights / total, 1.0 / vocab)  # (..., V) in [0, 1]
        floor = (1.0 - lam) / vocab
        return MechanismStep(torch.log(private * lam + floor), {})

    def event(self, *, vocab_size: int) -> dict[str, PureDpEvent]:
        """{"context": PureDpEvent(log(1 + lam V / (1 - lam)))} per generated token."""
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise InvalidParameterError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
        return {"context": PureDpEvent(dp_decoding_epsilon_per_token(lam=self.lam, vocab_size=vocab_size))}
