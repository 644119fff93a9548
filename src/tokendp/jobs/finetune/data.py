"""Training records for DP fine-tuning: one record = one sequence = the privacy unit.

Every record of the corpus (one JSONL line's text field, or one planted canary) becomes exactly
one training sequence, never split or packed with another: a record then touches one
per-sample gradient, which is what the per-record guarantee needs (docs/privacy.md, "DP-SGD
and ATDP"). A record longer than the context is an error before training, never silently cut.

Loss weights (ATDP): w_t = 1 if token t overlaps a span the tiered detector marks sensitive in
its own record, else ``weight``; ``weight`` = 1 everywhere for ``none`` and ``dpsgd``. The
weights of a record depend on that record alone (the detector is a fixed function of one text)
and on public parameters, never on the rest of the corpus.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.spans import Span


@dataclass(frozen=True)
class Record:
    """Token ids of one record and the loss weight of predicting each of them."""

    ids: tuple[int, ...]
    weights: tuple[float, ...]


def paper_weight(*, target: float, fraction: float) -> float:
    """ATDP's non-sensitive weight w = a (1 - r) / (r (1 - a)): with a fraction ``a`` of the
    tokens sensitive, it gives the sensitive tokens the share ``r`` of the total weight
    (a / (a + w (1 - a)) = r). ``a`` must be public (an estimate from public text), never
    measured on the private corpus: a weight computed from the corpus would make every record's
    gradient depend on the others."""
    for name, value in (("sensitive weight target r", target), ("sensitive fraction a", fraction)):
        if not (isinstance(value, (int, float)) and 0 < value < 1):
            raise InvalidParameterError(f"{name} must lie strictly between 0 and 1, got {value!r}")
    return fraction * (1 - target) / (target * (1 - fraction))


def token_weights(offsets: Sequence[tuple[int, int]], spans: Sequence[Span], weight: float) -> tuple[float, ...]:
    """1.0 for a token whose characters overlap a sensitive span, ``weight`` for the others."""
    return tuple(1.0 if any(a < s.end and s.start < b for s in spans) else weight for a, b in offsets)


def build_records(texts: Sequence[str], tokenizer: Any, *, max_length: int, weight: float = 1.0, truncate: bool = False,
                  detect: Callable[[str], list[Span]] | None = None, on_record: Callable[[int], None] | None = None) -> list[Record]:
    """Tokenise every text into one :class:`Record` (BOS/EOS as the tokenizer adds them).

    Raises before any training if a text is empty, has fewer than 2 tokens (no next-token loss)
    or more than ``max_length`` tokens; messages give the record's position, never its text.
    With ``truncate`` a longer text keeps its first ``max_length`` tokens instead (as
    ``ensemble train`` reads its shards): the cut record is still one record, one privacy unit,
    and depends on its own text only.
    """
    if not texts:
        raise InvalidInputError("the corpus holds no records")
    if detect is not None and not getattr(tokenizer, "is_fast", False):
        raise InvalidInputError("ATDP's token weights need a fast tokenizer (character offsets)")
    records = []
    for i, text in enumerate(texts):
        encoded = tokenizer(text, return_offsets_mapping=detect is not None)
        ids = list(encoded["input_ids"])
        if truncate:
            ids = ids[:max_length]
        if len(ids) > max_length:
            raise InvalidInputError(
                f"record {i + 1} has {len(ids)} tokens, more than the context of {max_length}; split long records "
                "before training (each record is one privacy unit) or raise --max-length up to the model's context")
        if len(ids) < 2 or not text.strip():
            raise InvalidInputError(f"record {i + 1} is empty or has fewer than 2 tokens; remove it")
        if detect is None:
            weights = (1.0,) * len(ids)
        else:
            offsets = [tuple(o) for o in encoded["offset_mapping"]][:len(ids)]
            weights = token_weights(offsets, detect(text), weight)
        records.append(Record(tuple(ids), weights))
        if on_record is not None:
            on_record(1)
    return records


def read_texts(path: str | Path, *, text_field: str = "text") -> list[str]:
    """The text of every record of a JSONL corpus (the shared reader of ``ensemble train``)."""
    from tokendp.ensemble.train import read_corpus

    texts, _ = read_corpus(path, text_field=text_field)
    if not texts:
        raise InvalidInputError(f"{path}: the corpus holds no records")
    return texts


def pad_batch(records: Sequence[Record], pad_id: int) -> dict[str, Any]:
    """Right-padded ``input_ids`` and ``attention_mask`` (B, L) and the target weights (B, L-1):
    weight of predicting token t+1 from tokens <= t, 0 on padding."""
    import torch

    width = max(len(r.ids) for r in records)
    ids = torch.full((len(records), width), pad_id, dtype=torch.long)  # (B, L)
    mask = torch.zeros((len(records), width), dtype=torch.long)  # (B, L)
    weights = torch.zeros((len(records), width), dtype=torch.float32)  # (B, L)
    for i, r in enumerate(records):
        ids[i, :len(r.ids)] = torch.tensor(r.ids, dtype=torch.long)
        mask[i, :len(r.ids)] = 1
        weights[i, :len(r.ids)] = torch.tensor(r.weights, dtype=torch.float32)
    return {"input_ids": ids, "attention_mask": mask, "weights": weights[:, 1:]}
