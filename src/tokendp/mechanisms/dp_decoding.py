"""DP-Decoding (Majmudar et al. 2022): mix the private next-token distribution with the uniform one.

Claim. Adjacency: any change of the private context (the unit "context"). Per-step bound: the
output q' = lam q + (1 - lam)/V satisfies q'(y) / q''(y) <= (lam + (1 - lam)/V) / ((1 - lam)/V)
= 1 + lam V / (1 - lam) for any two private distributions q, q'' and any token y, so each token
is eps-DP with eps = log(1 + lam V / (1 - lam)) (pure DP; docs/privacy.md "DP-Decoding (baseline)").
Composition: epsilons add over the T generated tokens.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tokendp.accounting import dp_decoding_epsilon_per_token
from tokendp.accounting.events import PureDpEvent
from tokendp.errors import InvalidParameterError
from tokendp.mechanisms.base import MechanismStep, check_logits, check_positive, log_softmax_at

__all__ = ["DPDecoding"]


class DPDecoding:
    """q' = lam q + (1 - lam) / V on row 1 (the private row); row 0 is ignored."""

    name = "dp-decoding"

    def __init__(self, lam: float) -> None:
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not (0.0 <= lam < 1.0):
            raise InvalidParameterError(f"lam must be in [0, 1) (1 would give no privacy), got {lam!r}")
        self.lam = float(lam)

    def step(self, logits: Tensor, *, temperature: float = 1.0) -> MechanismStep:
        """logits (..., R >= 2, V) -> log(lam softmax(row 1 / temperature) + (1 - lam) / V)."""
        check_logits(logits, min_rows=2)
        temperature = check_positive("temperature", temperature)
        vocab = logits.shape[-1]
        private = log_softmax_at(logits[..., 1, :], temperature)  # (..., V)
        uniform = math.log1p(-self.lam) - math.log(vocab)
        if self.lam == 0.0:
            return MechanismStep(torch.full_like(private, uniform), {})
        return MechanismStep(torch.logaddexp(private + math.log(self.lam), torch.full_like(private, uniform)), {})

    def event(self, *, vocab_size: int) -> dict[str, PureDpEvent]:
        """{"context": PureDpEvent(log(1 + lam V / (1 - lam)))} per generated token."""
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise InvalidParameterError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
        return {"context": PureDpEvent(dp_decoding_epsilon_per_token(lam=self.lam, vocab_size=vocab_size))}
