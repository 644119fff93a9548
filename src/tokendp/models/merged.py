"""The rewriter with its LoRA adapter merged in, cached once as a ready model directory.

Merging the adapter (``HFBackend.merge_adapter``: every adapted layer becomes ``W + s B A``)
costs every process about 1.2 s on a laptop CPU, most of it in peft's per-layer merge, plus
peft's own import. The merged weights are a function of the inputs listed below and nothing
else, so they are saved once (safetensors, in the merge's dtype) and later loads read that
directory like any model, without peft.

The cache key is the sha256 of a canonical JSON of everything that determines the merged
weights (:func:`merge_fields`):

- the base conversion's marker: the GGUF's sha256, the conversion's cache format and the
  transformers version that converted it (:mod:`tokendp.models.cache`);
- the sha256 of each of the adapter's files that the merge or the backend reads:
  ``adapter_config.json`` (r, alpha, rsLoRA, DoRA, targets), the weights
  (``adapter_model.safetensors`` or ``.bin``) and ``tokendp.json`` (prompt options, copied in);
- the dtype of the merge: ``s B A`` is formed in float32 and rounded once into the weight dtype,
  so float32 and bfloat16 give different weights;
- the device type of the merge (``cpu``, ``cuda``, ...): the matmul ``B A`` may round
  differently on another kind of device;
- the torch, transformers and peft versions (how the merge is computed and saved).

The directory is ``<cache root>/rewriter-merged-<first 12 hex of the key>-<dtype>``, written
atomically (:func:`tokendp.models.cache.write_atomically`) with its own marker
(:data:`tokendp.models.cache.MARKER`, ``kind`` ``merged-rewriter``, the full key and its fields).
It holds the merged weights and config (``save_pretrained``), the base's tokenizer files as
they are, and the adapter's ``tokendp.json``, so that ``HFBackend.load`` of it gives the same
backend as the merge in memory. A directory whose marker is missing or names another key, or
that misses a listed file, is reported (:func:`check_merged`) and rebuilt by the next load.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tokendp.models.cache import MARKER, ModelCacheError, read_marker, sha256_of, write_atomically

MERGED_FORMAT = 1
KIND = "merged-rewriter"
PREFIX = "rewriter-merged-"
MERGE_STEPS = ("loading the base model", "merging the adapter", "saving")
# The adapter's files that determine the merged model (weights: one of the two).
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin", "tokendp.json")
# What the merged model's save_pretrained writes; every other file of the base (the tokenizer's)
# is copied as it is.
_MODEL_FILES = ("config.json", "generation_config.json")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".safetensors.index.json", ".bin.index.json")
APPROX_MB = {"float32": 540, "bfloat16": 270, "float16": 270}  # SmolLM2-135M's 134.5M parameters


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def base_marker(base: Path) -> dict[str, Any]:
    """The base conversion's marker (read as it is: the caller has checked the base cache)."""
    try:
        return json.loads((base / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ModelCacheError(f"the base model cache {base} has no readable {MARKER}; rebuild it with "
                              "`tokendp model build smollm2 --force`") from None


def adapter_hashes(adapter: Path) -> dict[str, str]:
    """sha256 of each of the adapter's files in :data:`ADAPTER_FILES` that exists."""
    return {name: sha256_of(adapter / name) for name in ADAPTER_FILES if (adapter / name).is_file()}


def merge_fields(adapter: str | Path, base: str | Path, dtype: str, device_type: str) -> dict[str, Any]:
    """Everything the merged weights depend on (see the module docstring), as plain JSON values."""
    import torch
    import transformers

    marker = base_marker(Path(base))
    return {"format": MERGED_FORMAT, "kind": KIND,
            "base": {"sha256": marker.get("sha256"), "format": marker.get("format"),
                     "transformers": marker.get("transformers")},
            "adapter": adapter_hashes(Path(adapter)), "dtype": dtype, "device": device_type,
            "torch": torch.__version__, "transformers": transformers.__version__, "peft": _version("peft")}


def merge_key(fields: dict[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of :func:`merge_fields`."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def merged_dir(fields: dict[str, Any], root: str | Path) -> Path:
    """``<root>/rewriter-merged-<first 12 hex of the key>-<dtype>``."""
    return Path(root) / f"{PREFIX}{merge_key(fields)[:12]}-{fields['dtype']}"


def check_merged(path: Path, fields: dict[str, Any]) -> dict[str, Any]:
    """The marker of a finished merged cache at ``path`` for ``fields``; raise on a partial or
    stale one (the next ``--model rewriter`` load, or ``tokendp model build rewriter --force``,
    rebuilds it)."""
    rebuild = (f"it is rebuilt on the next load of the rewriter, or with `tokendp model build rewriter --force`; "
               f"or delete {path}")

    def stale(marker: dict[str, Any]) -> str | None:
        if marker.get("kind") == KIND and marker.get("key") == merge_key(fields):
            return None
        return f"other inputs (key {str(marker.get('key'))[:12]}...)"

    return read_marker(path, "the merged rewriter cache", rebuild, stale)


def is_merged(path: Path, fields: dict[str, Any]) -> bool:
    try:
        check_merged(path, fields)
        return True
    except ModelCacheError:
        return False


def write_merged(dest: Path, fields: dict[str, Any], save_model: Callable[[Path], None], *, base: str | Path,
                 adapter: str | Path, force: bool = False) -> Path:
    """Write the merged cache at ``dest`` atomically: ``save_model(tmp)`` saves the merged
    model (``save_pretrained``: config, generation config, weights); the base's other files
    (tokenizer) and the adapter's ``tokendp.json`` are copied beside it; the marker goes last.
    Raises ``OSError`` (read-only or full disk) and whatever ``save_model`` raises; nothing is
    left under ``dest`` then."""
    base, adapter = Path(base), Path(adapter)

    def fill(tmp: Path) -> dict[str, Any]:
        save_model(tmp)
        for item in base.iterdir():
            if (item.is_file() and item.name != MARKER and item.name not in _MODEL_FILES
                    and not item.name.endswith(_WEIGHT_SUFFIXES) and not (tmp / item.name).exists()):
                shutil.copy2(item, tmp / item.name)
        if (adapter / "tokendp.json").is_file():
            shutil.copy2(adapter / "tokendp.json", tmp / "tokendp.json")
        return {**fields, "key": merge_key(fields), "adapter_path": str(adapter)}

    write_atomically(dest, fill, lambda path: is_merged(path, fields), force=force)
    check_merged(dest, fields)
    return dest


def directory_mb(path: Path) -> float:
    """Size of the files under ``path`` in MB (10^6 bytes)."""
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6, 1)


def merged_status(adapter: Path, base: Path, *, dtype: str = "float32", device_type: str = "cpu") -> dict[str, Any]:
    """Whether the merged cache for ``adapter`` on ``base`` (converted, checked by the caller)
    exists for ``dtype`` on ``device_type``: its path, size, and the other merged caches beside
    it (other adapters, dtypes or versions), which nothing reads any more unless they match."""
    fields = merge_fields(adapter, base, dtype, device_type)
    path = merged_dir(fields, base.parent)
    status: dict[str, Any] = {"path": str(path), "dtype": dtype, "device": device_type,
                              "approx_mb": APPROX_MB.get(dtype)}
    try:
        check_merged(path, fields)
        status["built"], status["mb"] = True, directory_mb(path)
    except ModelCacheError as err:
        status["built"] = False
        if path.exists():
            status["problem"] = str(err)
    others = [p for p in sorted(base.parent.glob(f"{PREFIX}*")) if p.is_dir() and p != path]
    status["others"] = [{"path": str(p), "mb": directory_mb(p)} for p in others]
    return status

