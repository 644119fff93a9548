"""Rows and sequences: what a backend is asked to run.

A *row* is one context the language model reads: token ids plus, optionally, the name of a
LoRA adapter to read it with (PMixED runs the same prompt through N adapters). A *sequence*
owns several rows that advance together: at every step they all receive the same sampled
token. DP-Fusion owns 1 + m rows (public + one per privacy group), InvisibleInk 1 + B rows.
Row 0 of a sequence is always the public row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokendp.errors import InvalidInputError


@dataclass(frozen=True)
class Row:
    """Token ids of one context and the adapter (None: the base model) that reads them."""

    ids: tuple[int, ...]
    adapter: str | None = None

    def __post_init__(self) -> None:
        if len(self.ids) == 0:
            raise InvalidInputError("a row needs at least one token id")


@dataclass(frozen=True)
class RowSequence:
    """Rows that advance together; row 0 is the public row."""

    rows: tuple[Row, ...]

    def __post_init__(self) -> None:
        if len(self.rows) == 0:
            raise InvalidInputError("a sequence needs at least one row")

    @classmethod
    def from_ids(cls, rows: Sequence[Sequence[int]], adapter: str | None = None) -> RowSequence:
        return cls(tuple(Row(tuple(int(t) for t in r), adapter) for r in rows))

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def max_length(self) -> int:
        return max(len(r.ids) for r in self.rows)

    def shared_prefix_length(self) -> int:
        """Tokens at the start that every row has in common (and reads with the same adapter).

        At most ``min row length - 1``, so that every row keeps at least one token of its own
        for the prefill pass that produces its first logits; 0 for a single row (nothing to share).
        """
        if len(self.rows) == 1 or len({r.adapter for r in self.rows}) > 1:
            return 0
        first, limit = self.rows[0].ids, min(len(r.ids) for r in self.rows) - 1
        n = 0
        while n < limit and all(r.ids[n] == first[n] for r in self.rows):
            n += 1
        return n
