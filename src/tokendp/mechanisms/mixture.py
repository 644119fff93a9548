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
from tokendp.divergence import Mollification, mollify_checked, normalisation_bound
from tokendp.errors import InvalidParameterError
from tokendp.mechanisms._float import SAMPLER_RELATIVE, UNIT
from tokendp.mechanisms.base import log_softmax_at

__all__ = ["MixedRelease", "RowSearch", "average_rows", "mollified_average", "release_allowance", "search_rows"]

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


@dataclass(frozen=True)
class RowSearch:
    """:func:`search_rows`' answer for the k rows a mask selects, compacted to width w (the
    largest k over the batch where reads are free, m on accelerators)."""

    found: Mollification  # lam, divergence, norm (..., w); ratios (..., w, V); log_q (..., V)
    rows: Tensor  # (..., w) int64: which of the m rows each searched row is
    mask: Tensor  # (..., w) bool: a row averaged (False: a stand-in that the compaction added)
    same: Tensor  # (..., w) bool: the row's logits equal the public row's (its ratios are exactly 1)
    count: Tensor  # (..., 1) int64: k, the number of rows averaged
    groups: int  # m

    def expand(self, values: Tensor) -> Tensor:
        """``values # (..., w)`` of the searched rows -> ``# (..., m)``, 0 for rows not averaged."""
        values = torch.where(self.mask, values, 0)
        return values.new_zeros((*values.shape[:-1], self.groups)).scatter_(-1, self.rows, values)

    def gather(self, values: Tensor) -> Tensor:
        """``values # (..., m)`` per row -> ``# (..., w)`` for the searched rows."""
        return values.gather(-1, self.rows)


def search_rows(
    logits: Tensor,  # (..., 1+m, V), row 0 public
    *,
    alpha: float,
    caps: Tensor,  # (..., m) float64: each averaged row's cap, finite and >= 0 (the caller's to check)
    mask: Tensor,  # (..., m) bool: the rows averaged
    temperature: float,
    public_caps: Tensor | None = None,  # (..., m) float64: public caps for the float32 decision
    max_lam: Tensor | None = None,  # (..., m) float64 in (0, 1]: public weight ceilings (None: 1)
) -> RowSearch:
    """lam_i = mollify(p_i, p_pub, cap_i) for the rows averaged (p_i, p_pub softmaxes at
    ``temperature``), with mollify's rigorous divergence bound at each lam and the q and e that
    :func:`average_rows` forms the release from.

    A row whose logits equal the public row's gets the public log-probabilities exactly,
    whatever rounding a batched log_softmax gives rows at other positions (so its ratios are
    exactly 1). Where reads are free (the CPU, :mod:`tokendp._device`), only masked rows are
    searched, compacted to the largest k over the batch (masked rows first, in order); on
    accelerators all m rows are searched in the same order (reading k back would be a host
    synchronisation). Each row's lam depends on its own row, the public row and its cap only
    (:func:`~tokendp.divergence.mollify_detailed`), so compacting changes nothing but the work.
    ``public_caps`` (default ``caps``): what decides whether the search may run in float32;
    it must be public when the caps are not (:func:`~tokendp.divergence.mollify_checked`).
    ``max_lam`` (public): each row is first mixed toward the public one, p_i <- L_i p_i +
    (1 - L_i) p_pub where L_i < 1, so that the weights found are at most L_i of the original rows
    (the lam found applies to the mixed row); a row equal to the public row stays it exactly.
    """
    m = logits.shape[-2] - 1
    logp = log_softmax_at(logits, temperature)  # (..., 1+m, V)
    pub, priv = logp[..., 0, :], logp[..., 1:, :]  # (..., V), (..., m, V)
    same = (logits[..., 1:, :] == logits[..., :1, :]).all(-1, keepdim=True)  # (..., m, 1)
    if max_lam is not None:
        ceiling = max_lam.to(device=priv.device, dtype=torch.float64).unsqueeze(-1)  # (..., m, 1)
        mixed = torch.logaddexp(priv + ceiling.log().to(priv.dtype),
                                pub.unsqueeze(-2) + torch.log1p(-ceiling).to(priv.dtype))  # (..., m, V)
        priv = torch.where(ceiling < 1, mixed, priv)
    priv = torch.where(same, pub.unsqueeze(-2), priv)
    count = mask.sum(-1, keepdim=True)  # (..., 1): k
    if _device.reads_are_free(count):  # the largest k: a free read on the CPU
        width = max(int(count.max()), 1) if count.numel() else 1
    else:
        width = m
    rows = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True)[..., :width]  # (..., w): masked first
    sub_priv = priv.gather(-2, rows.unsqueeze(-1).expand(*rows.shape, priv.shape[-1]))  # (..., w, V)
    sub_public = None if public_caps is None else public_caps.gather(-1, rows)
    found = mollify_checked(sub_priv, pub, alpha=alpha, cap=caps.gather(-1, rows), public_cap=sub_public)
    return RowSearch(found, rows, mask.gather(-1, rows), same.squeeze(-1).gather(-1, rows), count, m)


def average_rows(search: RowSearch, lam: Tensor) -> Tensor:
    """mean over the k averaged rows of (lam_i p_i + (1 - lam_i) p_pub) -> log-probabilities
    ``# (..., V)`` float64, for ``lam # (..., w)`` float64 (0 where a row is not averaged), each
    a weight mollify certified or 0.

    Formed as p_pub (sum_i (1 - lam_i)/k + sum_i (lam_i c_i / k) e_i) from mollify's own q and e
    (a sum of non-negative terms, so no support is lost) and renormalised in log space. A row
    with lam_i = 0 enters with weight exactly 0, whatever its ratios (they are finite). No row
    averaged: p_pub.
    """
    found, count = search.found, search.count.clamp_min(1)
    weight = lam * found.norm / count  # (..., w): lam_i c_i / k
    public_weight = (torch.where(search.mask, 1.0 - lam, 0.0) / count).sum(-1, keepdim=True)  # (..., 1)
    mixed = torch.matmul(weight.unsqueeze(-2), found.ratios).squeeze(-2).add_(public_weight)  # (..., V): P_mix / Q
    out = torch.log_softmax(found.log_q + mixed.log_(), dim=-1)  # (..., V) float64
    return torch.where(search.count > 0, out, torch.log_softmax(found.log_q, dim=-1))


def mollified_average(
    logits: Tensor,  # (..., 1+m, V), row 0 public
    *,
    alpha: float,
    caps: Tensor,  # (..., m) float64: each averaged row's symmetric divergence cap, finite and >= 0
    mask: Tensor,  # (..., m) bool: the rows averaged (k of them); no row: the public distribution
    temperature: float,
) -> MixedRelease:
    """mean over the k masked rows of (lam_i p_i + (1 - lam_i) p_pub), in float64.

    p_pub and p_i are softmaxes at ``temperature``; lam_i = mollify(p_i, p_pub, cap_i - k A)
    (:func:`search_rows`), released by :func:`average_rows`; the allowance still counts m rows.

    ``caps`` are the caller's to validate where it builds them (DPFusion and PMixED do, from
    their parameters): where reads are free a cap that is negative or not finite raises
    InvalidParameterError; on accelerators it is not read back but masked to 0 (lam = 0, the
    public distribution for that row, which meets any cap). Caps of rows not averaged are ignored.
    """
    m = logits.shape[-2] - 1
    count = mask.sum(-1, keepdim=True)  # (..., 1): k
    allowance = count * release_allowance(alpha, groups=m, vocab=logits.shape[-1])  # (..., 1)
    valid = (torch.isfinite(caps) & (caps >= 0)) | ~mask  # (..., m): rows not averaged are never read
    if _device.reads_are_free(valid) and not bool(valid.all()):
        raise InvalidParameterError("caps must be finite and >= 0 (alpha * beta); pass a non-negative beta")
    cap = torch.where(mask & valid, caps - allowance, 0.0).clamp_min(0.0)  # (..., m)
    search = search_rows(logits, alpha=alpha, caps=cap, mask=mask, temperature=temperature)
    lam = torch.where(search.mask, search.found.lam, 0.0).to(torch.float64)  # (..., w)
    out = average_rows(search, lam)
    return MixedRelease(out, search.expand(lam).to(torch.float32), search.expand(search.found.divergence))
