"""The text a model reads, and the user's offsets into the text as given.

Spans always mean code-point offsets into the text exactly as the user gave it: a leading byte
order mark, Windows (CRLF) and old Mac (lone CR) line ends, tabs and decomposed accents all
count. The model reads a cleaner text: the leading BOM dropped and every line end made LF.
:func:`clean` returns that text with a :class:`Layout` that maps spans both ways, so the
cleaning happens after the spans are mapped through it, in every entry point (docs/sanitize.md,
"Spans and line endings"):

- :meth:`Layout.to_clean` maps the user's spans onto the clean text. A span that covers the CR
  of a CRLF pair covers its LF; a span made only of the BOM hides nothing and is dropped.
- :meth:`Layout.to_raw` maps spans found on the clean text (a tagger's) back onto the text as
  given; a span that starts or ends on the LF of a CRLF pair takes in its CR.

Only the BOM and the CR of each CRLF pair are removed; a lone CR becomes one LF, so every other
character keeps its place relative to its neighbours.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from tokendp.text.spans import Span

BOM = "\ufeff"
_CRLF = re.compile("\r\n")


@dataclass(frozen=True)
class Layout:
    """Where :func:`clean` removed characters from a text of ``raw_length`` code points: a
    leading BOM (``bom``) and the CR of each CRLF pair, at ``crs`` (offsets into the text
    without its BOM, sorted)."""

    raw_length: int
    bom: bool
    crs: tuple[int, ...]

    @property
    def identity(self) -> bool:
        return not self.bom and not self.crs

    def _clean_offset(self, p: int) -> int:
        """The clean offset of raw boundary ``p``."""
        q = max(p - self.bom, 0)
        return q - bisect.bisect_left(self.crs, q)

    def _raw_offset(self, j: int) -> int:
        """The raw boundary of clean offset ``j`` (before any CR removed at or before it)."""
        return j + bisect.bisect_left(self._removed_at, j) + self.bom

    def to_clean(self, spans: Sequence[Span]) -> list[Span]:
        """The user's spans on the clean text (see the module docstring); a span past the end
        of the text is left as it is, for the caller's bounds check to refuse."""
        if self.identity:
            return list(spans)
        out = []
        for s in spans:
            if s.end > self.raw_length or s.start < 0:
                out.append(s)
                continue
            end = s.end + 1 if (s.end - self.bom - 1) in self._cr_set else s.end  # a CR takes its LF
            start, stop = self._clean_offset(s.start), self._clean_offset(end)
            if stop > start:
                out.append(Span(start, stop, s.label, s.score, s.source))
        return out

    def to_raw(self, spans: Sequence[Span]) -> list[Span]:
        """Spans on the clean text mapped back onto the text as given."""
        if self.identity:
            return list(spans)
        return [Span(self._raw_offset(s.start), self._raw_offset(s.end), s.label, s.score, s.source) for s in spans]

    @functools.cached_property
    def _cr_set(self) -> frozenset[int]:
        return frozenset(self.crs)

    @functools.cached_property
    def _removed_at(self) -> list[int]:
        """The clean offset of each removed CR's LF."""
        return [c - i for i, c in enumerate(self.crs)]


def clean(text: str) -> tuple[str, Layout]:
    """The text as the model reads it (no leading BOM, LF line ends) and its :class:`Layout`."""
    bom = text.startswith(BOM)
    body = text[1:] if bom else text
    crs = tuple(m.start() for m in _CRLF.finditer(body))
    return body.replace("\r\n", "\n").replace("\r", "\n"), Layout(len(text), bom, crs)
