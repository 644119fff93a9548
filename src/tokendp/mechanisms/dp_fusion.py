"""DP-Fusion (Thareja et al., ICLR 2026): per-group mollification toward the public distribution.

Claim (DESIGN.md "Privacy math"; docs/privacy.md).
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
The realised mixing weights and divergences are diagnostics only: the event depends on
(alpha, beta, m) alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from tokendp.accounting import dp_fusion_rdp_per_token
from tokendp.accounting.events import RdpEvent
from tokendp.accounting._checks import check_order
from tokendp.divergence import mollify_with_divergence
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.mechanisms.base import MechanismStep, check_logits, check_nonnegative, check_positive, log_softmax_at

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

        formed as one product of the weights with the private probabilities (shifted per token
        by their largest value among the real groups, so a real group's term never underflows
        to 0 where it is the largest) plus the public term in log space: the output has exactly
        the support of the exact mixture, which the RDP bound needs. All rows padding: p_pub.
        Diagnostics: "lam" (..., m) and, unless ``realised_divergence`` is False, "divergence"
        (..., m), the symmetric divergence of each mixture to p_pub as computed by the search
        (0 for padding).
        """
        check_logits(logits, min_rows=2)
        temperature = check_positive("temperature", temperature)
        m = logits.shape[-2] - 1
        if not isinstance(betas, Tensor) or betas.shape[-1:] != (m,):
            raise InvalidInputError(f"betas must be a tensor (..., m) with m = {m} groups (rows after the public one)")
        mask = torch.ones(betas.shape, dtype=torch.bool, device=logits.device) if group_mask is None else group_mask.to(torch.bool)
        logp = log_softmax_at(logits, temperature)  # (..., 1+m, V)
        pub, priv = logp[..., 0, :], logp[..., 1:, :]  # (..., V), (..., m, V)
        cap = torch.where(mask, self.alpha * betas.to(torch.float64), 0.0)  # (..., m)
        lam, divergence = mollify_with_divergence(priv, pub, alpha=self.alpha, cap=cap)  # (..., m) each
        lam = torch.where(mask, lam, 0.0)
        count = mask.sum(-1, keepdim=True)  # (..., 1)
        weight = lam / count.clamp_min(1)  # (..., m) float64: lam_i / k
        public_weight = (1.0 - weight.sum(-1, keepdim=True)).clamp_min(0.0)  # (..., 1) float64
        if group_mask is None:  # every row is a real group
            top = priv.amax(-2, keepdim=True).nan_to_num_(neginf=0.0)  # (..., 1, V); 0 where every row is -inf
            shifted = priv - top  # (..., m, V)
        else:
            shifted = priv + torch.where(mask, 0.0, -math.inf).unsqueeze(-1).to(priv.dtype)  # (..., m, V): padding -inf
            top = shifted.amax(-2, keepdim=True).nan_to_num_(neginf=0.0)  # (..., 1, V)
            shifted.sub_(top)
        private = torch.matmul(weight.to(priv.dtype).unsqueeze(-2), shifted.exp_())  # (..., 1, V)
        log_private = private.log_().add_(top).squeeze(-2)  # (..., V): log sum_i (lam_i / k) p_i
        out = torch.logaddexp(public_weight.log().to(pub.dtype) + pub, log_private)  # (..., V)
        out = torch.where(count > 0, out, pub)
        diagnostics = {"lam": lam.to(torch.float32)}
        if realised_divergence:
            diagnostics["divergence"] = torch.where(mask, divergence, 0.0)
        return MechanismStep(out, diagnostics)

    def event(self, *, betas: Mapping[str, float]) -> dict[str, RdpEvent]:
        """{group: RdpEvent(alpha, r_i)} for one generated token; m = len(betas) groups."""
        if not betas:
            raise InvalidParameterError("betas must name at least one privacy group")
        m = len(betas)
        return {
            unit: RdpEvent(self.alpha, dp_fusion_rdp_per_token(alpha=self.alpha, beta=check_nonnegative(f"beta[{unit}]", b), groups=m))
            for unit, b in betas.items()
        }
