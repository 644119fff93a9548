"""Reading user documents: a UTF-8 text file, or JSONL with one {"id", "text"} per line.

Every problem becomes an :class:`~tokendp.errors.InvalidInputError` that names the file, the
line or byte position and the problem, never the document's content.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokendp.errors import InvalidInputError
from tokendp.text.layout import BOM

JSONL_SUFFIXES = (".jsonl", ".ndjson")


@dataclass(frozen=True)
class Document:
    id: str
    text: str


def is_jsonl(path: str | Path) -> bool:
    """Whether ``path`` is read as JSONL (by its suffix: .jsonl or .ndjson)."""
    return Path(path).suffix.lower() in JSONL_SUFFIXES


def _decode(path: Path, *, keep_bom: bool = False) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InvalidInputError(f"input file not found: {path}") from None
    except IsADirectoryError:
        raise InvalidInputError(f"input is a directory, not a file: {path}") from None
    return decode_text(data, str(path), keep_bom=keep_bom)


def decode_text(data: bytes, where: str, *, keep_bom: bool = True) -> str:
    """UTF-8 bytes as text, every code point kept (a BOM too, unless not ``keep_bom``), line
    ends untouched: span offsets count the text exactly as given (:mod:`tokendp.text.layout`)."""
    if b"\x00" in data[:8192]:
        raise InvalidInputError(f"{where} looks like a binary file (it holds NUL bytes); give a UTF-8 text file")
    try:
        return data.decode("utf-8" if keep_bom else "utf-8-sig")
    except UnicodeDecodeError as err:
        raise InvalidInputError(f"{where} is not valid UTF-8 (bad byte at offset {err.start}); "
                                "convert it, e.g. iconv -t UTF-8") from None


def _check_text(text: str, where: str) -> str:
    if not text.lstrip(BOM).strip():
        raise InvalidInputError(f"{where} is empty: there is no text")
    return text


def read_text_file(path: str | Path) -> str:
    """The whole file as text, exactly as given (UTF-8; a BOM and CRLF line ends are kept, so
    that span offsets into the file stay valid), which must not be empty."""
    path = Path(path)
    return _check_text(_decode(path, keep_bom=True), str(path))


def read_text_input(path: str) -> str:
    """:func:`read_text_file`, or standard input for ``-``."""
    if path == "-":
        return _check_text(decode_text(sys.stdin.buffer.read(), "standard input"), "standard input")
    return read_text_file(path)


def text_lines(path: str | Path) -> list[str]:
    """The non-blank lines of a UTF-8 text file (BOM allowed), without their line ends."""
    return [line for line in _decode(Path(path)).splitlines() if line.strip()]


def jsonl_records(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, record) for every non-blank line of a JSONL file: ``where`` names the file and the
    line (never its content) for error messages; each record must be a JSON object."""
    path = Path(path)
    for number, line in enumerate(_decode(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise InvalidInputError(f"{where} is not valid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(record, dict):
            raise InvalidInputError(f"{where} needs a JSON object")
        yield where, record


def read_jsonl(path: str | Path) -> list[Document]:
    """Documents from JSONL: each non-blank line an object with a string "text" (and an "id")."""
    documents = []
    for where, record in jsonl_records(path):
        if not isinstance(record.get("text"), str):
            raise InvalidInputError(f'{where} needs an object with a string "text" field')
        number = where.rsplit(" ", 1)[-1]  # the line number, the id when the record has none
        documents.append(Document(str(record.get("id", number)), _check_text(record["text"], where)))
    if not documents:
        raise InvalidInputError(f"{path} holds no documents")
    return documents


def read_documents(path: str | Path) -> list[Document]:
    """JSONL documents, or the text file as one document whose id is the file name."""
    if is_jsonl(path):
        return read_jsonl(path)
    return [Document(Path(path).name, read_text_file(path))]
