"""The shipped default model: loads offline with Auto classes and matches tokendp.json."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tokendp.models import DEFAULT_MODEL_DIR, load_default_model, model_info, prompt_format


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def test_weights_are_small_fp16_safetensors():
    weights = DEFAULT_MODEL_DIR / "model.safetensors"
    assert weights.stat().st_size <= 25 * 2**20
    config = json.loads((DEFAULT_MODEL_DIR / "config.json").read_text())
    assert (config.get("dtype") or config.get("torch_dtype")) == "float16"


def test_loads_with_auto_classes_and_has_the_rewriter_tokens():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL_DIR)
    tok = AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR)
    fmt = prompt_format()
    assert fmt == {"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>",
                   "stop": ["<|end|>"]}
    for token in ("<|doc|>", "<|rewrite|>", "<|end|>", "<|mask|>", "<|pad|>"):
        ids = tok(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and ids[0] < model.config.vocab_size
    assert tok.eos_token == "<|end|>" and model.config.eos_token_id == tok.eos_token_id
    assert model.generation_config.eos_token_id == tok.eos_token_id


def test_tokenizer_round_trips_unicode():
    _, tok = load_default_model()
    text = "Mr Çağlayan (“the applicant”) paid €1,200 in Łódź on 3 März 2001 — 戦場 ☃"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_generates_and_stops_in_float32():
    import torch

    model, tok = load_default_model()
    assert next(model.parameters()).dtype == torch.float32
    ids = tok("<|doc|>Dear Sir,<|rewrite|>", add_special_tokens=False, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)  # (1, T + <= 8)
    assert out.shape[1] > ids["input_ids"].shape[1]


def test_model_info_cli_json_and_text():
    from tokendp.cli import main

    runner = CliRunner()
    result = runner.invoke(main, ["model", "info", "tiny", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data == json.loads(json.dumps(model_info()))
    assert data["architecture"] == "LlamaForCausalLM" and data["parameters"] > 1_000_000
    text = runner.invoke(main, ["model", "info", "tiny"])
    assert text.exit_code == 0 and "LlamaForCausalLM" in text.output
