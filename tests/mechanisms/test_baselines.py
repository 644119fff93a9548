"""InvisibleInk, Amin et al., DP-Decoding, DP-Prompt and the references: declared per-step bounds
recomputed independently in float64 on batches of random and adversarial logits."""

from __future__ import annotations

import math

import pytest
import torch
from distributions import logits_batch, max_log_ratio64, renyi64

from tokendp.accounting import amin_switch_discrete_noise, amin_switch_sensitivity
from tokendp.accounting.events import PureDpEvent, ZcdpEvent
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.mechanisms import (
    AminEtAl,
    DPDecoding,
    DPPrompt,
    InvisibleInk,
    NoGuaranteeError,
    Original,
    Public,
    SparseVectorSwitch,
)

ORDERS = (1.5, 2.0, 5.0, 20.0)


def _scaled(logits: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Keep -inf out of logits (softmax inputs from a model are finite) and vary their scale."""
    scale = torch.exp(torch.empty(logits.shape[0], 1, 1).uniform_(math.log(0.1), math.log(20.0), generator=gen))
    return logits.clamp_min(-1e4) * scale


@pytest.mark.parametrize("vocab,top_k", [(2, 1), (64, 5), (64, None)])
def test_invisibleink_zcdp_bound(vocab: int, top_k: int | None) -> None:
    """Replace-by-null neighbours: 1,000 cases x B = 4 references per setting (12,000 in total)."""
    gen = torch.Generator().manual_seed(vocab + (top_k or 0))
    n, refs = 1000, 4
    logits = _scaled(logits_batch(n, 1 + refs, vocab, gen), gen)
    clip = torch.exp(torch.empty(1).uniform_(math.log(0.1), math.log(10.0), generator=gen)).item()
    tau = 0.5 + torch.rand(1, generator=gen).item()
    mech = InvisibleInk(clip=clip, temperature=tau, top_k=top_k)
    out = mech.step(logits).logprobs
    rho = mech.event(batch_size=refs)["reference"].rho
    assert rho == pytest.approx(clip**2 / (2 * refs**2 * tau**2))
    for i in range(refs):
        neighbour = logits.clone()
        neighbour[:, 1 + i] = logits[:, 0]
        out_n = mech.step(neighbour).logprobs
        for a in ORDERS:
            for d in (renyi64(out, out_n, a), renyi64(out_n, out, a)):
                assert d.max().item() <= a * rho * (1 + 1e-4) + 1e-6


def test_invisibleink_topk_plus_and_zero_clip() -> None:
    gen = torch.Generator().manual_seed(1)
    logits = logits_batch(200, 5, 40, gen).clamp_min(-1e4)
    out = InvisibleInk(clip=0.0, temperature=1.0, top_k=3).step(logits)
    pub = logits[:, 0]
    top = pub.topk(3, -1).indices
    assert bool(torch.isfinite(out.logprobs.gather(-1, top)).all())  # the public top-k is always kept
    kept = torch.isfinite(out.logprobs)
    assert torch.equal(kept.sum(-1), out.diagnostics["topk_plus_size"])
    public_only = torch.log_softmax(pub.double().masked_fill(~kept, -math.inf), -1)  # clip 0: the public model
    torch.testing.assert_close(out.logprobs, public_only)
    assert InvisibleInk(clip=0.0, temperature=1.0).event(batch_size=8) == {"reference": ZcdpEvent(0.0)}


def test_invisibleink_candidates_equal_the_full_vocabulary_formula() -> None:
    """Top-k+ computed on gathered candidate columns equals the textbook full-V formula,
    including ties at the threshold and rows whose sets differ in size."""
    gen = torch.Generator().manual_seed(7)
    logits = (logits_batch(300, 5, 64, gen).clamp_min(-1e4) * 3).round()  # rounding makes ties
    for clip, k in ((0.5, 1), (2.0, 5), (8.0, 20)):
        out = InvisibleInk(clip=clip, temperature=0.8, top_k=k).step(logits)
        pub = logits[:, 0].double()
        phi = pub + (logits[:, 1:].double() - pub.unsqueeze(1)).clamp(-clip, clip).mean(1)
        kth = pub.topk(k, -1).values[:, -1:]
        keep = pub >= kth - 2.0 * clip / 4
        want = torch.log_softmax((phi / 0.8).masked_fill(~keep, -math.inf), -1)
        assert torch.equal(out.diagnostics["topk_plus_size"], keep.sum(-1))
        assert torch.equal(torch.isfinite(out.logprobs), keep)
        torch.testing.assert_close(out.logprobs.double()[keep], want[keep], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("vocab", [2, 64])
def test_amin_zcdp_bound(vocab: int) -> None:
    """Replace-one neighbours (a private row replaced by another case's row): 3,000 x 2 x 2 cases."""
    gen = torch.Generator().manual_seed(vocab)
    n, refs = 3000, 3
    logits = _scaled(logits_batch(n, 1 + refs, vocab, gen), gen)
    mech = AminEtAl(clip=2.0, temperature=0.8)
    out = mech.step(logits).logprobs
    rho = mech.event(batch_size=refs)["reference"].rho
    for i in range(2):
        neighbour = logits.clone()
        neighbour[:, 1 + i] = logits.roll(1, 0)[:, 1 + i]
        out_n = mech.step(neighbour).logprobs
        for a in ORDERS:
            for d in (renyi64(out, out_n, a), renyi64(out_n, out, a)):
                assert d.max().item() <= a * rho * (1 + 1e-4) + 1e-6


@pytest.mark.parametrize("vocab", [2, 64])
def test_amin_switch_statistic_has_sensitivity_2c_over_b(vocab: int) -> None:
    """Replace-one neighbours, 3,000 x 3 cases: |s - s'| <= 2C/B for the switch's statistic."""
    gen = torch.Generator().manual_seed(10 + vocab)
    n, refs, clip = 3000, 3, 1.5
    logits = _scaled(logits_batch(n, 1 + refs, vocab, gen), gen)
    mech = AminEtAl(clip=clip, temperature=1.0)
    stat = mech.switch_statistic(logits).double()
    assert stat.shape == (n,) and bool((stat >= 0).all()) and bool((stat <= 2 * clip + 1e-5).all())
    bound = amin_switch_sensitivity(clip=clip, batch_size=refs)
    for i in range(refs):
        neighbour = logits.clone()
        neighbour[:, 1 + i] = logits.roll(1, 0)[:, 1 + i]
        gap = (mech.switch_statistic(neighbour).double() - stat).abs().max().item()
        assert gap <= bound + 2 * (refs + 4) * 2.0**-53 * clip  # 2C/B plus the float64 rounding the proof allows
    assert gap > 0.5 * bound  # the bound is not vacuous on these cases


def _amin_switch(n: int, *, c: int, threshold: float, clip: float = 1.0, refs: int = 3) -> AminEtAl:
    switch = SparseVectorSwitch(threshold=threshold, sensitivity=amin_switch_sensitivity(clip=clip, batch_size=refs),
                                epsilon=0.5, max_positives=c, num_texts=n, generator=torch.Generator().manual_seed(0))
    return AminEtAl(clip=clip, temperature=0.8, switch=switch)


def test_amin_switch_private_until_c_then_exactly_the_public_model() -> None:
    logits = logits_batch(64, 4, 30, torch.Generator().manual_seed(2)).clamp_min(-1e4)  # (N, 1+B, V)
    private = AminEtAl(clip=1.0, temperature=0.8).step(logits).logprobs
    public = torch.log_softmax(logits[:, 0].double() / 0.8, -1)
    mech = _amin_switch(64, c=2, threshold=-1e9)  # every open run answers "private"
    gen = torch.Generator().manual_seed(1)
    for t in range(5):
        step = mech.step(logits, generator=gen)
        assert bool(step.diagnostics["private"].all()) == (t < 2)
        torch.testing.assert_close(step.logprobs, private if t < 2 else public, rtol=0, atol=0)
    assert mech.switch.positives.tolist() == [2] * 64
    sw = mech.switch  # the noise it draws is the one tokendp account reports
    assert (sw.grid, sw.threshold_scale, sw.query_scale) == amin_switch_discrete_noise(
        svt_epsilon=0.5, max_private_tokens=2, clip=1.0, batch_size=3)
    rho = mech.event(batch_size=3)
    assert mech.events_per_text(batch_size=3) == [{"reference": PureDpEvent(0.5)}, rho, rho]
    never = _amin_switch(64, c=2, threshold=1e9).step(logits, generator=gen)
    assert not bool(never.diagnostics["private"].any())
    torch.testing.assert_close(never.logprobs, public, rtol=0, atol=0)


def test_amin_switch_validation() -> None:
    logits = logits_batch(4, 4, 10, torch.Generator().manual_seed(3))
    mech = _amin_switch(4, c=1, threshold=0.0)
    with pytest.raises(InvalidParameterError, match="Generator"):
        mech.step(logits)
    with pytest.raises(InvalidInputError):
        mech.step(logits[0], generator=torch.Generator())
    too_small = _amin_switch(4, c=1, threshold=0.0, refs=6)  # noise scaled for B = 6, run with B = 3
    with pytest.raises(InvalidParameterError, match="2C/B"):
        too_small.step(logits, generator=torch.Generator())
    with pytest.raises(InvalidParameterError, match="needs the switch"):
        AminEtAl(clip=1.0, temperature=1.0).events_per_text(batch_size=3)


@pytest.mark.parametrize("vocab", [2, 50, 151_936])
def test_dp_decoding_pure_dp(vocab: int) -> None:
    gen = torch.Generator().manual_seed(vocab)
    n = 10_000 if vocab < 1000 else 8
    logits = _scaled(logits_batch(n, 2, vocab, gen), gen)
    mech = DPDecoding(lam=0.3)
    eps = mech.event(vocab_size=vocab)["context"].epsilon
    assert eps == pytest.approx(math.log(1 + 0.3 * vocab / 0.7))
    out = mech.step(logits).logprobs
    out_n = mech.step(logits.roll(1, 0)).logprobs  # any other private context
    assert max_log_ratio64(out, out_n).max().item() <= eps + 1e-5
    assert torch.allclose(mech.step(logits[:3]).logprobs.exp().sum(-1), torch.ones(3, dtype=torch.float64))
    flat = DPDecoding(lam=0.0).step(logits[:2]).logprobs
    assert torch.allclose(flat, torch.full_like(flat, -math.log(vocab)))
    with pytest.raises(InvalidParameterError):
        DPDecoding(lam=1.0)


@pytest.mark.parametrize("vocab", [2, 64])
def test_dp_prompt_pure_dp(vocab: int) -> None:
    gen = torch.Generator().manual_seed(vocab + 1)
    logits = _scaled(logits_batch(10_000, 2, vocab, gen), gen)
    mech = DPPrompt(clip_width=3.0, temperature=1.5)
    assert mech.event() == {"context": PureDpEvent(4.0)}
    out = mech.step(logits).logprobs
    out_n = mech.step(logits.roll(1, 0)).logprobs
    assert max_log_ratio64(out, out_n).max().item() <= 4.0 + 1e-5


def test_references() -> None:
    logits = logits_batch(4, 3, 20, torch.Generator().manual_seed(3)).clamp_min(-1e4)
    assert torch.equal(Public().step(logits).logprobs, torch.log_softmax(logits[:, 0], -1))
    assert torch.equal(Original().step(logits, temperature=2.0).logprobs, torch.log_softmax(logits[:, 1] / 2.0, -1))
    assert Public().event() == {}
    with pytest.raises(NoGuaranteeError):
        Original().event()
