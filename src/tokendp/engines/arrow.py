"""Corpus records as Arrow tables, for Ray Data's blocks: raw JSONL lines or Parquet rows in,
the checked records not yet written out. Light on purpose (no torch): Ray runs these in plain
tasks, whose processes should start fast."""

from __future__ import annotations

import json
from typing import Any

from tokendp.engines.corpus import Corpus, CorpusRecord, jsonl_lines, parse_record

COLUMNS = ("id", "text", "spans")


def record_schema(corpus: Corpus) -> Any:
    """The records' schema: the ids' type (one per corpus), text, spans as JSON text."""
    import pyarrow as pa

    id_type = pa.int64() if isinstance(corpus.ids[0], int) else pa.string()
    return pa.schema([("id", id_type), ("text", pa.string()), ("spans", pa.string())])


def parse_jsonl_files(batch: Any, *, done: frozenset, schema: Any) -> Any:
    """Whole JSONL files (a ``bytes`` column, as Ray's ``read_binary_files`` gives) -> records
    not in ``done``. (Ray's ``read_text`` splits lines with ``str.splitlines``, which also
    breaks at U+2028 and U+0085, characters a JSON string may hold raw.)"""
    return _table([parse_record(json.loads(line), where="a corpus line", default_id=None)
                   for data in batch.column("bytes").to_pylist() for line in jsonl_lines(data)], done, schema)


def parse_rows(batch: Any, *, done: frozenset, schema: Any) -> Any:
    """Parquet rows -> records not in ``done``."""
    return _table([parse_record(raw, where="a corpus row", default_id=None) for raw in batch.to_pylist()],
                  done, schema)


def to_records(batch: Any) -> list[CorpusRecord]:
    """A table of records back to :class:`CorpusRecord` objects."""
    return [CorpusRecord(r["id"], r["text"], r["spans"]) for r in batch.to_pylist()]


def _table(records: list[CorpusRecord], done: frozenset, schema: Any) -> Any:
    import pyarrow as pa

    return pa.Table.from_pylist([r.to_row() for r in records if r.id not in done], schema=schema)
