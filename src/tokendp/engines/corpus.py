"""A corpus of documents to rewrite: records ``{id, text, spans?}`` in JSONL or Parquet.

:func:`scan_corpus` reads the whole file once before any model is loaded and checks every
record, so a bad line fails the run at once with its line (JSONL) or row (Parquet) number:
malformed JSON, a missing or non-string ``text``, an id that is not a string or an integer,
ids of mixed types, a duplicate id, malformed spans. Messages name lines, rows and ids, never
text. It keeps only the ids (in input order), so memory grows with the number of documents,
not their size; :meth:`Corpus.records` reads the records again when they are needed.

``id`` is optional for the local engine, which numbers records by line (JSONL) or row
(Parquet), 1-based; ``spans`` is a list of ``{start, end, label}`` character offsets (in
Parquet, a list of structs or a JSON string), or absent to run the tagger.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tokendp.errors import InvalidInputError
from tokendp.text.taggers import spans_from_json

Format = Literal["jsonl", "parquet"]
FORMATS: dict[str, Format] = {".jsonl": "jsonl", ".parquet": "parquet"}


@dataclass(frozen=True)
class CorpusRecord:
    """One document: its id, text and spans as JSON text (None: run the tagger)."""

    id: str | int
    text: str
    spans: str | None

    def to_row(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "spans": self.spans}


@dataclass(frozen=True)
class Corpus:
    """A checked corpus file: its format, its ids in input order, and whether a record has no
    spans (so the run needs a tagger)."""

    path: Path
    format: Format
    ids: tuple[str | int, ...]
    needs_tagger: bool = False

    def records(self) -> Iterator[CorpusRecord]:
        """The records in input order (read again from the file)."""
        for where, number, raw in _raw_records(self.path, self.format):
            yield parse_record(raw, where=where, default_id=number)


def corpus_format(path: str | Path) -> Format:
    """``jsonl`` or ``parquet`` from the file name."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise InvalidInputError(f"{path}: a corpus is a .jsonl or .parquet file")
    return FORMATS[suffix]


def scan_corpus(path: str | Path, *, require_ids: bool = False) -> Corpus:
    """Check every record of ``path`` and return the corpus (see the module docstring).

    ``require_ids``: every record must carry an ``id`` (the Ray engine, whose readers do not
    see line numbers).
    """
    path = Path(path)
    fmt = corpus_format(path)
    if not path.is_file():
        raise InvalidInputError(f"{path}: no such file")
    ids, needs_tagger = scan_records(_raw_records(path, fmt), str(path), require_ids=require_ids)
    return Corpus(path, fmt, ids, needs_tagger)


def scan_records(raws: Iterable[tuple[str, int, Any]], name: str, *, require_ids: bool = False
                 ) -> tuple[tuple[str | int, ...], bool]:
    """Check every raw record of ``raws`` ((where, 1-based number, raw record), from the input
    ``name``) as :func:`scan_corpus` does; return the ids in input order and whether a record
    has no spans."""
    first_seen: dict[str | int, str] = {}
    id_type: type | None = None
    needs_tagger = False
    for where, number, raw in raws:
        if require_ids and raw.get("id") is None:
            raise InvalidInputError(f"{name}, {where}: no \"id\"; the ray engine needs an id on every record "
                                    "(the local engine numbers records by line)")
        rec = parse_record(raw, where=f"{name}, {where}", default_id=number)
        if id_type is not None and type(rec.id) is not id_type:
            raise InvalidInputError(f"{name}, {where}: id {json.dumps(rec.id)} is not of the type of the ids "
                                    f"before it ({id_type.__name__}); give every record an id of one type")
        id_type = type(rec.id)
        if rec.id in first_seen:
            raise InvalidInputError(f"{name}, {where}: duplicate id {json.dumps(rec.id)} "
                                    f"(first at {first_seen[rec.id]}); ids must be unique")
        first_seen[rec.id] = where
        needs_tagger = needs_tagger or rec.spans is None
    if not first_seen:
        raise InvalidInputError(f"{name} holds no documents")
    return tuple(first_seen), needs_tagger


def parse_record(raw: Any, *, where: str, default_id: int | None) -> CorpusRecord:
    """Check one raw record (a dict) and return it; ``where`` prefixes every message."""
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{where}: expected an object with a \"text\" string (and optionally \"id\" "
                                "and \"spans\")")
    text = raw.get("text")
    if not isinstance(text, str):
        raise InvalidInputError(f"{where}: \"text\" is missing or not a string")
    doc_id = default_id if raw.get("id") is None else raw["id"]
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
        raise InvalidInputError(f"{where}: \"id\" must be a string or an integer")
    return CorpusRecord(doc_id, text, _spans_json(raw.get("spans"), text, where))


def _spans_json(spans: Any, text: str, where: str) -> str | None:
    """Spans as canonical JSON text after checking them against ``text``; None if absent."""
    if spans is None:
        return None
    if isinstance(spans, str):  # Parquet may hold them as JSON text
        try:
            spans = json.loads(spans)
        except json.JSONDecodeError:
            raise InvalidInputError(f"{where}: \"spans\" is not valid JSON") from None
    if isinstance(spans, list):  # Parquet structs carry absent fields as nulls
        spans = [{k: v for k, v in s.items() if v is not None} if isinstance(s, dict) else s for s in spans]
    try:
        spans_from_json(spans, text)
    except InvalidInputError as err:
        raise InvalidInputError(f"{where}: {err}") from None
    return json.dumps(spans, ensure_ascii=False)


def _raw_records(path: Path, fmt: Format) -> Iterator[tuple[str, int, Any]]:
    """(where, 1-based number, raw record) for every record of the file."""
    yield from (_jsonl_records(path) if fmt == "jsonl" else _parquet_records(path))


def _jsonl_records(path: Path) -> Iterator[tuple[str, int, Any]]:
    """Lines end at "\\n" only (as in :func:`jsonl_lines`), not at the other characters Python's
    text mode or ``str.splitlines`` also break at (U+2028 may stand raw inside a JSON string)."""
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidInputError(f"{path}, line {n}: not UTF-8 text") from None
            if not line.strip():
                continue
            try:
                yield f"line {n}", n, json.loads(line)
            except json.JSONDecodeError:
                raise InvalidInputError(f"{path}, line {n}: not valid JSON") from None


def jsonl_lines(data: bytes) -> Iterator[str]:
    """The non-blank lines of a JSONL file's bytes, split as :func:`scan_corpus` splits them."""
    return (line for line in data.decode("utf-8").split("\n") if line.strip())


def _parquet_records(path: Path, batch_rows: int = 1024) -> Iterator[tuple[str, int, Any]]:
    import pyarrow.parquet as pq

    try:
        pfile = pq.ParquetFile(path)
    except Exception as err:  # pyarrow raises several types for a file that is not Parquet
        raise InvalidInputError(f"{path}: not a Parquet file ({type(err).__name__})") from None
    names = set(pfile.schema_arrow.names)
    if "text" not in names:
        raise InvalidInputError(f"{path}: no \"text\" column (columns: {', '.join(sorted(names))})")
    columns = [c for c in ("id", "text", "spans") if c in names]
    n = 0
    for batch in pfile.iter_batches(batch_size=batch_rows, columns=columns):
        for raw in batch.to_pylist():
            n += 1
            yield f"row {n}", n, raw
