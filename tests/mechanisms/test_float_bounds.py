"""The per-token bounds of DP-Prompt, DP-Decoding, InvisibleInk and Amin et al. hold for the
distribution the sampler actually releases, computed exactly: the float64 log-weights of each step,
turned into the sampler's dyadic weights (tokendp.sampling.dyadic_weights), normalised in exact
rational arithmetic and compared in mpmath at 300 bits with no tolerance. Adversarial neighbours:
V = 2 and 5, logits up to the float32 range, ties, -inf, tiny and huge temperatures and clips."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from tokendp.mechanisms import AminEtAl, DPDecoding, DPPrompt, InvisibleInk
from tokendp.sampling import dyadic_weights

mpmath = pytest.importorskip("mpmath")
BIG = 3.0e38  # near the float32 maximum


def _released(logprobs: torch.Tensor) -> list:
    """Exact log-probabilities (mpmath, 300 bits) of the sampler's draw from one row ``# (V,)``;
    None where the token can never be drawn."""
    weights = [Fraction(m) * Fraction(2) ** e for m, e in dyadic_weights(logprobs.to(torch.float64))]
    total = sum(weights)
    with mpmath.workprec(300):
        return [mpmath.log(mpmath.mpf(w.numerator) / w.denominator) - mpmath.log(mpmath.mpf(total.numerator) / total.denominator)
                if w else None for w in weights]


def _log_ratios(a: torch.Tensor, b: torch.Tensor) -> list:
    """log P(y) - log P'(y) over the tokens either can draw (the supports must agree)."""
    pa, pb = _released(a), _released(b)
    assert [x is None for x in pa] == [x is None for x in pb], "support changed between neighbours"
    return [x - y for x, y in zip(pa, pb) if x is not None]


def _rows(vocab: int, gen: torch.Generator, n: int) -> torch.Tensor:
    """n adversarial logit rows ``# (n, V)`` float32: huge, tiny, tied, mixed signs, -inf."""
    kinds = [
        lambda: torch.randn(vocab, generator=gen) * 3,
        lambda: torch.randn(vocab, generator=gen) * 1e30,
        lambda: torch.where(torch.rand(vocab, generator=gen) < 0.5, BIG, -BIG),
        lambda: torch.zeros(vocab),
        lambda: torch.full((vocab,), 1e-30) * torch.arange(vocab),
        lambda: torch.cat((torch.tensor([BIG]), torch.full((vocab - 1,), -BIG))),
        lambda: torch.cat((torch.tensor([0.0]), torch.full((vocab - 1,), -80.0))),
        lambda: torch.randn(vocab, generator=gen) * 1e4,
    ]
    return torch.stack([kinds[i % len(kinds)]() for i in range(n)]).float()


PAIRS_PER_CASE = 24


@pytest.mark.parametrize("vocab", [2, 5])
@pytest.mark.parametrize(("width", "tau"), [(3.0, 1.5), (1e-3, 20.0), (30.0, 0.05), (0.7, 1e-4)])
def test_dp_prompt_released_ratio_is_within_two_w_over_tau(vocab, width, tau) -> None:
    gen = torch.Generator().manual_seed(vocab)
    mech = DPPrompt(clip_width=width, temperature=tau)
    eps = mpmath.mpf(mech.event()["context"].epsilon)
    rows = _rows(vocab, gen, 2 * PAIRS_PER_CASE)
    logits = torch.stack((torch.zeros_like(rows), rows), 1)  # (n, 2, V): row 1 is the private context
    out = mech.step(logits).logprobs
    worst = max(abs(r) for i in range(PAIRS_PER_CASE) for r in _log_ratios(out[2 * i], out[2 * i + 1]))
    assert worst <= eps
    assert worst >= eps * 0.45  # within a factor 2 of the bound (w/tau is attained with two tokens)


@pytest.mark.parametrize("vocab", [2, 5])
@pytest.mark.parametrize("lam", [1e-6, 0.3, 0.999])
def test_dp_decoding_released_ratio_is_within_its_epsilon(vocab, lam) -> None:
    gen = torch.Generator().manual_seed(vocab + 7)
    mech = DPDecoding(lam=lam)
    eps = mpmath.mpf(mech.event(vocab_size=vocab)["context"].epsilon)
    rows = _rows(vocab, gen, 2 * PAIRS_PER_CASE)
    logits = torch.stack((torch.zeros_like(rows), rows), 1)
    for tau in (1.0, 1e-3):
        out = mech.step(logits, temperature=tau).logprobs
        worst = max(abs(r) for i in range(PAIRS_PER_CASE) for r in _log_ratios(out[2 * i], out[2 * i + 1]))
        assert worst <= eps
        assert worst >= eps * 0.99  # one-hot private distributions nearly attain it


def _range(ratios: list):
    return max(ratios) - min(ratios)


@pytest.mark.parametrize("vocab", [2, 5])
@pytest.mark.parametrize(("clip", "tau", "refs"), [(2.0, 0.8, 3), (1e-3, 1.0, 2), (50.0, 0.01, 4)])
def test_invisibleink_released_range_is_within_2c_over_b_tau(vocab, clip, tau, refs) -> None:
    """Replace-by-null neighbours: the log-ratio ranges over at most 2C/(B tau), and (2C/(B tau))^2/8
    is at most the accounted rho."""
    gen = torch.Generator().manual_seed(vocab * 11 + refs)
    mech = InvisibleInk(clip=clip, temperature=tau)
    eta = 2 * mpmath.mpf(clip) / (refs * mpmath.mpf(tau))
    assert eta**2 / 8 <= mpmath.mpf(mech.event(batch_size=refs)["reference"].rho) * (1 + mpmath.mpf(2) ** -50)
    worst = 0
    for i in range(PAIRS_PER_CASE):
        logits = _rows(vocab, gen, 1 + refs)  # (1+B, V)
        if i % 3 == 0:
            logits[0] = torch.randn(vocab, generator=gen)  # a moderate public row, private extremes
        for j in range(refs):
            null = logits.clone()
            null[1 + j] = logits[0]
            out = mech.step(torch.stack((logits, null))).logprobs  # (2, V)
            r = _range(_log_ratios(out[0], out[1]))
            assert r <= eta
            worst = max(worst, r)
    assert worst >= eta * 0.45  # not vacuous


@pytest.mark.parametrize("vocab", [2, 5])
@pytest.mark.parametrize(("clip", "tau", "refs"), [(2.0, 0.8, 3), (1e-3, 1.0, 2), (50.0, 0.01, 4)])
def test_amin_released_range_is_within_4c_over_b_tau(vocab, clip, tau, refs) -> None:
    """Replace-one neighbours (a private row replaced by any other row)."""
    gen = torch.Generator().manual_seed(vocab * 13 + refs)
    mech = AminEtAl(clip=clip, temperature=tau)
    eta = 4 * mpmath.mpf(clip) / (refs * mpmath.mpf(tau))
    assert eta**2 / 8 <= mpmath.mpf(mech.event(batch_size=refs)["reference"].rho) * (1 + mpmath.mpf(2) ** -50)
    worst = 0
    for _ in range(PAIRS_PER_CASE):
        logits = _rows(vocab, gen, 2 + refs)  # (2+B, V): the last row replaces one reference
        for j in range(refs):
            other = logits[:-1].clone()
            other[1 + j] = logits[-1]
            out = mech.step(torch.stack((logits[:-1], other))).logprobs
            r = _range(_log_ratios(out[0], out[1]))
            assert r <= eta
            worst = max(worst, r)
    assert worst >= eta * 0.45  # not vacuous


def test_parameters_below_float64_resolution_are_refused() -> None:
    from tokendp.errors import InvalidParameterError

    logits = torch.zeros(1, 2, 4)
    with pytest.raises(InvalidParameterError, match="float64"):
        DPPrompt(clip_width=1e-14, temperature=1.0).step(logits)
    with pytest.raises(InvalidParameterError, match="float64"):
        DPDecoding(lam=1e-13).step(logits)
    with pytest.raises(InvalidParameterError, match="float64"):
        InvisibleInk(clip=1e-12, temperature=1.0).step(logits)
    assert DPDecoding(lam=0.0).step(logits).logprobs.exp().sum().item() == pytest.approx(1.0)
