"""Documents of any length: passages cut where the public row says.

A document longer than ``max_tokens`` tokens is rewritten passage by passage (docs/sanitize.md,
"Long documents"). :func:`split_passages` cuts the document's token sequence, as its public row
R_0 shows it, into ranges of positions: it packs whole paragraphs into passages of at most
``max_tokens`` tokens, cutting a paragraph longer than that at sentence ends, then at spaces.

It reads R_0 as :func:`public_pieces`: the text of each visible token, and ``None`` for a
hidden one. A visible token lies wholly outside every span, so nothing here reads a span's
content: a span that ends in a full stop looks exactly like one that ends in a letter (both are
placeholders), and the cuts, the sizes and the separators are functions of R_0 alone
(docs/privacy.md, "Documents of any length").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tokendp.errors import InvalidParameterError

LINE, SENTENCE, SPACE = 0, 1, 2  # the kinds of gap, the preferred first
_CLOSERS = "\"'\u2019\u201d)]"
_SENTENCE_END = re.compile(f"[.!?;:][{re.escape(_CLOSERS)}]*$")
_ENDINGS = frozenset(".!?;:" + _CLOSERS)  # a sentence's last character


@dataclass(frozen=True)
class Passage:
    """Positions ``start:end`` of the document's rows, and the public text released between the
    previous passage's rewrite and this one's (empty for the first)."""

    start: int
    end: int
    separator: str


@dataclass(frozen=True)
class Gap:
    """A place to cut: the whitespace-only tokens ``start:end`` (often none) between two tokens,
    the whitespace ``text`` there (theirs, and that which ends the token before and starts the
    token after), and its ``kind`` (:data:`LINE`, :data:`SENTENCE` or :data:`SPACE`)."""

    start: int
    end: int
    text: str
    kind: int


def public_pieces(text: str, starts: np.ndarray, ends: np.ndarray, hidden: np.ndarray) -> list[str | None]:
    """R_0 as text: per token (L,), the characters it covers if it is visible, else None.

    A token that shares a character with a neighbour (a multi-byte character split across
    byte-level tokens) is ``""``: glue, with no whitespace of its own. Which tokens share is fixed
    by their bytes, so this too is a function of R_0."""
    shared = np.zeros(len(starts), dtype=bool)  # (L,): a character in common with a neighbour
    shared[1:] |= starts[1:] < ends[:-1]
    shared[:-1] |= ends[:-1] > starts[1:]
    return [None if h else "" if c else text[a:b]
            for a, b, h, c in zip(starts.tolist(), ends.tolist(), hidden.tolist(), shared.tolist())]


def _is_space(piece: str | None) -> bool:
    return bool(piece) and piece.isspace()


def gaps(pieces: Sequence[str | None]) -> list[Gap]:
    """Every place to cut in R_0 (``pieces``, :func:`public_pieces`), in order: a run of
    whitespace-only visible tokens, or none, between two other tokens, where the whitespace there
    is not empty. A line break holds a newline; a sentence end follows a visible token that ends
    in ``. ! ? ; :`` (and closing quotes or brackets); anything else is a space."""
    out: list[Gap] = []
    n = len(pieces)
    blank = [_is_space(p) for p in pieces]
    j = next((i for i, b in enumerate(blank) if not b), n) + 1  # no gap before the first word
    while j < n:
        k = j
        while k < n and blank[k]:
            k += 1
        if k == n:
            break
        left, right = pieces[j - 1], pieces[k]
        before = left[len(left.rstrip()):] if left else ""  # the whitespace that ends it
        after = right[:len(right) - len(right.lstrip())] if right else ""  # and that starts the next
        space = before + "".join(pieces[j:k]) + after  # type: ignore[arg-type]
        if space:
            kind = LINE if "\n" in space else SENTENCE if _ends_sentence(pieces, j - 1) else SPACE
            out.append(Gap(j, k, space, kind))
        j = k + 1
    return out


def _ends_sentence(pieces: Sequence[str | None], j: int) -> bool:
    """Whether visible token j ends in a sentence's last mark (its closing quotes and brackets may
    be tokens of their own, after a visible mark)."""
    tail = (pieces[j] or "").rstrip()
    if not tail or tail[-1] not in _ENDINGS:  # most tokens: no mark, no closer
        return False
    while tail and j > 0 and not tail.strip(_CLOSERS) and pieces[j - 1]:
        j -= 1
        tail = pieces[j] + tail  # type: ignore[operator]
    return bool(_SENTENCE_END.search(tail))


def split_passages(pieces: Sequence[str | None], max_tokens: int) -> list[Passage]:
    """R_0 (``pieces``) cut into passages of at most ``max_tokens`` tokens where it can be (module
    docstring): a range with no place to cut (one span longer than ``max_tokens``) stays whole.
    The passages and the gaps between them cover every position once."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 16:
        raise InvalidParameterError(f"passage_tokens must be an integer >= 16, got {max_tokens!r}")
    found = gaps(pieces)
    bounds = _pack(found, max_tokens, 0, len(pieces), (LINE, SENTENCE, SPACE))
    between = {(g.start, g.end): g.text for g in found}
    return [Passage(a, b, between[(bounds[k - 1][1], a)] if k else "") for k, (a, b) in enumerate(bounds)]


def _pack(found: Sequence[Gap], limit: int, lo: int, hi: int, kinds: tuple[int, ...]) -> list[tuple[int, int]]:
    """Passages of positions ``lo:hi``: greedy runs of the pieces between gaps of the first kind
    (or a preferred one), a piece over ``limit`` cut again at the next kinds."""
    if hi - lo <= limit or not kinds:
        return [(lo, hi)]
    cuts = [g for g in found if g.kind <= kinds[0] and lo < g.start and g.end < hi]
    pieces, start = [], lo
    for g in cuts:
        pieces.append((start, g.start))
        start = g.end
    pieces.append((start, hi))
    out: list[tuple[int, int]] = []
    for a, b in pieces:
        if b - a > limit:
            out += _pack(found, limit, a, b, kinds[1:])
        elif out and b - out[-1][0] <= limit:  # the gap between them rejoins the passage
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out
