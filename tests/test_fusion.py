"""tokendp.fusion: the cap the mechanism enforces is exactly the one the ledger charges for."""

from __future__ import annotations

import math

import torch

from tokendp.accounting import dp_fusion_epsilon
from tokendp.fusion import FusionJob, prepare_documents
from tokendp.text.contexts import DocumentContexts, GroupInfo


def test_the_mechanism_gets_the_accounted_beta_exactly():
    """A float32 beta rounds exp(-1) up by 2.5e-8 of itself: the mechanism would then allow a
    divergence above the cap the certificate is computed for."""
    beta = math.exp(-1.0)
    assert float(torch.tensor(beta, dtype=torch.float32)) > beta
    ctx = DocumentContexts(((1, 2, 3), (1, 4, 3)), (GroupInfo("PERSON", 1, 1),), 3, (1, 4, 3))
    job = FusionJob("dp-fusion", 1e-5, prepare_documents("dp-fusion", 2.0, 1e-5, [ctx], [10], beta=beta, epsilon=None))
    seen = {}
    job.mechanisms[0].step = lambda logits, betas, **kw: seen.setdefault("betas", betas)
    job.step(torch.zeros(1, 2, 5), torch.tensor([0]), 1.0)
    assert seen["betas"].dtype == torch.float64 and seen["betas"].item() == beta
    assert [g.epsilon for g in job.documents[0].groups] == [
        dp_fusion_epsilon(alpha=2.0, beta=beta, groups=1, max_tokens=10, delta=1e-5)]
