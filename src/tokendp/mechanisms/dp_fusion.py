"""DP-Fusion (Thareja et al., ICLR 2026): per-group mollification toward the public distribution.

Claim (docs/privacy.md, "DP-Fusion" and "Floating point").
  Adjacency: two documents are neighbours for privacy group i if they differ only in the
  tokens of group i's spans (the neighbour has placeholders there); span positions, lengths
  and group membership are public.
  Unit: the privacy group.
  Per-step bound: with m groups and caps c_j = alpha * beta_j, each group's mixture
  P_j' = lam_j P_j + (1 - lam_j) Q satisfies max(D_alpha(P_j' || Q), D_alpha(Q || P_j')) <= c_j,
  and the output is their uniform average. On the neighbour, group i's private context equals
  the public one, so P_i' = Q and nothing else changes. Joint convexity of
  exp((alpha - 1) D_alpha) then gives, in both directions, the RDP bound at order alpha
      r_i = log(1 + (exp((alpha - 1) c_i) - 1) / m) / (alpha - 1)      (= c_i for m = 1).
  Composition: RDP adds over the T generated tokens (T fixed before generation); convert with
  the improved RDP conversion (Canonne, Kamath and Steinke 2020).
  Rounding: the mixture is formed in float64 from exactly the distributions mollify certified
  (tokendp.mechanisms.mixture), each group's cap lowered by k times the release allowance (k
  real groups), so the released distribution, not only lam, meets r_i exactly on every machine.
The realised mixing weights and divergences are diagnostics only: the event depends on
(alpha, beta, m) alone.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from tokendp.accounting import dp_fusion_rdp_per_token
from tokendp.accounting.events import RdpEvent
from tokendp.accounting._checks import check_order
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.mechanisms.base import MechanismStep, check_logits, check_nonnegative, check_positive
from tokendp.mechanisms.mixture import mollified_average

__all__ = ["DPFusion"]

class DPFusion:
    """DP-Fusion's per-token step at Rényi order ``alpha`` (see the module docstring for the claim)."""

    name = "dp-fusion"

    def __init__(self, alpha: float = 2.0) -> None:
        self.alpha = check_order(alpha)

    def step(
        self,
        logits: Tensor,  # (..., 1+m, V), row 0 public
        *,
        betas: Tensor,  # (..., m)
        group_mask: Tensor | None = None,  # (..., m) bool, False = padding
        temperature: float = 1.0,
        realised_divergence: bool = True,
    ) -> MechanismStep:
        """Mix each group toward the public distribution within alpha * beta_i, then average.

        p_pub and p_i are softmaxes of the rows at ``temperature``; lam_i = mollify(p_i, p_pub,
        cap = alpha beta_i); the output is the average over the k real groups,

            mean_i (lam_i p_i + (1 - lam_i) p_pub) = sum_i (lam_i / k) p_i + (1 - sum_i lam_i / k) p_pub,

        released in float64 by :func:`~tokendp.mechanisms.mixture.mollified_average` (float64
        log-probabilities (..., V); the exact support of the mixture). All rows padding: p_pub.
        Diagnostics: "lam" (..., m) and, unless ``realised_divergence`` is False, "divergence"
        (..., m), a certified upper bound on each mixture's symmetric divergence to p_pub (0
        for padding).

        The real groups' betas must be finite and >= 0: on the CPU a bad one raises
        InvalidParameterError; on accelerators the step reads nothing back from the device (so
        that it can run without host synchronisation), so a bad beta there gives its group
        lam = 0. :meth:`event` checks the same betas on the host before anything is charged,
        as the sanitize job does when it builds its ledgers (docs/performance.md, "The step
        without host reads").
        """
        check_logits(logits, min_rows=2)
        temperature = check_positive("temperature", temperature)
        m = logits.shape[-2] - 1
        if not isinstance(betas, Tensor) or betas.shape[-1:] != (m,):
            raise InvalidInputError(f"betas must be a tensor (..., m) with m = {m} groups (rows after the public one)")
        mask = torch.ones(betas.shape, dtype=torch.bool, device=logits.device) if group_mask is None else group_mask.to(torch.bool)
        found = mollified_average(logits, alpha=self.alpha, caps=self.alpha * betas.to(torch.float64), mask=mask,
                                  temperature=temperature)
        diagnostics = {"lam": found.lam}
        if realised_divergence:
            diagnostics["divergence"] = found.divergence
        return MechanismStep(found.logprobs, diagnostics)

    def event(self, *, betas: Mapping[str, float]) -> dict[str, RdpEvent]:
        """{group: RdpEvent(alpha, r_i)} for one generated token; m = len(betas) groups."""
        if not betas:
            raise InvalidParameterError("betas must name at least one privacy group")
        m = len(betas)
        return {
            unit: RdpEvent(self.alpha, dp_fusion_rdp_per_token(alpha=self.alpha, beta=check_nonnegative(f"beta[{unit}]", b), groups=m))
            for unit, b in betas.items()
        }
