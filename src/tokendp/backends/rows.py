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
    """Rows that advance together; row 0 is the public row.

    ``public_prefix``: how many leading tokens every row holds in common *by construction* and
    which are public (a prompt template before the first private token), declared by the job
    from public data only. The backend computes them once for all rows. It is never measured
    on the rows themselves: how far private rows happen to agree with the public one depends
    on private text, and so would the batch layout, and with it the rounding of the public
    row's logits (docs/privacy.md, "Equal rows, equal logits").

    ``public_length``: the length every row is padded to, declared where the rows' own lengths
    are private (a reference, an untrusted chunk: the job cuts them to a public number of
    tokens); None: the longest row, for rows whose lengths are public.
    """

    rows: tuple[Row, ...]
    public_prefix: int = 0
    public_length: int | None = None

    def __post_init__(self) -> None:
        if len(self.rows) == 0:
            raise InvalidInputError("a sequence needs at least one row")
        first = self.rows[0].ids[:self.public_prefix]
        if self.public_prefix < 0 or any(r.ids[:self.public_prefix] != first for r in self.rows):
            raise ValueError(f"public_prefix {self.public_prefix} is not a prefix common to every row")
        if self.public_length is not None and self.max_length > self.public_length:
            raise ValueError(f"a row is longer than public_length {self.public_length}")

    @classmethod
    def from_ids(cls, rows: Sequence[Sequence[int]], adapter: str | None = None, *,
                 public_prefix: int = 0, public_length: int | None = None) -> RowSequence:
        return cls(tuple(Row(tuple(int(t) for t in r), adapter) for r in rows), public_prefix, public_length)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def max_length(self) -> int:
        return max(len(r.ids) for r in self.rows)

    @property
    def layout_length(self) -> int:
        """The length the backend lays every row out in: ``public_length``, else the longest row."""
        return self.max_length if self.public_length is None else self.public_length

    def shared_prefix_length(self) -> int:
        """Tokens at the start computed once for every row: the declared ``public_prefix``, at
        most ``min row length - 1`` so that every row keeps at least one token of its own for
        the prefill pass that produces its first logits; 0 for a single row (nothing to share)
        or rows read with different adapters."""
        if len(self.rows) == 1 or len({r.adapter for r in self.rows}) > 1:
            return 0
        return min(self.public_prefix, min(len(r.ids) for r in self.rows) - 1)
