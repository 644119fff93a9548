"""PMixED (Flemings et al., NAACL 2024): private prediction from an ensemble, with a sound analysis.

Claim (docs/privacy.md, "PMixED").
  Adjacency: two corpora differ in the data of one shard. The ensemble has N members, one per
  shard slot (N public); a shard without data gives the base model itself (a LoRA adapter
  trained on nothing), so on the neighbour that member IS the public model.
  Unit: one shard (with ``--group-by user_id``, everything of one user).
  Per-token bound: each member joins the sample S independently with probability q; each
  member's distribution is mixed toward the public one within a symmetric divergence cap
  beta (lambda from that member's row, the public row and beta only, never from S); the
  output is the average over S, the public distribution when S is empty. Joint convexity of
  exp((alpha-1) D_alpha), over the subsets S and inside each S, gives RDP at order alpha
      r = log(1 + w (exp((alpha-1) beta) - 1)) / (alpha-1),   w = (1 - (1-q)^N) / N.
  Composition: RDP adds over the T tokens fixed before generation.
The published per-query bound (Thm. 5.1) does not hold, and re-solving beta from the realised
subset size (as the reference code does) is not covered by any proof: see docs/privacy.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from tokendp.accounting import pmixed_rdp_per_token
from tokendp.accounting._checks import check_order, check_rate
from tokendp.accounting.events import RdpEvent
from tokendp.errors import InvalidParameterError
from tokendp.mechanisms.base import MechanismStep, check_logits, check_nonnegative, check_positive
from tokendp.mechanisms.mixture import mollified_average

__all__ = ["PMixED"]


class PMixED:
    """PMixED's per-token step at Rényi order ``alpha`` with ensemble sample rate ``sample_rate``
    and per-member cap ``beta`` (see the module docstring for the claim)."""

    name = "pmixed"

    def __init__(self, *, alpha: float = 3.0, sample_rate: float, beta: float) -> None:
        self.alpha = check_order(alpha)
        self.sample_rate = check_rate("sample_rate", sample_rate)
        self.beta = check_nonnegative("beta", beta)

    def step(self, logits: Tensor, *, generator: torch.Generator, temperature: float = 1.0) -> MechanismStep:
        """Sample S (each member with probability q, from ``generator``), then :meth:`release`.

        ``logits`` (..., 1+N, V): row 0 the public model, rows 1..N the members (every member's
        row is computed every step, so that its cache stays current whether or not it is sampled).
        """
        check_logits(logits, min_rows=2)
        sampled = self.sample((*logits.shape[:-2], logits.shape[-2] - 1), generator=generator)
        return self.release(logits, sampled.to(logits.device), temperature=temperature)

    def sample(self, shape: Sequence[int], *, generator: torch.Generator) -> Tensor:
        """S for each sequence: ``shape`` (..., N) bool, each member in with probability q, independently."""
        return torch.rand(tuple(shape), generator=generator, device=generator.device, dtype=torch.float64) < self.sample_rate

    def release(self, logits: Tensor, sampled: Tensor, *, temperature: float = 1.0) -> MechanismStep:
        """The output for a given sample ``sampled`` (..., N) bool: the average over the sampled
        members of their mixtures with the public distribution, each within ``beta``.
        Diagnostics: "lam" (..., N) (0 where not sampled) and "sampled" (..., 1), |S|."""
        check_logits(logits, min_rows=2)
        temperature = check_positive("temperature", temperature)
        caps = torch.full(sampled.shape, self.beta, dtype=torch.float64, device=logits.device)
        found = mollified_average(logits, alpha=self.alpha, caps=caps, mask=sampled, temperature=temperature)
        count = sampled.sum(-1, keepdim=True).to(torch.float32)
        return MechanismStep(found.logprobs, {"lam": found.lam, "sampled": count})

    def event(self, *, shards: Sequence[str]) -> dict[str, RdpEvent]:
        """{shard: RdpEvent(alpha, r)} for one predicted token; N = len(shards) members."""
        if not shards:
            raise InvalidParameterError("shards must name at least one ensemble member")
        r = pmixed_rdp_per_token(alpha=self.alpha, beta=self.beta, ensemble_size=len(shards), sample_rate=self.sample_rate)
        return {shard: RdpEvent(self.alpha, r) for shard in shards}
