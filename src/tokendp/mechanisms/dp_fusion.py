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
  Rounding: the mixture is formed in float64 from exactly the distributions mollify certified,
  as a sum of non-negative terms, each group's cap lowered by k times the release allowance of
  :func:`release_allowance` (k real groups), so the released distribution, not only lam, meets
  r_i under exact arithmetic on every machine.
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
from tokendp.divergence import mollify_detailed, normalisation_bound
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.mechanisms.base import MechanismStep, check_logits, check_nonnegative, check_positive, log_softmax_at

__all__ = ["DPFusion", "release_allowance"]

_U = 2.0**-53


def release_allowance(alpha: float, *, groups: int, vocab: int) -> float:
    """A, the most the rounding of the released distribution can add to D_alpha between
    neighbours (docs/privacy.md, "Floating point"); each cap is lowered by k A for k real groups.

    The release is Q (sum_i (1 - lam_i)/k + sum_i (lam_i c_i/k) e_i), a sum of non-negative float64
    terms, each c_i e_i within s = ``normalisation_bound(vocab)`` of the certified ratio. Each
    released probability is then within
    eta = s + (2m + 16) U + 16 TAU 2000 of the exact mixture (2000 bounds |log p| of any positive
    probability formed here; log space keeps 2000 TAU of relative precision). Perturbing both
    outputs of a pair by factors within 1 +- eta moves D_a by at most
    (2a - 1)/(a - 1) log((1 + eta)/(1 - eta)); r_i(c) grows at least 1/k per unit of c, so
    lowering c by k A covers it.
    """
    tau = 8.0 * _U
    eta = normalisation_bound(vocab) + (2 * groups + 16) * _U + 16.0 * tau * 2000.0
    return (2.0 * alpha - 1.0) / (alpha - 1.0) * math.log((1.0 + eta) / (1.0 - eta))


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
        count = mask.sum(-1, keepdim=True)  # (..., 1): k, public (which groups a document has)
        allowance = count * release_allowance(self.alpha, groups=m, vocab=logits.shape[-1])  # (..., 1)
        cap = torch.where(mask, self.alpha * betas.to(torch.float64) - allowance, 0.0).clamp_min(0.0)  # (..., m)
        found = mollify_detailed(priv, pub, alpha=self.alpha, cap=cap)
        lam = torch.where(mask, found.lam, 0.0)  # (..., m)
        lam64 = lam.to(torch.float64)
        weight = lam64 * found.norm / count.clamp_min(1)  # (..., m): lam_i c_i / k
        public_weight = (torch.where(mask, 1.0 - lam64, 0.0) / count.clamp_min(1)).sum(-1, keepdim=True)  # (..., 1)
        mixed = torch.matmul(weight.unsqueeze(-2), found.ratios).squeeze(-2).add_(public_weight)  # (..., V): P_mix / Q
        out = torch.log_softmax(found.log_q + mixed.log_(), dim=-1)  # (..., V) float64
        out = torch.where(count > 0, out, torch.log_softmax(found.log_q, dim=-1))
        diagnostics = {"lam": lam.to(torch.float32)}
        if realised_divergence:
            diagnostics["divergence"] = torch.where(mask, found.divergence, 0.0)
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
