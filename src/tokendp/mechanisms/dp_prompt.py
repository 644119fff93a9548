"""DP-Prompt (Utpala et al. 2023): the exponential mechanism on clipped private logits.

Claim. Adjacency: any change of the private context (the unit "context"). Each row's logits
are shifted so that their maximum is 0 and clipped to [-w, 0] (a range of width w); sampling
is softmax(clipped / tau). For any two inputs and any token y, the clipped logits differ by at
most w and each normaliser by at most a factor exp(w / tau), so
P(y) / P'(y) <= exp(2 w / tau): eps = 2 w / tau per token (pure DP; docs/privacy.md "DP-Prompt (baseline)").
Softmax is shift-invariant, so the shift itself changes nothing but where the clip acts.
Composition: epsilons add over the T generated tokens.
"""

from __future__ import annotations

from torch import Tensor

from tokendp.accounting import dp_prompt_epsilon_per_token
from tokendp.accounting.events import PureDpEvent
from tokendp.mechanisms.base import MechanismStep, check_logits, check_positive

__all__ = ["DPPrompt"]


class DPPrompt:
    """softmax(clip(row 1 - max(row 1), -w, 0) / tau) on the private row 1; row 0 is ignored."""

    name = "dp-prompt"

    def __init__(self, clip_width: float, temperature: float) -> None:
        self.clip_width = check_positive("clip_width", clip_width)
        self.temperature = check_positive("temperature", temperature)

    def step(self, logits: Tensor) -> MechanismStep:
        """logits (..., R >= 2, V) -> log-probabilities (..., V) of the exponential mechanism."""
        check_logits(logits, min_rows=2)
        row = logits[..., 1, :].float()  # (..., V)
        clipped = (row - row.amax(-1, keepdim=True)).clamp_min(-self.clip_width)  # (..., V) in [-w, 0]
        return MechanismStep((clipped / self.temperature).log_softmax(-1), {})

    def event(self) -> dict[str, PureDpEvent]:
        """{"context": PureDpEvent(2 w / tau)} per generated token."""
        return {"context": PureDpEvent(dp_prompt_epsilon_per_token(clip_width=self.clip_width, temperature=self.temperature))}
