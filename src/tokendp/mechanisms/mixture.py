"""Averages of mollified rows, released in float64: the shared core of DP-Fusion and PMixED.

Rows 1..m of the logits are mixed toward row 0 (public) within their caps by
:func:`tokendp.divergence.mollify_detailed`, and the average over the rows a mask selects is
released. The claim each mechanism makes rests on three facts this module guarantees on every
machine (docs/privacy.md, "Floating point"): every lambda meets its cap exactly; a row whose
logits equal the public row's mixes exactly the public distribution; and the released
distribution is the exact average of the certified mixtures up to the rounding that
:func:`release_allowance` covers (each cap is lowered by k times it, k rows averaged).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

import tokendp._device as _device
from tokendp.divergence import mollify_checked, normalisation_bound
from tokendp.errors import InvalidParameterError
from tokendp.mechanisms._float import SAMPLER_RELATIVE, UNIT
from tokendp.mechanisms.base import log_softmax_at

__all__ = ["MixedRelease", "mollified_average", "release_allowance"]

def release_allowance(alpha: float, *, groups: int, vocab: int) -> float:
    """A, the most the rounding of the released distribution can add to D_alpha between
    neighbours (docs/privacy.md, "Floating point"); each cap is lowered by k A for k real groups.

    The release is Q (sum_i (1 - lam_i)/k + sum_i (lam_i c_i/k) e_i), a sum of non-negative float64
    terms, each c_i e_i within s = ``normalisation_bound(vocab)`` of the certified ratio. Each
    released probability is then within
    eta = s + (2m + 16) U + 16 TAU 2000 of the exact mixture (2000 bounds |log p| of any positive
    probability formed here; log space keeps 2000 TAU of relative precision), and the sampler's
    weights within 2^-43 more (tokendp.sampling). Perturbing both
    outputs of a pair by factors within 1 +- eta moves D_a by at most
    (2a - 1)/(a - 1) log((1 + eta)/(1 - eta)); r_i(c) grows at least 1/k per unit of c, so
    lowering c by k A covers it.
    """
    tau = 8.0 * UNIT
    eta = normalisation_bound(vocab) + (2 * groups + 16) * UNIT + 16.0 * tau * 2000.0
    eta = (1.0 + eta) * (1.0 + SAMPLER_RELATIVE) - 1.0  # and the sampler's weights (tokendp.sampling)
    return (2.0 * alpha - 1.0) / (alpha - 1.0) * math.log((1.0 + eta) / (1.0 - eta))


@dataclass(frozen=True)
class MixedRelease:
    """The released log-probabilities and the per-row diagnostics (never the guarantee)."""

    logprobs: Tensor  # (..., V) float64
    lam: Tensor  # (..., m) float32: 0 for rows not averaged
    divergence: Tensor  # (..., m) float64: a certified upper bound at lam (0 for rows not averaged)


def mollified_average(
    logits: Tensor,  # (..., 1+m, V), row 0 public
    *,
    alpha: float,
    caps: Tensor,  # (..., m) float64: each averaged row's symmetric divergence cap, finite and >= 0
    mask: Tensor,  # (..., m) bool: the rows averaged (k of them); no row: the public distribution
    temperature: float,
) -> MixedRelease:
    """mean over the k masked rows of (lam_i p_i + (1 - lam_i) p_pub), in float64.

    p_pub and p_i are softmaxes at ``temperature``; lam_i = mollify(p_i, p_pub, cap_i - k A).
    Formed as p_pub (sum_i (1 - lam_i)/k + sum_i (lam_i c_i / k) e_i) from mollify's own q and
    e (a sum of non-negative terms, so no support is lost) and renormalised in log space.

    Where reads are free (the CPU, :mod:`tokendp._device`), only masked rows are searched: the
    rows are compacted to the largest k over the batch (masked rows first, in order), so the
    search costs k, not m, rows per sequence (PMixED samples q N of N members on average). On
    accelerators all m rows are searched in the same order (reading k back would be a host
    synchronisation). Each row's lam depends on its own row, the public row and its cap only
    (:func:`~tokendp.divergence.mollify_detailed`), so compacting changes nothing but the work;
    the allowance still counts m rows.

    ``caps`` are the caller's to validate where it builds them (DPFusion and PMixED do, from
    their parameters): where reads are free a cap that is negative or not finite raises
    InvalidParameterError; on accelerators it is not read back but masked to 0 (lam = 0, the
    public distribution for that row, which meets any cap). Caps of rows not averaged are ignored.
    """
    m = logits.shape[-2] - 1
    logp = log_softmax_at(logits, temperature)  # (..., 1+m, V)
    pub, priv = logp[..., 0, :], logp[..., 1:, :]  # (..., V), (..., m, V)
    # A row equal to the public one (a neighbour's row) gets its log-probabilities exactly,
    # whatever rounding a batched log_softmax gives rows at other positions.
    same = (logits[..., 1:, :] == logits[..., :1, :]).all(-1, keepdim=True)  # (..., m, 1)
    priv = torch.where(same, pub.unsqueeze(-2), priv)
    count = mask.sum(-1, keepdim=True)  # (..., 1): k
    allowance = count * release_allowance(alpha, groups=m, vocab=logits.shape[-1])  # (..., 1)
    valid = (torch.isfinite(caps) & (caps >= 0)) | ~mask  # (..., m): rows not averaged are never read
    if _device.reads_are_free(valid) and not bool(valid.all()):
        raise InvalidParameterError("caps must be finite and >= 0 (alpha * beta); pass a non-negative beta")
    cap = torch.where(mask & valid, caps - allowance, 0.0).clamp_min(0.0)  # (..., m)
    if _device.reads_are_free(count):  # the largest k: a free read on the CPU
        width = max(int(count.max()), 1) if count.numel() else 1
    else:
        width = m
    rows = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True)[..., :width]  # (..., k): masked first
    sub_mask = mask.gather(-1, rows)  # (..., k)
    sub_priv = priv.gather(-2, rows.unsqueeze(-1).expand(*rows.shape, priv.shape[-1]))  # (..., k, V)
    found = mollify_checked(sub_priv, pub, alpha=alpha, cap=cap.gather(-1, rows))
    sub_lam = torch.where(sub_mask, found.lam, 0.0).to(torch.float64)  # (..., k)
    weight = sub_lam * found.norm / count.clamp_min(1)  # (..., k): lam_i c_i / k
    public_weight = (torch.where(sub_mask, 1.0 - sub_lam, 0.0) / count.clamp_min(1)).sum(-1, keepdim=True)  # (..., 1)
    mixed = torch.matmul(weight.unsqueeze(-2), found.ratios).squeeze(-2).add_(public_weight)  # (..., V): P_mix / Q
    out = torch.log_softmax(found.log_q + mixed.log_(), dim=-1)  # (..., V) float64
    out = torch.where(count > 0, out, torch.log_softmax(found.log_q, dim=-1))
    lam = torch.zeros(mask.shape, dtype=torch.float64, device=mask.device).scatter_(-1, rows, sub_lam)  # (..., m)
    divergence = torch.zeros_like(lam).scatter_(-1, rows, torch.where(sub_mask, found.divergence, 0.0))
    return MixedRelease(out, lam.to(torch.float32), divergence)
