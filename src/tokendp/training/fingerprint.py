"""The identity of a training run: a content hash of its data and its settings.

A run resumes only from a checkpoint of the same run, that is, with the same fingerprint

    SHA-256( "tokendp.training/1" || H(settings) || H(record_1) || ... || H(record_n) || n )

where ``settings`` is written as canonical JSON (sorted keys, no spaces), every record is
hashed on its own (SHA-256 of its UTF-8 text, or of its canonical JSON when it is not a
string), the record hashes follow in order and n (8 bytes, big-endian) closes the input. Any change of a record's text, of their
order or number, or of a setting gives another fingerprint, whatever the corpus's size (a
record count would let a same-sized corpus of other text resume the old run).

A fingerprint is a deterministic function of the data: it may sit beside non-private
training state (a checkpoint, a non-DP adapter), never in a differentially private release.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tokendp.errors import InvalidInputError

_DOMAIN = b"tokendp.training/1"
RUN_FILE = ".run.json"


def _canonical(value: Any) -> bytes:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise TypeError(f"training settings and records must be JSON values: {exc}") from None


def fingerprint(*, data: Iterable[Any], settings: Mapping[str, Any]) -> str:
    """The hex SHA-256 fingerprint of a run (see the module docstring): ``data`` is the records
    in training order (strings, or JSON values such as token id lists), ``settings`` every
    parameter that changes what the run computes."""
    h = hashlib.sha256(_DOMAIN)
    h.update(hashlib.sha256(_canonical(dict(settings))).digest())
    count = 0
    for record in data:
        raw = record.encode("utf-8") if isinstance(record, str) else _canonical(record)
        h.update(hashlib.sha256(raw).digest())
        count += 1
    h.update(count.to_bytes(8, "big"))
    return h.hexdigest()


def mismatch_error(where: Path) -> InvalidInputError:
    return InvalidInputError(f"{where} holds a run with other data or settings; use a new --out directory "
                             "(or the same data and settings to resume)")


def check_run(directory: str | Path, run: str) -> None:
    """Claim ``directory`` for the run of fingerprint ``run``: write ``.run.json`` there the first
    time, and refuse a directory that another run (other data or settings) has claimed."""
    root = Path(directory)
    path = root / RUN_FILE
    if path.is_file():
        try:
            saved = json.loads(path.read_text(encoding="utf-8")).get("fingerprint")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            raise InvalidInputError(f"{path} is not a tokendp run file; remove it or use a new --out directory") from None
        if saved != run:
            raise mismatch_error(root)
        return
    root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"fingerprint": run}) + "\n", encoding="utf-8")
    tmp.replace(path)
