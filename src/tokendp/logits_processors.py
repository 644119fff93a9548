"""Decoding constraints that keep the privacy guarantee: functions of PUBLIC data only.

DP-Fusion and the other mechanisms mix or clip the next-token distributions of several rows
(the public context and the private ones) and bound how far the released token's distribution
can move with the private text. Anything applied to a row's logits before the mechanism is part
of "the model" the proof is about. It is safe exactly when it is one fixed function of public
data applied to every row alike: then the mechanism sees the logits of a different, but
public, model, and the accounting is unchanged. A processor that looks at a row's own prompt
(as ``transformers``' ``RepetitionPenaltyLogitsProcessor`` does with ``input_ids``) would treat
private rows differently from the public row, depending on the private tokens themselves, and
its effect would escape the accounting.

So every processor here takes the logits of all rows of ONE sequence ``# (R, V)`` and the ids
released so far for that sequence (one list, shared by its rows, plus optionally public prompt
ids such as the public row's), computes ONE adjustment from them, and broadcasts it to all rows:

- :func:`repetition_penalty` (CTRL, Keskar et al. 2019): logits of tokens already released are
  divided by ``penalty`` when positive and multiplied by it when negative;
- :func:`no_repeat_ngram` : tokens that would complete an n-gram already released get -inf;
- :func:`min_new_tokens` : end-of-sequence tokens get -inf until ``min_tokens`` are released;
- ``suppress``: tokens that are never released (runs of the placeholder:
  :func:`tokendp.text.contexts.placeholder_runs`) get -inf in every row of every sequence.

:class:`PublicLogitsProcessor` bundles them; :func:`apply_to_rows` applies one to flat rows of
several sequences (the engine's ``(Rtot, V)`` layout, each sequence's rows together).

The engine applies one (``tokendp.generation.generate(logits_processor=...)``) to the flat
logits ``# (Rtot, V)`` right after each forward pass and BEFORE the mechanism mixes the rows,
with ``generated[n]`` the tokens already released for sequence n (never a row's prompt); its
parameters are public and go into the report (``sanitize``: ``report.decoding``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from tokendp.errors import InvalidParameterError


def _shared(generated: Sequence[int]) -> list[int]:
    """Check that ``generated`` is ONE id sequence (shared by all rows), not one per row."""
    if isinstance(generated, torch.Tensor):
        if generated.dim() != 1:
            raise InvalidParameterError(
                "logits processors take the released ids of the sequence as one 1-D list shared by "
                f"all its rows, got a tensor of shape {tuple(generated.shape)}")
        return [int(t) for t in generated.tolist()]
    return [int(t) for t in generated]


def repetition_penalty(logits: torch.Tensor, generated: Sequence[int], penalty: float) -> torch.Tensor:
    """``logits # (R, V)`` with every token in ``generated`` penalised alike in all rows."""
    if penalty <= 0:
        raise InvalidParameterError(f"repetition penalty must be > 0, got {penalty}")
    ids = sorted(set(_shared(generated)))
    if penalty == 1.0 or not ids:
        return logits
    out = logits.clone()
    cols = torch.tensor(ids, dtype=torch.long, device=logits.device)
    picked = out[:, cols]  # (R, n)
    out[:, cols] = torch.where(picked > 0, picked / penalty, picked * penalty)
    return out


def banned_ngram_tokens(generated: Sequence[int], n: int) -> list[int]:
    """Tokens that would repeat an n-gram of ``generated`` (the last n-1 ids seen before)."""
    ids = _shared(generated)
    if n < 1:
        raise InvalidParameterError(f"no_repeat_ngram size must be >= 1, got {n}")
    if n == 1:
        return sorted(set(ids))
    prefix = tuple(ids[len(ids) - (n - 1):])
    return sorted({ids[i + n - 1] for i in range(len(ids) - n + 1) if tuple(ids[i:i + n - 1]) == prefix})


def no_repeat_ngram(logits: torch.Tensor, generated: Sequence[int], n: int) -> torch.Tensor:
    """``logits # (R, V)`` with -inf, in every row, on tokens that complete a released n-gram."""
    banned = banned_ngram_tokens(generated, n)
    if not banned:
        return logits
    out = logits.clone()
    out[:, torch.tensor(banned, dtype=torch.long, device=logits.device)] = float("-inf")
    return out


def suppressed(logits: torch.Tensor, ids: tuple[int, ...]) -> torch.Tensor:
    """``logits # (R, V)`` with -inf on ``ids`` in every row (a copy; ``logits`` itself if none)."""
    if not ids:
        return logits
    return logits.index_fill(1, _index(ids, logits.device), float("-inf"))


@functools.lru_cache(maxsize=64)
def _index(ids: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """``ids`` on ``device``, copied there once."""
    return torch.tensor(ids, dtype=torch.long, device=device)


def min_new_tokens(logits: torch.Tensor, generated: Sequence[int], min_tokens: int,
                   eos_ids: Sequence[int]) -> torch.Tensor:
    """``logits # (R, V)`` with -inf on ``eos_ids`` in every row while fewer than ``min_tokens``
    ids are released."""
    if len(_shared(generated)) >= min_tokens or not eos_ids:
        return logits
    out = logits.clone()
    out[:, torch.tensor(list(eos_ids), dtype=torch.long, device=logits.device)] = float("-inf")
    return out


@dataclass(frozen=True)
class PublicLogitsProcessor:
    """Public decoding constraints for the rows of one sequence (all parameters are public)."""

    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    min_new_tokens: int = 0
    eos_ids: tuple[int, ...] = field(default_factory=tuple)
    suppress: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.repetition_penalty <= 0:
            raise InvalidParameterError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if self.no_repeat_ngram_size < 0 or self.min_new_tokens < 0:
            raise InvalidParameterError("no_repeat_ngram_size and min_new_tokens must be >= 0")

    @property
    def active(self) -> bool:
        return self.repetition_penalty != 1.0 or self.no_repeat_ngram_size > 0 or self.min_new_tokens > 0 or \
            bool(self.suppress)

    def __call__(self, logits: torch.Tensor, generated: Sequence[int],
                 public_prompt: Sequence[int] = ()) -> torch.Tensor:
        """``logits # (R, V)`` of one sequence's rows; ``generated``: ids released so far;
        ``public_prompt``: public ids the repetition penalty may also count (e.g. the public row)."""
        generated = _shared(generated)
        if self.repetition_penalty != 1.0:
            logits = repetition_penalty(logits, list(_shared(public_prompt)) + generated,
                                        self.repetition_penalty)
        if self.no_repeat_ngram_size:
            logits = no_repeat_ngram(logits, generated, self.no_repeat_ngram_size)
        if self.min_new_tokens:
            logits = min_new_tokens(logits, generated, self.min_new_tokens, self.eos_ids)
        return suppressed(logits, self.suppress)


def apply_to_rows(processor: PublicLogitsProcessor, logits: torch.Tensor, rows_per_sequence: Sequence[int],
                  generated: Sequence[Sequence[int]]) -> torch.Tensor:
    """Apply ``processor`` to flat rows ``# (Rtot, V)``: sequence n owns the next
    ``rows_per_sequence[n]`` rows (the engine's layout, in order) and all of them get its
    adjustment. Slices from host integers: nothing is read back from the device. ``logits``
    itself comes back, uncopied, when no sequence's constraint applies at this step (a no-repeat
    n-gram rule with nothing to ban, as at most steps of a rewrite that does not loop); the
    suppressed ids, alike in every row, take one operation over the whole batch."""
    logits = suppressed(logits, processor.suppress)
    processor = dataclasses.replace(processor, suppress=())
    if not processor.active:
        return logits
    out = None
    start = 0
    for count, released in zip(rows_per_sequence, generated):
        if count:
            rows = logits[start:start + count]
            adjusted = processor(rows, released)
            if adjusted is not rows:
                out = logits.clone() if out is None else out
                out[start:start + count] = adjusted
        start += count
    return logits if out is None else out
