"""WikiText-2 (tokenized release) turned back into normal prose.

The release separates punctuation by spaces (" , "), splits hyphenated numbers and words
with "@-@" and replaces rare words by "<unk>". Real documents look different, so the
training text undoes these conventions; each "<unk>" is replaced by a name from a supplied
function (rare words in WikiText are mostly proper nouns).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

_AT_SEPARATORS = re.compile(r" @([-.,])@ ")
_SPACE_BEFORE = re.compile(r" ([.,;:!?%)\]}])")
_SPACE_AFTER = re.compile(r"([(\[{$£€]) ")
_POSSESSIVE = re.compile(r" ('s|'re|'ve|'ll|'d|'m|n't|s') ")
_QUOTED = re.compile(r'" ([^"]*?) "')
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"(])")


def detokenize(line: str, unk: Callable[[], str] = lambda: "Smith") -> str:
    """One WikiText line as ordinary text (spacing of punctuation, hyphens, quotes, <unk>)."""
    text = line.strip()
    text = re.sub(r"<unk>", lambda _m: unk(), text)
    text = _AT_SEPARATORS.sub(r"\1", text)
    text = _QUOTED.sub(r'"\1"', text)
    text = _POSSESSIVE.sub(r"\1 ", text + " ").strip()
    text = _SPACE_BEFORE.sub(r"\1", text)
    text = _SPACE_AFTER.sub(r"\1", text)
    return re.sub(r" {2,}", " ", text)


def paragraphs(path: str | Path, unk: Callable[[], str] = lambda: "Smith") -> Iterator[str]:
    """Detokenised body paragraphs of a WikiText file (headings and blank lines skipped)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            stripped = line.strip()
            if not stripped or stripped.startswith("="):
                continue
            yield detokenize(stripped, unk)


def sentences(paragraph: str) -> list[str]:
    """Split a paragraph into sentences at end punctuation followed by a capital."""
    return [s for s in _SENTENCE_END.split(paragraph) if s]
