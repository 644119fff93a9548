"""The embedded default model: a small offline rewriter shipped inside the package.

``DEFAULT_MODEL_DIR`` is a standard Hugging Face model directory (``config.json``, fp16
``model.safetensors``, tokenizer files) plus ``tokendp.json`` (prompt template, placeholder,
stop strings) and ``training.json`` (how it was trained). It loads offline with
``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokendp.errors import InvalidInputError

DEFAULT_MODEL_DIR: Path = Path(__file__).resolve().parent / "default"

_TASK = ("rewriter: '<|doc|>{document}<|rewrite|>' -> the document again, with plausible "
         "fillers where '<|mask|>' placeholders stand; '<|end|>' ends it")


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InvalidInputError(
            f"{path.name} is missing from {path.parent}; reinstall tokendp or re-export the "
            "default model with scripts/train_default_model.py --export")
    return json.loads(path.read_text(encoding="utf-8"))


def prompt_format(model_dir: str | Path = DEFAULT_MODEL_DIR) -> dict[str, Any]:
    """The model's ``tokendp.json``: prompt_template, placeholder and stop strings."""
    return _read_json(Path(model_dir) / "tokendp.json")


def load_default_model(*, dtype: Any = None, model_dir: str | Path = DEFAULT_MODEL_DIR):
    """(model, tokenizer) of the embedded model, in eval mode; float32 unless ``dtype`` given.

    The weights are stored in fp16; CPU matmuls are faster and exact enough in float32.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = Path(model_dir)
    _read_json(model_dir / "config.json")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype or torch.float32)
    return model.eval(), tokenizer


def model_info(model_dir: str | Path = DEFAULT_MODEL_DIR) -> dict[str, Any]:
    """What the embedded model is: architecture, size, vocabulary, context, training, metrics."""
    model_dir = Path(model_dir)
    config = _read_json(model_dir / "config.json")
    training = _read_json(model_dir / "training.json")
    weights = model_dir / "model.safetensors"
    return {
        "path": str(model_dir),
        "architecture": (config.get("architectures") or ["?"])[0],
        "parameters": training.get("parameters"),
        "layers": config["num_hidden_layers"], "hidden_size": config["hidden_size"],
        "heads": config["num_attention_heads"], "ffn_size": config["intermediate_size"],
        "vocab_size": config["vocab_size"],
        "context": config["max_position_embeddings"],
        "trained_context": training.get("trained_context"),
        "weights_dtype": config.get("dtype") or config.get("torch_dtype"),
        "weights_mb": round(weights.stat().st_size / 2**20, 1) if weights.exists() else None,
        "task": _TASK,
        "prompt": prompt_format(model_dir),
        "training": {k: training.get(k) for k in
                     ("data", "objective", "step", "total_steps", "tokens_seen",
                      "train_minutes", "hardware")},
        "metrics": training.get("metrics", {}),
    }
