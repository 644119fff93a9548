"""Sampling a token from log-probabilities exactly, whatever their size (docs/privacy.md "Sampling").

A row of log-weights l (float32 or float64, any finite values and -inf) is released as one
token drawn from P(y) = W_y / sum_j W_j, where W_y = 0 when l_y = -inf and otherwise

    W_y = mant_y * 2^(exp_y) = exp(l_y - M) (1 + eta_y),   |eta_y| <= 2^-43,   M = max_j l_j,

a positive dyadic rational however small exp(l_y - M) is (l_y - M = -5000 gives about 2^-7213; no
underflow). The draw is an exact inversion of one uniform U in [0, 1): y is the token with
F_(y-1) <= U < F_y, F_j = sum_(i <= j) W_i / sum_i W_i, so P(y) is W_y / sum W exactly.

* Fast path (vectorised, one 53-bit integer per row from the generator): float64 cumulative
  sums of exp(l) locate U * S to within a rigorous bound H on every rounding error; the row is
  decided when U's whole interval [u, u + 2^-53) lands inside one cell shrunk by H.
* Exact path (rows the fast path cannot decide: probability at most 2 H / S = 3e-12 per cell
  boundary near U for V = 151,936, so about 1e-11 for a peaked row and 5e-7 for a flat one, and
  every row whose maximum is far from 0): the dyadic weights in Python integers, enclosed at a
  growing precision, and more random bits from the same generator until U's interval lies inside
  one cell of the exact cumulative distribution.

Assumption: the platform's float64 ``exp`` (torch and ``math``) has relative error at most
2^-44 on normal results (every libm, Sleef and CUDA document 1 or 2 ulp, i.e. 2^-52 or 2^-51)
and absolute error at most 2^-1021 where the result is below the normal range.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from fractions import Fraction
from functools import lru_cache
from itertools import accumulate

import torch
from torch import Tensor

from tokendp.errors import InvalidInputError

__all__ = ["sample", "sample_ids", "sample_to_host"]

Generators = torch.Generator | Sequence[torch.Generator]  # one stream for all rows, or one per row

_UNIT = 2.0**-53  # u, the unit roundoff of float64
_GRID = 53  # bits of the fast path's uniform
_MORE = 62  # random bits drawn per refinement of the exact path
_BLOCK = 512  # tokens per block of the fast path's two-level cumulative sum


@lru_cache(maxsize=8)
def _ln2_bounds(precision: int) -> tuple[int, int]:
    """Integers low <= ln(2) 2^p <= high, high - low = p + 1, from ln 2 = sum_(n>=1) 1/(n 2^n):
    the first p terms floored lose less than p, the tail is below 2^(p-p)/(p+1) <= 1."""
    low = sum((1 << precision) // (i << i) for i in range(1, precision + 1))
    return low, low + precision + 1


_LN2 = Fraction(sum(_ln2_bounds(160)), 2**161)  # ln 2 to within 2^-150
_LN2_HI = math.floor(_LN2 * 2**32) / 2**32  # ln 2 to 32 bits: k * _LN2_HI is exact for |k| <= 2^20
_LN2_LO = float(_LN2 - Fraction(_LN2_HI))  # correctly rounded: |ln 2 - _LN2_HI - _LN2_LO| <= 2^-85
_VECTOR_SPAN = 2.0**19  # |l - M| up to this: weights by Cody-Waite reduction in float64; beyond: exact rationals
_SAFE = 2.0**1000  # |l|, |M| below this: TwoSum cannot overflow

Weights = list[tuple[int, int]]  # (mantissa, exponent): W = mantissa * 2^exponent; (0, 0) for W = 0


def sample(logprobs: Tensor, generator: Generators, *, greedy: bool = False) -> Tensor:
    """One token per row of ``logprobs # (N, V)``, on their device: an exact draw from
    W / sum W (module docstring), or the argmax when ``greedy``. ``generator``: one stream for
    every row, or one per row (then row n's draw depends on its own stream only)."""
    return sample_to_host(logprobs, generator, greedy=greedy).to(logprobs.device)


def sample_to_host(logprobs: Tensor, generator: Generators, *, greedy: bool = False,
                   _force_exact: bool = False) -> Tensor:
    """As :func:`sample`, returning the tokens ``# (N,)`` int64 on the CPU (:func:`sample_ids`).
    ``_force_exact`` (tests) sends every row to the exact path."""
    return torch.tensor(sample_ids(logprobs, generator, greedy=greedy, _force_exact=_force_exact), dtype=torch.int64)


def sample_ids(logprobs: Tensor, generator: Generators, *, greedy: bool = False,
               _force_exact: bool = False) -> list[int]:
    """As :func:`sample`, returning the N token ids as a Python list after one host read of
    the device (tokens, row status and uniforms together; the decoding loop's one read per
    step, docs/performance.md). A row with no finite entry, a NaN or +inf raises
    InvalidInputError (it reaches the exact path, which checks)."""
    if logprobs.dim() != 2 or logprobs.shape[-1] < 1 or not logprobs.is_floating_point():
        raise InvalidInputError(f"logprobs must be a floating (N, V) tensor, got {tuple(logprobs.shape)}")
    if greedy:
        return logprobs.argmax(-1).tolist()  # (N,)
    u = _uniforms(generator, logprobs.shape[0], logprobs.device)  # (N,): exactly uniform (a power of two)
    tokens, status = fast_inversion(logprobs, u)  # (N,), (N,)
    tokens, status, uniforms = torch.stack((tokens, status, u)).tolist()  # (3, N): the one host read
    for row, undecided in enumerate(status):  # rare: at most about 3e-12 per cell boundary near U
        if undecided or _force_exact:
            weights = dyadic_weights(logprobs[row].detach().to("cpu", torch.float64), row_index=row)
            stream = generator if isinstance(generator, torch.Generator) else generator[row]
            tokens[row] = invert_exactly(weights, uniforms[row], _GRID, lambda: _more_bits(stream))
    return tokens


def _uniforms(generator: Generators, n: int, device: torch.device) -> Tensor:
    """``n`` integers uniform on [0, 2^53) on ``device``: from one stream, or one from each
    row's stream (drawn where the streams live, then one copy to ``device``)."""
    if isinstance(generator, torch.Generator):
        return torch.randint(0, 2**_GRID, (n,), generator=generator, device=generator.device,
                             dtype=torch.int64).to(device)
    if len(generator) != n:
        raise InvalidInputError(f"got {len(generator)} generators for {n} rows; give one per row")
    home = generator[0].device if n else device
    return torch.cat([torch.randint(0, 2**_GRID, (1,), generator=g, device=g.device, dtype=torch.int64).to(home)
                      for g in generator]).to(device)  # (N,)


def fast_inversion(logprobs: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
    """Vectorised inversion of U = (u + r) / 2^53 for ``logprobs # (N, V)`` and the 53-bit integers
    ``u # (N,)`` (r in [0, 1): bits not drawn yet).

    Weights exp(l) in float64, unshifted (a log-probability row has its maximum near 0; any other
    row falls through to the exact path). Two levels: sums over blocks of b = min(_BLOCK, V)
    tokens, their cumulative sum (which finds U's block), then the cumulative sum inside that one
    block. Every computed cumulative weight Shat_j is a sum of the float64 weights with at most
    D = 2 b + ceil(V/b) roundings on any term (in any summation order), so (docs/privacy.md "Sampling"), when
    2^-899 <= Shat_V < inf, |Shat_j - S_j| <= E <= Shat_V (2^-42 + (1.02 D + 3) u) for the exact
    cumulative weights S_j (scaled by e^M). The exact target x = U S is within E + 2.01 u Shat_V of
    xhat = fl(u 2^-53 Shat_V), so y is certain when Shat_(y-1) + H <= xhat and xhat + H < Shat_y
    with H = Shat_V (2^-40 + (4 D + 16) u), which also covers the rounding of these two
    additions. Returns tokens and status (0 decided, 1 undecided), each ``# (N,)`` int64.
    """
    n, vocab = logprobs.shape
    weights = logprobs.exp() if logprobs.dtype == torch.float64 else logprobs.to(torch.float64).exp_()  # (N, V)
    width = min(_BLOCK, vocab)  # b
    full, blocks = vocab // width, -(-vocab // width)
    sums = weights.new_zeros((n, blocks))  # (N, NB)
    if full:
        sums[:, :full] = weights[:, :full * width].unflatten(-1, (full, width)).sum(-1)
    if full < blocks:
        sums[:, full] = weights[:, full * width:].sum(-1)
    cum = sums.cumsum_(-1)  # (N, NB)
    total = cum[:, -1:]  # (N, 1)
    x = (u.to(torch.float64) * _UNIT).unsqueeze(-1) * total  # (N, 1)
    block = torch.searchsorted(cum, x, right=True).clamp_max_(blocks - 1)  # (N, 1)
    before = torch.where(block > 0, cum.gather(-1, (block - 1).clamp_min(0)), 0.0)  # (N, 1)
    index = block * width + torch.arange(width, device=x.device)  # (N, b)
    inner = weights.gather(-1, index.clamp_max(vocab - 1)).masked_fill_(index >= vocab, 0.0)  # (N, b)
    inner = inner.cumsum_(-1).add_(before)  # (N, b)
    j = torch.searchsorted(inner, x, right=True).clamp_max_(width - 1)  # (N, 1)
    below = torch.where(j > 0, inner.gather(-1, (j - 1).clamp_min(0)), before)  # (N, 1)
    margin = total * (2.0**-40 + (4.0 * (2 * width + blocks) + 16.0) * _UNIT)  # (N, 1)
    decided = (below + margin <= x) & (x + margin < inner.gather(-1, j))  # (N, 1)
    decided &= (total >= 2.0**-899) & (total < math.inf)  # NaN fails both
    status = torch.where(decided, 0, 1).squeeze(-1)  # (N,)
    return (block * width + j).clamp_max_(vocab - 1).squeeze(-1), status


def _more_bits(generator: torch.Generator) -> int:
    """_MORE fresh uniform bits from ``generator`` (randint over a power of two is exactly uniform)."""
    return int(torch.randint(0, 2**_MORE, (1,), generator=generator, device=generator.device, dtype=torch.int64))


def invert_exactly(weights: Weights, a: int, n: int, more_bits: Callable[[], int]) -> int:
    """The token y with F_(y-1) <= U < F_y for the exact cumulative distribution F of ``weights``,
    where U is uniform on [a 2^-n, (a + 1) 2^-n): :func:`decide`, refining U with ``more_bits()``
    (_MORE fresh bits a call) until it answers. Used only for the rare rows the fast path cannot decide."""
    while (y := decide(weights, a, n)) is None:
        a, n = (a << _MORE) | more_bits(), n + _MORE
    return y


def decide(weights: Weights, a: int, n: int) -> int | None:
    """The token every U in [a 2^-n, (a + 1) 2^-n) maps to under the exact inversion, or None.

    At precision p = n + 64 bits below the largest weight, W_y 2^p lies in [A_y, A_y + r_y]
    (A_y = floor(W_y 2^p), r_y = 1 if that floor dropped something, else 0), so with
    L_j = sum_(i<=j) A_i, c_j = sum_(i<=j) r_i, L = L_(V-1), c = c_(V-1):
    F_j <= (L_j + c_j) / (L + c_j) and F_j >= L_j / (L + c - c_j). y is returned when
    (L_(y-1) + c_(y-1)) 2^n <= a (L + c_(y-1)) and (a + 1)(L + c - c_y) <= L_y 2^n: then
    F_(y-1) <= a 2^-n and (a + 1) 2^-n <= F_y, whatever the exact weights in their enclosures.
    Python integers (a loop over the vocabulary: exact path only).
    """
    top = max(e for m, e in weights if m)
    floors, inexact = _enclose(weights, n - top + 64)  # W_max 2^p is about 2^(n + 117)
    low = list(accumulate(floors))  # (V,) L_j
    count = list(accumulate(inexact))  # (V,) c_j
    total, slack = low[-1], count[-1]
    y = min(bisect_right(low, (a * total) >> n), len(low) - 1)  # the only candidate
    low_before, count_before = (low[y - 1], count[y - 1]) if y else (0, 0)
    if ((low_before + count_before) << n) <= a * (total + count_before) \
            and (a + 1) * (total + slack - count[y]) <= (low[y] << n):
        return y
    return None


def _enclose(weights: Weights, precision: int) -> tuple[list[int], list[int]]:
    """floor(W_y 2^p) and whether the floor was inexact, for every token (Python loop: slow path only)."""
    floors, inexact = [], []
    for mant, exp in weights:
        shift = exp + precision
        if shift >= 0:
            floors.append(mant << shift)
            inexact.append(0)
        else:
            floors.append(mant >> -shift)
            inexact.append(1 if mant & ((1 << -shift) - 1) else 0)
    return floors, inexact


def dyadic_weights(row: Tensor, *, row_index: int = 0) -> Weights:
    """The exact weights W_y = mant_y 2^(exp_y) of one row ``# (V,)`` float64 (module docstring).

    For |l_y - M| <= 2^19: d = l - M exactly as s + e (TwoSum), k = round(s log2 e), and
    r = d - k ln 2 by Cody-Waite reduction (k * _LN2_HI is exact for |k| <= 2^20), so
    |rhat - r| <= 2^-54; then W = exp(rhat) 2^k, |eta| <= 2^-44 + 2^-53. Other finite tokens go
    through :func:`_exact_weight` (rational arithmetic). -inf gives W = 0. A row with a NaN or
    +inf, or with no finite entry, raises InvalidInputError.
    """
    finite = torch.isfinite(row)  # (V,)
    if not bool(finite.any()) or bool((torch.isnan(row) | (row == math.inf)).any()):
        raise InvalidInputError(f"row {row_index} of logprobs has a NaN or +inf, or no finite entry: nothing to sample")
    top = row[finite].max()  # scalar float64
    s = row - top  # (V,)
    z = s - row
    e = (row - (s - z)) + (-top - z)  # (V,): d = s + e exactly (Knuth's TwoSum)
    fast = finite & (s.abs() <= _VECTOR_SPAN) & (row.abs() < _SAFE) & (top.abs() < _SAFE)  # (V,)
    k = torch.where(fast, torch.round(s * (1.0 / math.log(2.0))), 0.0)  # (V,) |k| <= 2^20
    hi = k * _LN2_HI  # (V,) exact
    r_hi = s - hi
    zz = r_hi - s
    r_lo = (s - (r_hi - zz)) + (-hi - zz)  # (V,): s - k _LN2_HI = r_hi + r_lo exactly
    r = torch.where(fast, r_hi + ((r_lo + e) - k * _LN2_LO), 0.0)  # (V,), within 2^-54 of d - k ln 2
    mant, exp = torch.frexp(torch.exp(r))  # (V,), (V,): exp(r) = mant 2^exp, mant in [0.5, 1)
    mant_int = (mant * 2.0**53).to(torch.int64)  # exact: a 53-bit integer
    exp_int = k.to(torch.int64) + exp.to(torch.int64) - 53  # (V,)
    out: Weights = list(zip(mant_int.tolist(), exp_int.tolist()))
    for y in (finite & ~fast).nonzero().flatten().tolist():
        out[y] = _exact_weight(Fraction(float(row[y])) - Fraction(float(top)))
    for y in (~finite).nonzero().flatten().tolist():
        out[y] = (0, 0)
    return out


def _exact_weight(d: Fraction) -> tuple[int, int]:
    """exp(d) (1 + eta), |eta| <= 2^-44 + 2^-52, as (mantissa, exponent), for any rational d <= 0.

    k = floor(d / ln 2) from an enclosure of ln 2 at p bits (:func:`_ln2_bounds`), p chosen so
    that |k| (p + 1) 2^-p < 2^-80; r = d - k ln 2 is then known to 2^-80, rounded to float64 (2^-53
    relative, |r| < 1) and exponentiated by ``math.exp``.
    """
    guess = math.floor(d / Fraction(_LN2_HI))  # any k near d / ln 2, to size the precision
    precision = abs(guess).bit_length() + 100
    low, high = _ln2_bounds(precision)  # low <= ln 2 2^p <= high
    k = math.floor(d * 2**precision / low)
    r = d - Fraction(k * (low + high), 2 ** (precision + 1))  # |r - (d - k ln 2)| <= |k| (p+1) 2^-p
    mant, exp = math.frexp(math.exp(float(r)))
    return int(mant * 2**53), k + exp - 53
