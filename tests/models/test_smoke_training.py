"""The training script runs end to end (tiny config) and exports a loadable model."""

from __future__ import annotations

import json

import pytest
from repo_scripts import load_script

pytest.importorskip("faker")


def _script():
    return load_script("scripts/train_default_model.py")


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
