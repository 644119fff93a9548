"""Canary exposure (Carlini et al., "The Secret Sharer", USENIX Security 2019, Sec. 4).

For a canary s[r] with secret r from the space R of all 10^d secrets, rank(r) is its position
when every candidate s[r'] is sorted by the model's log-perplexity (lowest first), and

    exposure(r) = log2 |R| - log2 rank(r),

from 0 (the canary is no likelier than a random candidate's median... or worse) up to log2 |R|
(19.93 for 6 digits: the canary is the model's top candidate). Only the secret's tokens differ
between candidates, so the ranking uses log p(secret tokens | prefix).

Exact (``method="exact"``): every digit must be one token in context (checked on the canary
itself and on ten all-equal candidates); then the log-probability of all 10^d candidates is
read from the model's next-token distribution over the ten digit tokens at each position,
running 10^(d-1) sequences (every candidate minus its last digit) in batches; rank = 1 + the
number of candidates strictly likelier. Sampled (``method="sampled"``, any tokenizer): from
``samples`` uniform candidates, k of them likelier than the canary, the 95% Wilson interval on
k / n gives an exposure interval (``low``, ``high``); the point estimate is Carlini et al.'s
extrapolation (Sec. 4.3 of the paper): a skew-normal fitted to the candidates' log-probabilities
gives the fraction p likelier than the canary, exposure = log2 |R| - log2(1 + |R| p). It reaches
beyond the ~log2(n) that counts alone can resolve, but it is a model of the tail, not a bound.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass
from typing import Any

import torch

from tokendp.backends.hf import cache_keyword
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.canaries import Canary, CanaryFormat


@dataclass(frozen=True)
class Exposure:
    """The exposure of one canary; ``low``/``high`` bound it (equal to it when exact)."""

    secret: str
    repeats: int
    exposure: float
    rank: float
    low: float
    high: float
    method: str


def _digit_tokens(tokenizer: Any, fmt: CanaryFormat, secret: str) -> tuple[list[int], list[int]] | None:
    """(prefix ids, per-digit ids) if the canary's tokens are the prefix's then one per digit."""
    prefix = list(tokenizer(fmt.prefix)["input_ids"])
    full = list(tokenizer(fmt.text(secret))["input_ids"])
    if full[:len(prefix)] != prefix or len(full) != len(prefix) + fmt.digits:
        return None
    return prefix, full[len(prefix):]


def digit_vocabulary(tokenizer: Any, fmt: CanaryFormat, secret: str) -> tuple[list[int], list[int]] | None:
    """(prefix ids, the token id of each digit 0-9 in context) when exact ranking is possible."""
    table: dict[str, int] = {}
    for probe in [secret] + [str(d) * fmt.digits for d in range(10)]:
        split = _digit_tokens(tokenizer, fmt, probe)
        if split is None:
            return None
        for char, token in zip(probe, split[1]):
            if table.setdefault(char, token) != token:
                return None
    return _digit_tokens(tokenizer, fmt, secret)[0], [table[str(d)] for d in range(10)]


@torch.inference_mode()
def _prefix_state(model: Any, prefix: list[int]) -> tuple[Any, torch.Tensor]:
    out = model(input_ids=torch.tensor([prefix]), use_cache=True)
    return out[cache_keyword(model)], torch.log_softmax(out.logits[0, -1].float(), -1)  # (V,)


@torch.inference_mode()
def candidate_logprobs(model: Any, prefix: list[int], digit_ids: list[int], digits: int, *, batch: int = 2000) -> torch.Tensor:
    """log p(secret | prefix) for every one of the 10^digits secrets, index = the secret as an int.

    The sequences are the prefix and the first digits-1 digits of each candidate; one pass gives
    the distribution of every next digit along the way. # (10^digits,) float64
    """
    cache, first = _prefix_state(model, prefix)
    digit_index = torch.tensor(digit_ids)
    first_lp = first[digit_index].double()  # (10,)
    if digits == 1:
        return first_lp
    stems = torch.arange(10 ** (digits - 1))  # (S,): every candidate without its last digit
    places = 10 ** torch.arange(digits - 2, -1, -1)  # (digits-1,)
    stem_digits = (stems[:, None] // places) % 10  # (S, digits-1)
    out = torch.empty(10 ** digits, dtype=torch.float64)
    for start in range(0, stems.numel(), batch):
        block = stem_digits[start:start + batch]  # (b, digits-1)
        b = block.shape[0]
        past = copy.deepcopy(cache)
        past.batch_repeat_interleave(b)  # the prefix's keys and values, once per sequence of the block
        ids = digit_index[block]  # (b, digits-1)
        mask = torch.ones((b, len(prefix) + digits - 1), dtype=torch.long)
        logits = model(input_ids=ids, attention_mask=mask, use_cache=True, **{cache_keyword(model): past}).logits  # (b, digits-1, V)
        lp = torch.log_softmax(logits.float(), -1)[:, :, digit_index].double()  # (b, digits-1, 10)
        path = first_lp[block[:, 0]]  # (b,)
        for k in range(1, digits - 1):
            path = path + lp[:, k - 1].gather(1, block[:, k:k + 1])[:, 0]
        leaves = path[:, None] + lp[:, -1]  # (b, 10): every last digit
        out[start * 10:(start + b) * 10] = leaves.reshape(-1)
    return out


@torch.inference_mode()
def _sequence_logprob(model: Any, tokenizer: Any, fmt: CanaryFormat, secrets: list[str], batch: int = 256) -> torch.Tensor:
    """log p(secret tokens | prefix) for each secret, any tokenizer. # (n,) float64"""
    prefix_len = len(tokenizer(fmt.prefix)["input_ids"])
    out = []
    for start in range(0, len(secrets), batch):
        seqs = [list(tokenizer(fmt.text(s))["input_ids"]) for s in secrets[start:start + batch]]
        width = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)  # (b, L)
        mask = torch.zeros_like(ids)
        for i, s in enumerate(seqs):
            ids[i, :len(s)], mask[i, :len(s)] = torch.tensor(s), 1
        lp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), -1)  # (b, L, V)
        token_lp = lp[:, :-1].gather(2, ids[:, 1:, None])[..., 0].double()  # (b, L-1)
        keep = mask[:, 1:].clone()
        keep[:, :prefix_len - 1] = 0  # only the secret's tokens
        out.append((token_lp * keep).sum(1))
    return torch.cat(out)


def _wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def canary_exposures(model: Any, tokenizer: Any, fmt: CanaryFormat, canaries: list[Canary], *, method: str = "exact",
                     samples: int = 10_000, seed: int = 0) -> list[Exposure]:
    """The exposure of each canary under ``model`` (see the module docstring); the sampled
    estimate ranks every canary against one shared sample of candidates."""
    size = fmt.space_size
    if method == "exact":
        out = []
        for canary in canaries:
            vocab = digit_vocabulary(tokenizer, fmt, canary.secret)
            if vocab is None:
                raise InvalidInputError("this tokenizer does not read each canary digit as one token; use the sampled estimate")
            scores = candidate_logprobs(model, vocab[0], vocab[1], fmt.digits)  # (|R|,)
            rank = 1 + int((scores > scores[int(canary.secret)]).sum())
            value = math.log2(size) - math.log2(rank)
            out.append(Exposure(canary.secret, canary.repeats, value, rank, value, value, "exact"))
        return out
    if method != "sampled":
        raise InvalidParameterError(f"method must be 'exact' or 'sampled', got {method!r}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise InvalidParameterError(f"samples must be an integer >= 1, got {samples!r}")
    rng = random.Random(seed)
    others = [f"{rng.randrange(size):0{fmt.digits}d}" for _ in range(samples)]
    scores = _sequence_logprob(model, tokenizer, fmt, [c.secret for c in canaries] + others)  # (C + n,)
    sampled = scores[len(canaries):]  # (n,)

    def exposure_at(p: float) -> float:
        return math.log2(size) - math.log2(1 + size * p)

    from scipy.stats import skewnorm

    fitted = skewnorm.fit(sampled.numpy())
    out = []
    for canary, score in zip(canaries, scores[:len(canaries)]):
        k = int((sampled > score).sum())
        low_p, high_p = _wilson(k, samples)
        tail = float(skewnorm.sf(float(score), *fitted))  # P(a candidate is likelier), extrapolated
        out.append(Exposure(canary.secret, canary.repeats, exposure_at(tail), 1 + size * tail,
                            exposure_at(high_p), exposure_at(low_p), "sampled"))
    return out
