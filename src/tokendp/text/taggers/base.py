"""The Tagger protocol: anything with ``tag(text) -> list[Span]``."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from tokendp.text.spans import Span


@runtime_checkable
class Tagger(Protocol):
    """Finds private spans in a text.

    ``tag`` returns character-offset spans into ``text`` (end exclusive), labelled with
    TAB's eight categories (PERSON, CODE, LOC, ORG, DEM, DATETIME, QUANTITY, MISC),
    sorted by start and not overlapping one another.
    """

    name: str

    def tag(self, text: str) -> list[Span]: ...
