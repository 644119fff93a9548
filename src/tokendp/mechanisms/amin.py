"""Amin et al. 2024, "Private prediction for large-scale synthetic text generation": the baseline of InvisibleInk.

Step, for logits (..., 1+B, V), row 0 public, rows 1..B private: each private row is centred
at its mean over the vocabulary (softmax is shift-invariant, so centring only decides where
the clip acts) and clipped to [-C, C]; the B rows are averaged and sampled at temperature tau.
Claim. Adjacency: replace one private row by any other. Unit: the reference. Per step: the
average moves by at most 2C/B per coordinate, so sampling is an exponential mechanism with a
bounded range of width 4C/(B tau): rho = 2 C^2 / (B^2 tau^2) zCDP (Cesar and Rogers 2021).
Composition: rho adds over the tokens that use the private prediction.
Floating point (docs/privacy.md "InvisibleInk, Amin, DP-Prompt and DP-Decoding"): the step runs in float64 and clips to
C' = C minus a public room for its rounding and the sampler's (:mod:`tokendp.mechanisms._float`),
so the released distribution is (4C/(B tau))-bounded range exactly as accounted.

Optional sparse-vector switch to the public model (after Amin et al.'s public predictions):
a :class:`~tokendp.mechanisms.svt.SparseVectorSwitch` holding one SVT run per text. Each step
computes the statistic s = max_y |zbar_y - clip(centred z_pub)_y| (zbar the private average
above), of sensitivity Delta = 2C/B under the same adjacency
(:func:`tokendp.accounting.amin_switch_sensitivity`). A positive SVT answer (s + query noise at
or above the text's noisy threshold) samples the private average, charged rho; a negative one,
and every step after the text's c-th private token, samples the public model softmax(z_pub / tau),
which reads no reference. The statistic is computed in float64, within (B + 4) u C of its exact
value, which the switch's grid absorbs (checked). The run costs the switch's epsilon once
(:meth:`SparseVectorSwitch.event`); the certificate is
:func:`tokendp.accounting.amin_switch_epsilon`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from tokendp.accounting import amin_rho_per_token, amin_switch_sensitivity
from tokendp.accounting.events import PrivacyEvent, ZcdpEvent
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.mechanisms._float import LIBM, SAMPLER_SLACK, UNIT, shrunk
from tokendp.mechanisms.base import MechanismStep, check_logits, check_positive
from tokendp.mechanisms.svt import SparseVectorSwitch

__all__ = ["AminEtAl"]


class AminEtAl:
    """Clip full centred logits to [-C, C], average over the B private rows, sample at tau.

    ``switch``: the run's :class:`SparseVectorSwitch` (one SVT run per text, built with
    sensitivity >= 2C/B), or None to sample every token from the private average.
    """

    name = "amin"

    def __init__(self, clip: float, temperature: float, *, switch: SparseVectorSwitch | None = None) -> None:
        self.clip = check_positive("clip", clip)
        self.temperature = check_positive("temperature", temperature)
        self.switch = switch

    def effective_clip(self, *, batch_size: int, vocab_size: int) -> float:
        """C' = C - B tau (4 e + 2^-40) / 2 (:func:`~tokendp.mechanisms._float.shrunk`), with
        e = u ((B + 5) C / tau + ln V + 2) + 2^-44 bounding how far the float64 log-weights of the
        step stray from the exact ones at C' (docs/privacy.md "InvisibleInk, Amin, DP-Prompt and DP-Decoding"): centring and
        clipping give values in [-C', C'] exactly, the mean of B of them is within (B + 1) u C' of
        its exact value, the division by tau and the subtraction of the log-normaliser add
        u C'/tau and u (2 C'/tau + ln V + 1)."""
        b, tau = batch_size, self.temperature
        err = UNIT * ((b + 5) * self.clip / tau + math.log(vocab_size) + 2.0) + LIBM
        return shrunk("clip", self.clip, 4.0 / (b * tau), 4.0 * err + SAMPLER_SLACK)

    @staticmethod
    def _clipped(rows: Tensor, clip: float) -> Tensor:
        """Rows (..., V) centred and clipped to [-clip, clip] in float64 (a NaN becomes 0): each
        clipped row is a function of its own row alone, in the interval exactly."""
        rows = rows.to(torch.float64)
        return (rows - rows.mean(-1, keepdim=True)).clamp_(-clip, clip).nan_to_num_(nan=0.0)

    def _check_switch(self, batch_size: int) -> None:
        """The switch's noise must be scaled for this clip and B (sensitivity 2C/B), and its grid
        must absorb the float64 statistic's error: |s_hat - s| <= (B + 4) u C, twice that <= g/4."""
        needed = amin_switch_sensitivity(clip=self.clip, batch_size=batch_size)
        if self.switch is not None and self.switch.sensitivity < needed:
            raise InvalidParameterError(
                f"the switch was built for sensitivity {self.switch.sensitivity:g} but clip {self.clip:g} with "
                f"B = {batch_size} needs {needed:g} (2C/B); build it with amin_switch_sensitivity(clip=..., batch_size=...)")
        if self.switch is not None and 2 * (batch_size + 4) * UNIT * self.clip > self.switch.grid / 4:
            raise InvalidParameterError(f"the switch's grid {self.switch.grid:g} is too fine for B = {batch_size}")

    def _average(self, logits: Tensor, clip: float) -> Tensor:
        """zbar: the B private rows of logits (..., 1+B, V) centred, clipped and averaged -> (..., V) float64."""
        return self._clipped(logits[..., 1:, :], clip).mean(-2)

    def _statistic(self, private: Tensor, logits: Tensor, clip: float) -> Tensor:
        return (private - self._clipped(logits[..., 0, :], clip)).abs().amax(-1)  # (...)

    def switch_statistic(self, logits: Tensor) -> Tensor:
        """s = max_y |zbar_y - clip(centred z_pub)_y|: logits (..., 1+B, V) -> (...) float64, at the
        step's clip C' <= C.

        Sensitivity 2C/B under replace-one (:func:`tokendp.accounting.amin_switch_sensitivity`),
        plus (B + 4) u C of float64 rounding on each side; never released, only compared with the
        SVT's noisy threshold."""
        clip = self.effective_clip(batch_size=logits.shape[-2] - 1, vocab_size=logits.shape[-1])
        return self._statistic(self._average(logits, clip), logits, clip)

    def step(self, logits: Tensor, *, docs: Tensor | None = None,
             generator: torch.Generator | Sequence[torch.Generator] | None = None) -> MechanismStep:
        """logits (..., 1+B, V) -> log-probabilities (..., V).

        With the switch, logits are (Na, 1+B, V) for the texts ``docs # (Na,)`` (indices into the
        switch's runs; default all), ``generator`` gives the query noise (one stream, or one per
        text), and the diagnostic "private" (Na,) bool says which texts sampled the private
        average (the SVT's answers).
        """
        check_logits(logits, min_rows=2)
        clip = self.effective_clip(batch_size=logits.shape[-2] - 1, vocab_size=logits.shape[-1])
        private = self._average(logits, clip)  # (..., V) float64
        scores = private / self.temperature  # (..., V)
        out = scores - scores.logsumexp(-1, keepdim=True)  # (..., V) float64 log-probabilities
        if self.switch is None:
            return MechanismStep(out, {})
        if generator is None:
            raise InvalidParameterError("the sparse-vector switch needs a torch.Generator for its noise")
        if logits.dim() != 3:
            raise InvalidInputError(f"with the switch, logits must be (texts, 1+B, V), got {tuple(logits.shape)}")
        self._check_switch(logits.shape[-2] - 1)
        use_private = self.switch.decide(self._statistic(private, logits, clip), generator, docs)  # (Na,)
        public = (logits[:, 0, :].to(torch.float64) / self.temperature).log_softmax(-1)  # (Na, V): reads no reference
        return MechanismStep(torch.where(use_private.unsqueeze(-1), out, public), {"private": use_private})

    def event(self, *, batch_size: int) -> dict[str, ZcdpEvent]:
        """{"reference": ZcdpEvent(2 C^2 / (B^2 tau^2))}: one token sampled from the private average.

        With the switch only the tokens it sends to the private average cost this (at most c per
        text); public tokens cost nothing; the SVT run costs :meth:`events_per_text`'s first entry.
        """
        return {"reference": ZcdpEvent(amin_rho_per_token(clip=self.clip, batch_size=batch_size, temperature=self.temperature))}

    def events_per_text(self, *, batch_size: int) -> list[dict[str, PrivacyEvent]]:
        """The worst case of one text with the switch, to charge before its first token: the SVT run
        (PureDpEvent(svt_epsilon)) once, then c private tokens. Without the switch: an error, since
        every one of the T tokens is then charged :meth:`event`."""
        if self.switch is None:
            raise InvalidParameterError("events_per_text needs the switch; without it charge event() for each of the T tokens")
        self._check_switch(batch_size)
        return [{"reference": self.switch.event()}] + [self.event(batch_size=batch_size)] * self.switch.max_positives
