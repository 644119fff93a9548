"""The Tagger protocol: anything with ``tag(text) -> list[Span]``."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from tokendp.text.spans import Span


@runtime_checkable
class Tagger(Protocol):
    """Finds private spans in a text.

    ``tag`` returns character-offset spans into ``text`` (end exclusive), labelled with
    TAB's categories (the built-in taggers split DATETIME into DATE and DURATION, and DEM into
    OCCUPATION and DEM: :data:`tokendp.text.taggers.LABELS`), sorted by start and not
    overlapping one another.
    """

    name: str

    def tag(self, text: str) -> list[Span]: ...
