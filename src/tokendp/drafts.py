"""Draft tokens for speculative decoding, from PUBLIC data only: prompt lookup on the public row.

A rewriter mostly copies its document: outside the spans, its next token is usually the next
token of the public context. :class:`PromptLookup` guesses up to k tokens by finding the last
n tokens released so far (n = ``ngram`` down to 1) in the public row and proposing the k tokens
that follow that occurrence there (Saxena 2023, "prompt lookup decoding"; transformers'
``prompt_lookup_num_tokens``). When the n-gram occurs several times, the occurrence nearest the
document's *cursor* wins: where the previous draft's source continued, moved on by the tokens
released since. Inside a span the model makes its filler up, and nothing is guessed: replayed
on the rewriter's outputs, guesses from the released tokens themselves (a made-up name that
recurs) were right too rarely to pay for the positions they add to a pass on a CPU
(docs/performance.md, "Speculative decoding"). A guess is sent only while the guesses' first
tokens have been right about half the time or more (:meth:`DocumentDrafts.propose`), so a
model that paraphrases rather than copies costs little.

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

    max_tokens: int = 8
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
    """Drafts for one document as its output grows: the cursor, and how often the first guessed
    token was right (public data only)."""

    def __init__(self, lookup: PromptLookup, public: Sequence[int]) -> None:
        self.lookup = lookup
        self.public = torch.tensor(list(public), dtype=torch.int64)  # (L,)
        self.allowed = ~_isin(self.public, lookup.exclude)  # (L,) bool
        self.cursor = 0  # where in the public row the output is thought to be
        self.seen = 0  # tokens released at the last call
        self.guess: list[int] = []  # the last guess, sent or not
        self.score = 1.0  # s <- (s + [the guess's first token was released]) / 2

    def propose(self, released: Sequence[int], room: int) -> list[int]:
        """Up to min(max_tokens, ``room``) tokens guessed to follow ``released``; [] for none.

        The guess comes from the public row (the occurrence nearest the cursor). It is sent
        only while the score is at least 1/2: every guess, sent or not, is checked against the
        token released after it, and the last check weighs as much as all earlier ones together.
        A model that does not copy its context (a paraphrase, say) then stops paying for
        positions it rejects, and one right guess resumes drafting.
        """
        if self.guess and len(released) > self.seen:
            self.score = (self.score + (released[self.seen] == self.guess[0])) / 2
        self.cursor += len(released) - self.seen
        self.seen = len(released)
        self.guess = self._lookup(released, min(self.lookup.max_tokens, room))
        return self.guess if self.score >= 0.5 else []

    def _lookup(self, released: Sequence[int], limit: int) -> list[int]:
        if limit < 1 or not released:
            return []
        found = _follow(self.public, released, self.lookup.ngram, self.cursor)
        if found is None:
            return []
        self.cursor = found
        run = self.allowed[found:found + limit]  # (<= limit,)
        stop = int(run.logical_not().nonzero()[0]) if not bool(run.all()) else run.shape[0]
        return self.public[found:found + stop].tolist()


def _follow(corpus: torch.Tensor, released: Sequence[int], ngram: int, cursor: int) -> int | None:
    """Where in ``corpus # (L,)`` the continuation of the longest n-gram (n <= ``ngram``) that
    ends ``released`` starts, at the occurrence whose continuation is nearest ``cursor``; None
    when not even the last token occurs (with a token after it)."""
    length = corpus.shape[0]
    for n in range(min(ngram, len(released), length - 1), 0, -1):
        pattern = torch.tensor(released[-n:], dtype=torch.int64)  # (n,)
        windows = corpus[:length - 1].unfold(0, n, 1)  # (L - n, n): every n-gram with a token after it
        follow = (windows == pattern).all(-1).nonzero().squeeze(-1) + n  # (H,) continuation starts
        if follow.numel():
            return int(follow[(follow - cursor).abs().argmin()])
    return None


def _isin(ids: torch.Tensor, values: Iterable[int]) -> torch.Tensor:
    """Whether each of ``ids # (L,)`` is one of ``values``, ``# (L,)`` bool."""
    values = torch.tensor(sorted(values), dtype=torch.int64)
    return torch.isin(ids, values) if values.numel() else torch.zeros_like(ids, dtype=torch.bool)
