"""DP-Prompt (Utpala et al. 2023): the exponential mechanism on clipped private logits.

Claim. Adjacency: any change of the private context (the unit "context"). Each row's logits
are shifted so that their maximum is 0 and clipped to [-w, 0] (a range of width w); sampling
is softmax(clipped / tau). For any two inputs and any token y, the clipped logits differ by at
most w and each normaliser by at most a factor exp(w / tau), so
P(y) / P'(y) <= exp(2 w / tau): eps = 2 w / tau per token (pure DP; docs/privacy.md "DP-Prompt (baseline)").
Softmax is shift-invariant, so the shift itself changes nothing but where the clip acts.
Composition: epsilons add over the T generated tokens.
Floating point (docs/privacy.md "InvisibleInk, Amin, DP-Prompt and DP-Decoding"): the step runs in float64 and clips to the
width w' = w minus a public room for its rounding and the sampler's, so the released distribution
is (2 w / tau)-DP exactly as accounted.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tokendp.accounting import dp_prompt_epsilon_per_token
from tokendp.accounting.events import PureDpEvent
from tokendp.mechanisms._float import LIBM, SAMPLER_SLACK, UNIT, shrunk
from tokendp.mechanisms.base import MechanismStep, check_logits, check_positive

__all__ = ["DPPrompt"]


class DPPrompt:
    """softmax(clip(row 1 - max(row 1), -w, 0) / tau) on the private row 1; row 0 is ignored."""

    name = "dp-prompt"

    def __init__(self, clip_width: float, temperature: float) -> None:
        self.clip_width = check_positive("clip_width", clip_width)
        self.temperature = check_positive("temperature", temperature)

    def effective_width(self, *, vocab_size: int) -> float:
        """w' = w - tau (4 e + 2^-40) / 2 (:func:`~tokendp.mechanisms._float.shrunk`), with
        e = u (2 w / tau + ln V + 2) + 2^-44 bounding how far the float64 log-weights stray from
        the exact ones at w': the clipped values lie in [-w', 0] exactly (the maximum is exactly
        0), the division by tau rounds by u w'/tau and the subtraction of the log-normaliser (in
        [0, ln V]) by u (w'/tau + ln V)."""
        err = UNIT * (2.0 * self.clip_width / self.temperature + math.log(vocab_size) + 2.0) + LIBM
        return shrunk("clip_width", self.clip_width, 2.0 / self.temperature, 4.0 * err + SAMPLER_SLACK)

    def step(self, logits: Tensor) -> MechanismStep:
        """logits (..., R >= 2, V) -> float64 log-probabilities (..., V) of the exponential mechanism."""
        check_logits(logits, min_rows=2)
        width = self.effective_width(vocab_size=logits.shape[-1])
        row = logits[..., 1, :].to(torch.float64)  # (..., V)
        clipped = (row - row.amax(-1, keepdim=True)).clamp_(-width, 0.0).nan_to_num_(nan=-width)  # (..., V) in [-w', 0]
        scores = clipped / self.temperature  # (..., V)
        return MechanismStep(scores - scores.logsumexp(-1, keepdim=True), {})

    def event(self) -> dict[str, PureDpEvent]:
        """{"context": PureDpEvent(2 w / tau)} per generated token."""
        return {"context": PureDpEvent(dp_prompt_epsilon_per_token(clip_width=self.clip_width, temperature=self.temperature))}
