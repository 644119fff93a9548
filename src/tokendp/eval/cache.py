"""Resumable evaluations: one JSON record per (setting, item) under ``out/cache/<run-hash>/``.

A record is written (atomically, through a temporary file) as soon as its item is done, so a
killed run resumes where it stopped. Records hold numbers only, never text: the items may be
private documents.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any


class ResultCache:
    """Per-(setting key, item id) JSON records under ``out/cache/<run_hash>/<key>/``.

    ``config`` is a dataclass with a ``run_hash()`` of what changes results; it is written
    beside the records so that a cache folder says which run it belongs to.
    """

    def __init__(self, out: Path, config: Any) -> None:
        self.root = Path(out) / "cache" / config.run_hash()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "config.json").write_text(json.dumps(asdict(config), indent=2))

    def path(self, key: str, item: str) -> Path:
        return self.root / key / f"{item}.json"

    def get(self, key: str, item: str) -> dict | None:
        p = self.path(key, item)
        return json.loads(p.read_text()) if p.is_file() else None

    def put(self, key: str, item: str, record: dict) -> None:
        p = self.path(key, item)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(p)
