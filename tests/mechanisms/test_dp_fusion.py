"""DP-Fusion: the per-token RDP bound on neighbouring documents, padding and batching."""

from __future__ import annotations

import math

import pytest
import torch
from distributions import logits_batch, renyi64, renyi_exact

from tokendp.accounting import dp_fusion_rdp_per_token
from tokendp.accounting.events import RdpEvent
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.mechanisms import DPFusion

pytestmark = pytest.mark.usefixtures("step_path")  # every test on the CPU path and the accelerator path (tests/host_reads.py)


def _bound(alpha: float, beta: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """r_i = log(1 + (exp((alpha-1) alpha beta_i) - 1) / m) / (alpha - 1), float64 (docs/privacy.md, DP-Fusion)."""
    return torch.log1p(torch.expm1((alpha - 1) * alpha * beta.double()) / groups.double()) / (alpha - 1)


@pytest.mark.parametrize("alpha", [1.5, 2.0, 7.0])
def test_rdp_bound_on_neighbours(alpha: float) -> None:
    """Neighbour for group i: its row replaced by the public row. 1,000 documents x 4 slots per
    order (about 3,750 real groups), with V = 2 and V = 64: over 20,000 group cases in total."""
    gen = torch.Generator().manual_seed(int(alpha * 10))
    for vocab in (2, 64):
        n, m = 500, 4
        logits = logits_batch(n, 1 + m, vocab, gen)  # (n, 1+m, V)
        betas = torch.exp(torch.empty(n, m).uniform_(math.log(1e-4), math.log(2.0), generator=gen)) / alpha
        mask = torch.rand(n, m, generator=gen) < 0.8
        mask[:, 0] = True
        mech = DPFusion(alpha=alpha)
        out = mech.step(logits, betas=betas, group_mask=mask).logprobs  # (n, V)
        groups = mask.sum(-1, keepdim=True).expand(n, m)
        for i in range(m):
            neighbour = logits.clone()
            neighbour[:, 1 + i] = logits[:, 0]
            out_n = mech.step(neighbour, betas=betas, group_mask=mask).logprobs
            bound = _bound(alpha, betas[:, i], groups[:, i])
            real = mask[:, i]
            for d in (renyi64(out, out_n, alpha), renyi64(out_n, out, alpha)):
                # slack: only the float64 reference's own rounding (V <= 64)
                excess = (d - bound * (1 + 1e-9) - 1e-14)[real]
                assert excess.max().item() <= 0, f"group {i}: bound exceeded by {excess.max().item()}"


def test_single_group_bound_is_tight() -> None:
    gen = torch.Generator().manual_seed(5)
    logits = logits_batch(400, 2, 32, gen)[:, :, :] * 3
    betas = torch.full((400, 1), 0.01)
    out = DPFusion(alpha=2.0).step(logits, betas=betas)
    d = out.diagnostics["divergence"][:, 0]
    lam = out.diagnostics["lam"][:, 0]
    binding = (lam > 1e-3) & (lam < 1)  # tiny lam: the float32 mixture cannot resolve it
    assert binding.any()
    assert torch.allclose(d[binding].double(), torch.full_like(d[binding].double(), 0.02), rtol=1e-3)


def test_padding_and_batching_match_exactly() -> None:
    gen = torch.Generator().manual_seed(6)
    logits = logits_batch(6, 4, 50, gen)  # (6, 1+3, V)
    betas = torch.full((6, 3), 0.05)
    mech = DPFusion(alpha=2.0)
    plain = mech.step(logits, betas=betas).logprobs
    padded_logits = torch.cat((logits, logits[:, :1].expand(6, 2, 50), ), 1)  # two padding rows
    padded = mech.step(padded_logits, betas=torch.full((6, 5), 0.05), group_mask=torch.tensor([[True] * 3 + [False] * 2] * 6))
    assert torch.equal(padded.logprobs, plain)
    assert torch.equal(padded.diagnostics["lam"][:, 3:], torch.zeros(6, 2))
    singles = torch.cat([mech.step(logits[j], betas=betas[j]).logprobs.unsqueeze(0) for j in range(6)])
    # mollify picks float32 or float64 passes once per call, so a batch can differ from its
    # members by rounding (mixing weights agree to ~1e-8)
    torch.testing.assert_close(singles, plain, rtol=1e-5, atol=1e-6)
    empty = mech.step(logits, betas=betas, group_mask=torch.zeros(6, 3, dtype=torch.bool)).logprobs
    torch.testing.assert_close(empty, torch.log_softmax(logits[:, 0].double(), -1), rtol=0, atol=1e-6)


def test_skipping_the_realised_divergence_changes_nothing_else() -> None:
    gen = torch.Generator().manual_seed(8)
    logits = logits_batch(5, 4, 40, gen)  # (5, 1+3, V)
    mech = DPFusion(alpha=3.0)
    full = mech.step(logits, betas=torch.full((5, 3), 0.02))
    lean = mech.step(logits, betas=torch.full((5, 3), 0.02), realised_divergence=False)
    assert torch.equal(full.logprobs, lean.logprobs) and torch.equal(full.diagnostics["lam"], lean.diagnostics["lam"])
    assert "divergence" in full.diagnostics and "divergence" not in lean.diagnostics


def test_event_is_public_and_validated() -> None:
    events = DPFusion(alpha=3.0).event(betas={"PERSON": 0.01, "DATE": 0.0})
    assert events["PERSON"] == RdpEvent(3.0, dp_fusion_rdp_per_token(alpha=3.0, beta=0.01, groups=2))
    want = math.log1p(math.expm1(2 * 0.03) / 2) / 2
    assert want <= events["PERSON"].rdp <= want * (1 + 1e-13)  # the accountant's bound, rounded up
    assert events["DATE"].rdp == 0.0
    assert DPFusion(alpha=2.0).event(betas={"X": 0.02})["X"].rdp == pytest.approx(0.04)
    with pytest.raises(InvalidParameterError):
        DPFusion(alpha=1.0)
    with pytest.raises(InvalidParameterError):
        DPFusion().event(betas={"X": -1.0})
    with pytest.raises(InvalidInputError):
        DPFusion().step(torch.zeros(3, 10), betas=torch.zeros(4))


@pytest.mark.parametrize("threads", [1, 2])
def test_released_distribution_meets_the_bound_exactly(threads: int) -> None:
    """The released distributions of neighbours (group i's row replaced by the public row),
    recomputed with exact sums, never exceed r_i: orders 1.5 to 4, m = 1 to 6, V = 2 to
    151,936, 1 and 2 threads. At m = 1 the bound is tight, so rounding of the release shows."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(70 + threads)
        worst = -math.inf
        for m, vocab, n in ((1, 2, 60), (1, 64, 40), (3, 1000, 10), (6, 20_000, 2), (2, 151_936, 1)):
            logits = logits_batch(n, 1 + m, vocab, gen) if vocab < 151_936 else _lm_rows(1 + m, vocab, gen)
            for alpha in (1.5, 2.0, 4.0):
                betas = torch.exp(torch.empty(n, m).uniform_(math.log(1e-4), 0.0, generator=gen)) / alpha
                mech = DPFusion(alpha=alpha)
                out = mech.step(logits, betas=betas).logprobs  # (n, V) float64
                for i in range(m):
                    neighbour = logits.clone()
                    neighbour[:, 1 + i] = logits[:, 0]
                    out_n = mech.step(neighbour, betas=betas).logprobs
                    bound = _bound(alpha, betas[:, i], torch.full((n,), m))
                    for d in (renyi_exact(out, out_n, alpha), renyi_exact(out_n, out, alpha)):
                        worst = max(worst, (d / bound).max().item())
        assert worst <= 1.0, f"max D / r_i - 1 = {worst - 1}"
    finally:
        torch.set_num_threads(before)


def _lm_rows(rows: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    """(1, rows, V) LM-like logits: a shared base, private rows that favour a few tokens."""
    base = torch.randn(vocab, generator=gen) * 2.5
    logits = base + 0.5 * torch.randn(rows, vocab, generator=gen)
    logits[0] = base
    logits[1:, :3] += 12.0
    return logits.unsqueeze(0)
