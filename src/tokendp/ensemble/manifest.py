"""The ensemble directory: ``manifest.json`` and one PEFT adapter directory per shard.

Layout (written by :mod:`tokendp.ensemble.train`)::

    DIR/manifest.json            format, base model, N, shards, seed, hyper-parameters
    DIR/shard-000/               adapter_config.json + adapter_model.safetensors (PEFT's layout)
    DIR/shard-001/ ...

Shard names are positional (``shard-000`` ...), never derived from the data (a ``--group-by``
value such as a user id must not become a file name). The manifest holds counts and parameters
only, never text.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tokendp.errors import InvalidInputError

MANIFEST_FILE = "manifest.json"
FORMAT = "tokendp.ensemble/1"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def shard_name(index: int) -> str:
    return f"shard-{index:03d}"


@dataclass(frozen=True)
class ShardInfo:
    """One shard: its name (= its adapter's directory), records and training tokens."""

    name: str
    records: int
    tokens: int


@dataclass(frozen=True)
class Manifest:
    """What ``tokendp predict`` needs to rebuild the ensemble, and what was done to train it."""

    base_model: str
    shards: tuple[ShardInfo, ...]
    seed: int
    text_field: str = "text"
    group_by: str | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)

    @property
    def ensemble_size(self) -> int:
        return len(self.shards)

    @property
    def shard_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.shards)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "base_model": self.base_model, "ensemble_size": self.ensemble_size,
                "shards": [asdict(s) for s in self.shards], "seed": self.seed, "text_field": self.text_field,
                "group_by": self.group_by, "hyperparameters": dict(self.hyperparameters)}

    def write(self, directory: str | Path) -> Path:
        path = Path(directory) / MANIFEST_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)  # atomic: a crash never leaves half a manifest
        return path

    def adapter_dirs(self, directory: str | Path) -> dict[str, Path]:
        """{shard: adapter directory}; every shard's adapter must be there (else the ensemble
        is not finished: resume ``tokendp ensemble train``)."""
        root = Path(directory)
        missing = [s.name for s in self.shards if not adapter_complete(root / s.name)]
        if missing:
            raise InvalidInputError(
                f"{root}: unknown adapter(s) {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} "
                f"({len(missing)} of {self.ensemble_size} shards have no adapter in PEFT's layout); "
                "finish training with `tokendp ensemble train` (it resumes)")
        return {s.name: root / s.name for s in self.shards}


def adapter_complete(path: Path) -> bool:
    return all((path / f).is_file() for f in ADAPTER_FILES)


def read_manifest(directory: str | Path) -> Manifest:
    """The manifest of an ensemble directory, validated (messages name fields, never text)."""
    root = Path(directory)
    path = root / MANIFEST_FILE
    if not path.is_file():
        raise InvalidInputError(f"{root} is not an ensemble directory: no {MANIFEST_FILE} "
                                "(write one with `tokendp ensemble train`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidInputError(f"{path} is not valid JSON") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InvalidInputError(f"{path} is not a tokendp ensemble manifest (expected format {FORMAT!r})")
    try:
        shards = tuple(ShardInfo(str(s["name"]), int(s["records"]), int(s["tokens"])) for s in data["shards"])
        manifest = Manifest(str(data["base_model"]), shards, int(data["seed"]), str(data.get("text_field", "text")),
                            data.get("group_by"), dict(data.get("hyperparameters") or {}))
    except (KeyError, TypeError, ValueError) as err:
        raise InvalidInputError(f"{path}: malformed manifest ({type(err).__name__}: {err})") from None
    if not shards:
        raise InvalidInputError(f"{path}: the ensemble has no shards")
    names = [s.name for s in shards]
    if len(set(names)) != len(names) or any(not n or "/" in n or n.startswith(".") for n in names):
        raise InvalidInputError(f"{path}: shard names must be distinct directory names")
    if int(data.get("ensemble_size", len(shards))) != len(shards):
        raise InvalidInputError(f"{path}: ensemble_size does not match the number of shards")
    return manifest
