"""Amin et al. 2024, "Private prediction for large-scale synthetic text generation": the baseline of InvisibleInk.

Step, for logits (..., 1+B, V), row 0 public, rows 1..B private: each private row is centred
at its mean over the vocabulary (softmax is shift-invariant, so centring only decides where
the clip acts) and clipped to [-C, C]; the B rows are averaged and sampled at temperature tau.
Claim. Adjacency: replace one private row by any other. Unit: the reference. Per step: the
average moves by at most 2C/B per coordinate, so sampling is an exponential mechanism with a
bounded range of width 4C/(B tau): rho = 2 C^2 / (B^2 tau^2) zCDP (Cesar and Rogers 2021).
Composition: rho adds over the tokens that use the private prediction.

Optional sparse-vector switch (Amin et al., Sec. on public predictions): the statistic
s = max_y |mean_i clip(centred phi_i)(y) - clip(centred phi_pub)(y)| has sensitivity 2C/B
under the same adjacency; when s + Lap(b_query) < threshold + Lap(b_threshold) (noise from the
caller's generator) the step returns the public distribution instead. This per-step switch
draws fresh threshold noise every step and caps nothing, so it does not match the sparse-vector
analysis of ``tokendp.accounting.amin_switch_epsilon`` (one threshold per text, query noise
scaled by the cap on private tokens): with the switch on, :meth:`AminEtAl.event` refuses
(NoGuaranteeError) rather than under-charge. The switch is for experiments only.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tokendp.accounting import amin_rho_per_token
from tokendp.accounting.events import ZcdpEvent
from tokendp.errors import InvalidParameterError
from tokendp.mechanisms.base import MechanismStep, NoGuaranteeError, check_logits, check_nonnegative, check_positive

__all__ = ["AminEtAl"]


def _laplace(shape: torch.Size, scale: float, generator: torch.Generator, device: torch.device) -> Tensor:
    u = torch.rand(shape, generator=generator, device=device, dtype=torch.float64) - 0.5  # (...)
    return -scale * torch.sign(u) * torch.log1p(-2.0 * u.abs())


class AminEtAl:
    """Clip full centred logits to [-C, C], average over the B private rows, sample at tau."""

    name = "amin"

    def __init__(self, clip: float, temperature: float, *, switch_threshold: float | None = None, switch_noise: float = 1.0) -> None:
        self.clip = check_positive("clip", clip)
        self.temperature = check_positive("temperature", temperature)
        if switch_threshold is not None:
            check_nonnegative("switch_threshold", switch_threshold)
        self.switch_threshold = switch_threshold
        self.switch_noise = check_positive("switch_noise", switch_noise)

    def _clipped(self, rows: Tensor) -> Tensor:
        return (rows - rows.mean(-1, keepdim=True)).clamp(-self.clip, self.clip)

    def step(self, logits: Tensor, *, generator: torch.Generator | None = None) -> MechanismStep:
        """logits (..., 1+B, V) -> log-probabilities (..., V); with the switch, diagnostics
        "use_public" (...) bool and "switch_statistic" (...)."""
        check_logits(logits, min_rows=2)
        logits = logits.float()
        private = self._clipped(logits[..., 1:, :]).mean(-2)  # (..., V)
        out = (private / self.temperature).log_softmax(-1)
        if self.switch_threshold is None:
            return MechanismStep(out, {})
        if generator is None:
            raise InvalidParameterError("the sparse-vector switch needs a torch.Generator for its noise")
        public = self._clipped(logits[..., 0, :])  # (..., V)
        stat = (private - public).abs().amax(-1)  # (...), sensitivity 2C/B
        scale = self.switch_noise * 2.0 * self.clip / (logits.shape[-2] - 1)
        noisy = stat.double() + _laplace(stat.shape, 2.0 * scale, generator, stat.device)
        use_public = noisy < self.switch_threshold + _laplace(stat.shape, scale, generator, stat.device)
        out = torch.where(use_public.unsqueeze(-1), (public / self.temperature).log_softmax(-1), out)
        return MechanismStep(out, {"use_public": use_public, "switch_statistic": stat})

    def event(self, *, batch_size: int) -> dict[str, ZcdpEvent]:
        """{"reference": ZcdpEvent(2 C^2 / (B^2 tau^2))} for a token sampled from the private average.

        Raises NoGuaranteeError when the sparse-vector switch is on (see the module docstring).
        """
        if self.switch_threshold is not None:
            raise NoGuaranteeError(
                "AminEtAl with switch_threshold has no per-token guarantee in tokendp yet; "
                "use switch_threshold=None (every token charged) for an accounted run"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidParameterError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        return {"reference": ZcdpEvent(amin_rho_per_token(clip=self.clip, batch_size=batch_size, temperature=self.temperature))}
