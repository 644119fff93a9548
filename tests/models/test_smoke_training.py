"""The training script runs end to end (tiny config) and exports a loadable model."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("faker")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_default_model.py"


def _script():
    spec = importlib.util.spec_from_file_location("train_default_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_smoke_training_exports_a_loadable_model(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tokendp.models import model_info
    from tokendp.models.training.trainer import export, train

    script = _script()
    cfg = script.smoke_config(str(tmp_path / "run"))
    ckpt = train(cfg)
    assert ckpt.exists()
    dest = export(tmp_path / "run", tmp_path / "export")
    model = AutoModelForCausalLM.from_pretrained(dest)
    tok = AutoTokenizer.from_pretrained(dest)
    assert model.config.eos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids("<|end|>")
    assert json.loads((dest / "tokendp.json").read_text())["placeholder"] == "<|mask|>"
    info = model_info(dest)
    assert info["training"]["step"] == cfg.total_steps
    assert info["parameters"] == sum(p.numel() for p in model.parameters())


def test_training_resumes_from_its_checkpoint(tmp_path):
    import torch

    from tokendp.models.training.trainer import train

    cfg = _script().smoke_config(str(tmp_path / "run"))
    cfg.total_steps = 4
    train(cfg)
    first = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    cfg.total_steps = 6
    train(cfg)
    second = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    assert (first["step"], second["step"]) == (4, 6)
    assert second["tokens_seen"] > first["tokens_seen"]
