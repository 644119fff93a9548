"""Draft tokens for speculative decoding, from PUBLIC data only: prompt lookup on the public row.

A rewriter mostly copies its document: outside the spans, its next token is usually the next
token of the public context. :class:`PromptLookup` guesses up to k tokens by finding the last
n tokens released so far (n = ``ngram`` down to 1) in the public row and proposing the k tokens
that follow that occurrence there (Saxena 2023, "prompt lookup decoding"; transformers'
``prompt_lookup_num_tokens``). When the n-gram occurs several times, the occurrence nearest the
document's *cursor* wins: where the previous draft's source continued, moved on by the tokens
released since.

The engine (:func:`tokendp.generation.generate` with ``drafter=``) verifies the drafts exactly,
so they change the speed, never the distribution of the output (docs/privacy.md, "Speculative
decoding"). They must still be a function of public data only (the public row and the tokens
released so far), so that the number of forward passes is a function of the output: a drafter
that read a private row would make the pass count, and so the wall time, depend on private
text beyond what the output shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from tokendp.errors import InvalidParameterError

__all__ = ["DocumentDrafts", "Drafter", "PromptLookup"]


class Drafter(Protocol):
    """What the engine asks of a drafter: per document, from its public row, an object whose
    ``propose(released, room)`` guesses at most ``room`` tokens to follow the released ones."""

    def for_document(self, public: Sequence[int]) -> Any: ...


@dataclass(frozen=True)
class PromptLookup:
    """Prompt-lookup drafts of up to ``max_tokens`` tokens from the longest matching n-gram
    (``ngram`` down to 1) of the released tokens in the public row; a draft stops before any
    token of ``exclude`` (a placeholder, which the model is not expected to write)."""

    max_tokens: int = 4
    ngram: int = 3
    exclude: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        for name in ("max_tokens", "ngram"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise InvalidParameterError(f"{name} of a prompt lookup must be an integer >= 1, got {value!r}")
        object.__setattr__(self, "exclude", frozenset(int(t) for t in self.exclude))

    def for_document(self, public: Sequence[int]) -> DocumentDrafts:
        """The drafting state of one document whose public row is ``public``."""
        return DocumentDrafts(self, public)


class DocumentDrafts:
    """Drafts for one document as its output grows (holds the cursor; public data only)."""

    def __init__(self, lookup: PromptLookup, public: Sequence[int]) -> None:
        self.lookup = lookup
        self.public = torch.tensor(list(public), dtype=torch.int64)  # (L,)
        self.allowed = ~_isin(self.public, lookup.exclude)  # (L,) bool
        self.cursor = 0  # where in the public row the output is thought to be
        self.seen = 0  # tokens released when the cursor was set

    def propose(self, released: Sequence[int], room: int) -> list[int]:
        """Up to min(max_tokens, ``room``) tokens guessed to follow ``released``; [] for none."""
        self.cursor += len(released) - self.seen
        self.seen = len(released)
        limit = min(self.lookup.max_tokens, room)
        length = self.public.shape[0]
        if limit < 1:
            return []
        for n in range(min(self.lookup.ngram, len(released), length - 1), 0, -1):
            pattern = torch.tensor(released[-n:], dtype=torch.int64)  # (n,)
            windows = self.public[:length - 1].unfold(0, n, 1)  # (L - n, n): every n-gram with a token after it
            starts = (windows == pattern).all(-1).nonzero().squeeze(-1)  # (H,)
            if starts.numel() == 0:
                continue
            follow = starts + n  # (H,) where each occurrence's continuation starts
            source = int(follow[(follow - self.cursor).abs().argmin()])
            self.cursor = source
            run = self.allowed[source:source + limit]  # (<= limit,)
            stop = int(run.logical_not().nonzero()[0]) if not bool(run.all()) else run.shape[0]
            return self.public[source:source + stop].tolist()
        return []


def _isin(ids: torch.Tensor, values: Iterable[int]) -> torch.Tensor:
    """Whether each of ``ids # (L,)`` is one of ``values``, ``# (L,)`` bool."""
    values = torch.tensor(sorted(values), dtype=torch.int64)
    return torch.isin(ids, values) if values.numel() else torch.zeros_like(ids, dtype=torch.bool)
