"""Overlap resolution: turn spans from several taggers into disjoint spans.

Precedence (documented in docs/tagging.md):

1. Spans with the same label that overlap or touch are merged into one span covering their
   union; it keeps the highest score and the source of the highest-ranked member.
2. Between different labels, spans are ranked by higher score, then longer span, then source
   priority (the order of ``source_priority``, matched on the whole source or on its part
   before ":"; unknown sources last), then earlier start.
   Spans are accepted in rank order; a lower-ranked span loses the characters already
   claimed, and each remaining piece that still holds a letter or digit is kept (so resolution
   never un-tags a character that some tagger found: recall is preserved).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from tokendp.text.spans import Span


def _rank_key(span: Span, priority: dict[str, int]):
    family = span.source.split(":", 1)[0]  # "patterns:email" ranks as "patterns"
    return (-span.score, -len(span), priority.get(span.source, priority.get(family, len(priority))),
            span.start)


def merge_same_label(spans: Iterable[Span], source_priority: Sequence[str] = ()) -> list[Span]:
    """Merge overlapping or touching spans that share a label (rule 1)."""
    priority = {s: i for i, s in enumerate(source_priority)}
    by_label: dict[str, list[Span]] = {}
    for span in spans:
        by_label.setdefault(span.label, []).append(span)
    merged: list[Span] = []
    for group in by_label.values():
        group.sort(key=lambda s: (s.start, s.end))
        current = [group[0]]
        for span in group[1:]:
            if span.start <= max(s.end for s in current):
                current.append(span)
            else:
                merged.append(_union(current, priority))
                current = [span]
        merged.append(_union(current, priority))
    return sorted(merged, key=lambda s: (s.start, s.end))


def _union(group: list[Span], priority: dict[str, int]) -> Span:
    best = min(group, key=lambda s: _rank_key(s, priority))
    return replace(best, start=min(s.start for s in group), end=max(s.end for s in group))


def resolve_overlaps(spans: Iterable[Span], text: str, *,
                     source_priority: Sequence[str] = ()) -> list[Span]:
    """Disjoint spans sorted by start, following the module's precedence rules."""
    priority = {s: i for i, s in enumerate(source_priority)}
    ranked = sorted(merge_same_label(spans, source_priority), key=lambda s: _rank_key(s, priority))
    taken = bytearray(len(text))
    kept: list[Span] = []
    for span in ranked:
        for start, end in _free_pieces(taken, span.start, span.end):
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
            if start < end and any(c.isalnum() for c in text[start:end]):
                kept.append(replace(span, start=start, end=end))
                taken[start:end] = b"\x01" * (end - start)
    return sorted(kept, key=lambda s: (s.start, s.end))


def _free_pieces(taken: bytearray, start: int, end: int) -> list[tuple[int, int]]:
    pieces, i = [], start
    while i < end:
        while i < end and taken[i]:
            i += 1
        j = i
        while j < end and not taken[j]:
            j += 1
        if j > i:
            pieces.append((i, j))
        i = j
    return pieces
