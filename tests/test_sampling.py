"""The exact sampler: ratio-faithful dyadic weights (checked against mpmath), exact inversion on the
slow path (checked with rational arithmetic and by enumerating U's bits), the fast path's
decisions agreeing with it, and reproducibility."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from tokendp.errors import InvalidInputError
from tokendp.generation import make_generator
from tokendp.generation import sample as generation_sample
from tokendp.sampling import decide, dyadic_weights, fast_inversion, invert_exactly, sample, sample_to_host

pytestmark = pytest.mark.usefixtures("step_path")  # every test on the CPU path and the accelerator path (tests/host_reads.py)

mpmath = pytest.importorskip("mpmath")

ETA = 2.0**-43  # the documented bound on |W_y / exp(l_y - M) - 1|


def _exact(weights) -> list[Fraction]:
    """The weights as exact rationals."""
    return [Fraction(m) * Fraction(2) ** e for m, e in weights]


def _cdf(weights) -> list[Fraction]:
    w = _exact(weights)
    total = sum(w)
    out, run = [], Fraction(0)
    for x in w:
        run += x
        out.append(run / total)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_weights_are_ratio_faithful_however_small(dtype) -> None:
    """W_y = exp(l_y - M)(1 + eta), |eta| <= 2^-43, down to -5000, -1e6 and -3e30 (no underflow)."""
    values = [0.0, 1.5, -1.0, -103.5, -745.2, -800.0, -5000.0, -524287.0, -1e6, -3e30, -math.inf, 7.25]
    row = torch.tensor(values, dtype=dtype).to(torch.float64)
    weights = dyadic_weights(row)
    top = max(v for v in row.tolist())
    mpmath.mp.prec = 400
    for (mant, exp), value in zip(weights, row.tolist()):
        if value == -math.inf:
            assert mant == 0
            continue
        assert 2**52 <= mant < 2**53
        exact = mpmath.exp(mpmath.mpf(value) - mpmath.mpf(top))  # exact difference at 400 bits
        got = mpmath.mpf(mant) * mpmath.mpf(2) ** exp
        assert abs(got / exact - 1) <= ETA, (value, float(got / exact - 1))


def test_float64_extremes_use_rationals() -> None:
    row = torch.tensor([1e300, -1e300, 1e300 - 2**970], dtype=torch.float64)
    weights = dyadic_weights(row)
    mpmath.mp.prec = 2200
    for (mant, exp), value in zip(weights, row.tolist()):
        exact = mpmath.exp(mpmath.mpf(value) - mpmath.mpf(1e300))
        got = mpmath.mpf(mant) * mpmath.mpf(2) ** exp
        assert abs(got / exact - 1) <= ETA


def _bits_of(u: Fraction):
    """(a, n, more_bits) that present the binary expansion of u in [0, 1) to invert_exactly."""
    state = {"n": 53}

    def more() -> int:
        state["n"] += 62
        return math.floor(u * 2 ** state["n"]) % 2**62

    return math.floor(u * 2**53), 53, more


def test_a_token_at_minus_800_has_exactly_its_cell() -> None:
    """l = (0, -800): token 1's cell is [F_0, 1) with 1 - F_0 = W_1 / (W_0 + W_1) = e^-800 (1 +- 2^-42);
    U just below F_0 gives token 0 and U just above gives token 1 (the old sampler never drew it)."""
    weights = dyadic_weights(torch.tensor([0.0, -800.0], dtype=torch.float64))
    f0 = _cdf(weights)[0]
    mpmath.mp.prec = 200
    p1 = mpmath.mpf((1 - f0).numerator) / mpmath.mpf((1 - f0).denominator)
    want = mpmath.exp(-800) / (1 + mpmath.exp(-800))
    assert abs(p1 / want - 1) <= 2 * ETA
    assert invert_exactly(weights, *_bits_of(f0 - Fraction(1, 2**1400))) == 0
    assert invert_exactly(weights, *_bits_of(f0 + Fraction(1, 2**1400))) == 1
    # the fast path cannot tell these apart and hands them on
    u = torch.tensor([math.floor(f0 * 2**53)] * 2)
    _, status = fast_inversion(torch.tensor([[0.0, -800.0], [0.0, -5000.0]]), u)
    assert status.tolist() == [1, 1]


def _mass(weights, a: int, n: int, depth: int, out: dict) -> None:
    """Add to out[y] the measure of the U interval [a 2^-n, (a+1) 2^-n) that decide maps to y,
    splitting undecided intervals in two down to ``depth`` bits; the rest goes to out[None]."""
    y = decide(weights, a, n)
    if y is not None or n == depth:
        out[y] = out.get(y, Fraction(0)) + Fraction(1, 2**n)
        return
    _mass(weights, 2 * a, n + 1, depth, out)
    _mass(weights, 2 * a + 1, n + 1, depth, out)


@pytest.mark.parametrize("values", [[0.0, -0.7, -math.inf, -2.0], [-3.0, 0.0, -40.0, -0.1, -1000.0]])
def test_exact_path_gives_the_exact_distribution_by_enumeration(values) -> None:
    """Every U interval the exact path decides is mapped to the right token: enumerating U's bits
    to depth 64, the mass decided for y is within the undecided remainder of W_y / sum W."""
    weights = dyadic_weights(torch.tensor(values, dtype=torch.float64))
    probs = [w / sum(_exact(weights)) for w in _exact(weights)]
    out: dict = {}
    _mass(weights, 0, 0, 64, out)
    left = out.pop(None, Fraction(0))
    assert left <= Fraction(len(values) * 64, 2**64)
    for y, p in enumerate(probs):
        assert out.get(y, Fraction(0)) <= p <= out.get(y, Fraction(0)) + left
        if p == 0:
            assert y not in out


def test_exact_path_invariant_on_random_and_adversarial_uniforms() -> None:
    """Whatever bits invert_exactly consumes, the whole consumed U interval lies in the cell of
    the returned token; uniforms within 2^-300 of a boundary force several refinements."""
    weights = dyadic_weights(torch.tensor([-0.5, 0.0, -30.0, -745.5, -1.25], dtype=torch.float64))
    cdf = [Fraction(0)] + _cdf(weights)
    gen = torch.Generator().manual_seed(4)
    cases = [Fraction(int(torch.randint(0, 2**62, (1,), generator=gen)), 2**62) for _ in range(200)]
    cases += [b + s * Fraction(1, 2**300) for b in cdf[1:-1] for s in (-1, 1)]
    refinements = 0
    for u in cases:
        a, _, more = _bits_of(u)
        calls = []
        y = invert_exactly(weights, a, 53, lambda: calls.append(1) or more())
        refinements += len(calls)
        n = 53 + 62 * len(calls)
        lo = Fraction(math.floor(u * 2**n), 2**n)
        assert cdf[y] <= lo and lo + Fraction(1, 2**n) <= cdf[y + 1], (u, y)
    assert refinements >= 2 * (len(cdf) - 2) * 4  # the adversarial cases needed >= 4 refinements each


def test_fast_path_agrees_with_the_exact_path_and_hands_on_what_it_cannot_decide() -> None:
    gen = torch.Generator().manual_seed(0)
    lp = torch.log_softmax(torch.randn(3000, 9, generator=gen) * 5, -1)
    lp[::7, 3] = -math.inf
    fast = sample_to_host(lp, make_generator(11))
    exact = sample_to_host(lp, make_generator(11), _force_exact=True)
    assert torch.equal(fast, exact)
    assert not bool((fast[::7] == 3).any())
    # u at a cell boundary of the fast path's own sums: undecided (status 1)
    row = torch.tensor([[-0.5, -1.0, -2.0]], dtype=torch.float64)
    w = row.exp()
    boundary = w[0, :1].sum() / w.sum()
    u = torch.tensor([int(boundary.item() * 2**53)])
    _, status = fast_inversion(row, u)
    assert status.tolist() == [1]
    _, status = fast_inversion(row, torch.tensor([int(0.1 * 2**53)]))
    assert status.tolist() == [0]


def test_chi_square_on_both_paths_and_dtypes() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    rare = torch.tensor([0.4, 0.3, 0.0, 0.2, 0.0999, 0.0001], dtype=torch.float64)
    common = torch.tensor([0.45, 0.0, 0.3, 0.25], dtype=torch.float64)
    for probs, dtype, n, force in ((rare, torch.float32, 200_000, False), (rare, torch.float64, 200_000, False),
                                   (common, torch.float64, 3000, True)):
        logprobs = probs.log().to(dtype).expand(n, len(probs))  # (N, V)
        draws = sample_to_host(logprobs, make_generator(3), _force_exact=force)
        counts = torch.bincount(draws, minlength=len(probs)).double()
        assert counts[probs == 0].sum() == 0
        keep = probs > 0
        p_value = scipy_stats.chisquare(counts[keep].numpy(), (probs[keep] * n).numpy()).pvalue
        assert p_value > 1e-4, (dtype, force, p_value)


def test_unnormalised_and_extreme_rows_are_sampled_exactly() -> None:
    """Rows whose maximum is far from 0 (no float64 exp of them is finite and nonzero) go to the
    exact path and still follow the shifted distribution."""
    base = torch.tensor([0.0, -0.2, -1.0], dtype=torch.float64)
    rows = torch.stack([base + 5000.0, base - 5000.0, base])  # (3, V)
    n = 1500
    draws = sample_to_host(rows.repeat(n, 1), make_generator(1)).view(n, 3)  # (n, 3)
    freq = torch.stack([torch.bincount(draws[:, i], minlength=3) for i in range(3)]).double() / n
    want = torch.softmax(base, -1)
    assert (freq - want).abs().max().item() < 0.06  # 4.5 standard errors


def test_reproducible_with_a_seed_and_same_draws_for_float32_and_float64() -> None:
    lp = torch.log_softmax(torch.randn(64, 1000, generator=torch.Generator().manual_seed(2)), -1)
    a = sample(lp, make_generator(9))
    assert torch.equal(a, sample(lp, make_generator(9)))
    assert torch.equal(a, sample(lp.double(), make_generator(9)))  # the float32 values, upcast exactly
    assert torch.equal(a, generation_sample(lp, make_generator(9)))
    assert not torch.equal(a, sample(lp, make_generator(10)))
    assert torch.equal(sample(lp, make_generator(0), greedy=True), lp.argmax(-1))


@pytest.mark.parametrize("bad", [[-math.inf, -math.inf], [0.0, math.nan], [0.0, math.inf]])
def test_rows_with_nothing_to_sample_are_refused(bad) -> None:
    with pytest.raises(InvalidInputError):
        sample(torch.tensor([[0.0, -1.0], bad]), make_generator(0))
