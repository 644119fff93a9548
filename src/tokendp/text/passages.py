"""Documents of any length: passages cut at public places.

A document longer than ``max_tokens`` tokens is rewritten passage by passage
(docs/sanitize.md, "Long documents"). :func:`split_passages` cuts it at line breaks outside
every span, packing whole paragraphs into passages of at most ``max_tokens`` tokens; a
paragraph longer than that is cut at sentence ends, then at spaces, outside every span. Token
counts are the caller's ``count``: the job counts the tokens of the document's one tokenisation
that start in a range, as the public row shows them (the text outside the spans and one
placeholder per hidden token), so the cuts depend only on what DP-Fusion's adjacency makes
public: the text outside the spans and the spans' positions, labels and lengths in tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tokendp.errors import InvalidParameterError
from tokendp.text.spans import Span

_SENTENCE_END = re.compile(r"[.!?;:][\"')\]]*(\s+)")  # the cut is the space after the sentence
_SPACE = re.compile(r"\s+")
_BREAK = re.compile(r"\n+")


@dataclass(frozen=True)
class Passage:
    """Characters ``start:end`` of a document, its spans (offsets into the passage) and the
    public text that separates it from the passage before (empty for the first)."""

    start: int
    end: int
    spans: tuple[Span, ...]
    separator: str


def _outside(spans: Sequence[Span], position: int) -> bool:
    return not any(s.start < position < s.end for s in spans)


def _cuts(text: str, spans: Sequence[Span], pattern: re.Pattern, lo: int, hi: int) -> list[tuple[int, int]]:
    """(end of the text before, start of the text after) of each match of ``pattern`` in
    ``text[lo:hi]`` that lies wholly outside the spans."""
    found = [m.span(1) if pattern.groups else m.span() for m in pattern.finditer(text, lo, hi)]
    return [(a, b) for a, b in found if all(_outside(spans, p) for p in range(a, b + 1))]


def split_passages(text: str, spans: Sequence[Span], count: Callable[[int, int], int], max_tokens: int
                   ) -> list[Passage]:
    """``text`` cut into passages of at most ``max_tokens`` tokens where it can be (module
    docstring); ``count(start, end)`` is the public token count of ``text[start:end]``. A piece
    with no cut outside a span (one span longer than ``max_tokens``) stays whole."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 16:
        raise InvalidParameterError(f"passage_tokens must be an integer >= 16, got {max_tokens!r}")
    bounds = _pack(text, spans, count, max_tokens, 0, len(text), (_BREAK, _SENTENCE_END, _SPACE))
    passages, previous = [], None
    for start, end in bounds:
        inner = tuple(Span(s.start - start, s.end - start, s.label, s.score, s.source)
                      for s in spans if s.start >= start and s.end <= end)
        passages.append(Passage(start, end, inner, "" if previous is None else text[previous:start]))
        previous = end
    return passages


def _pack(text: str, spans: Sequence[Span], count: Callable[[int, int], int], limit: int, lo: int, hi: int,
          patterns: tuple[re.Pattern, ...]) -> list[tuple[int, int]]:
    """Passages of ``text[lo:hi]``: greedy runs of the pieces between cuts of the first pattern,
    a piece over ``limit`` cut again by the next patterns."""
    if count(lo, hi) <= limit or not patterns:
        return [(lo, hi)]
    cuts = _cuts(text, spans, patterns[0], lo, hi)
    pieces, start = [], lo
    for end, after in cuts:
        if end > start:
            pieces.append((start, end))
        start = after
    if start < hi:
        pieces.append((start, hi))
    out: list[tuple[int, int]] = []
    for a, b in pieces:
        if count(a, b) > limit:
            out += _pack(text, spans, count, limit, a, b, patterns[1:])
        elif out and count(out[-1][0], b) <= limit:  # the gap between them is whitespace outside spans
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out

