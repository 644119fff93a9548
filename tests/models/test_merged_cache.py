"""The merged rewriter's cache (tokendp.models.merged): after the first load, ``--model rewriter``
reads a ready merged directory and skips peft; the result is bit-identical to the merge in
memory; the key follows every input of the merge; broken or unwritable caches never break a load.

No real SmolLM2: a tiny Llama stands in for the converted base (with a marker as the conversion
writes it) and a tiny LoRA adapter with random B stands in for the rewriter's adapter."""

from __future__ import annotations

import contextlib
import errno
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from tokendp.backends import hf
from tokendp.backends.hf import HFBackend, load_named_model
from tokendp.models import merged, registry
from tokendp.models.cache import MARKER, SMOLLM2, ModelCacheError, cache_dir, report_conversions

torch.set_num_threads(1)
peft = pytest.importorskip("peft")
IDS = torch.tensor([[5, 9, 17, 33, 2, 41, 7]])


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _tiny_llama():
    from tokendp.models.training.rewriter import tiny_model_and_tokenizer

    model, tok = tiny_model_and_tokenizer(0)
    return model.eval(), tok


def _save_adapter(path: Path, seed: int) -> Path:
    model, _ = _tiny_llama()
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"])
    wrapped = peft.get_peft_model(model, config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in wrapped.named_parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    wrapped.save_pretrained(path, save_embedding_layers=False)
    (path / "tokendp.json").write_text(json.dumps({"placeholder": "_", "stop": ["<|end|>"]}))
    return path


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A cache root holding a tiny 'SmolLM2 conversion' with a good marker, and the tiny adapter
    installed as the rewriter's. Returns (root, base directory, adapter directory)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("TOKENDP_CACHE", str(root))
    base = cache_dir(SMOLLM2)
    model, tok = _tiny_llama()
    model.save_pretrained(base)
    tok.save_pretrained(base)
    files = sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())
    (base / MARKER).write_text(json.dumps({"format": 1, "model": "smollm2", "sha256": SMOLLM2.sha256,
                                           "transformers": "test", "files": files}))
    adapter = _save_adapter(tmp_path / "adapter", seed=1)
    monkeypatch.setattr(registry, "REWRITER_ADAPTER_DIR", adapter)
    hf._load_named.cache_clear()
    yield root, base, adapter
    hf._load_named.cache_clear()


def _logits(backend: HFBackend) -> torch.Tensor:
    with torch.inference_mode():
        return backend.model(input_ids=IDS.to(backend.device)).logits


def _forbid_peft(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the cached load merged again")

    monkeypatch.setattr(HFBackend, "merge_adapter", refuse)
    monkeypatch.setattr(peft.PeftModel, "from_pretrained", refuse)


def _merged_dirs(root: Path) -> list[Path]:
    return sorted(root.glob(f"{merged.PREFIX}*"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_cached_merge_is_bit_identical_and_skips_peft(setup, monkeypatch, dtype):
    root, base, adapter = setup
    in_memory = load_named_model("rewriter", device="cpu", dtype=dtype, cache=False)
    assert _merged_dirs(root) == []  # cache=False writes nothing
    first = load_named_model("rewriter", device="cpu", dtype=dtype)  # merges, then saves
    [path] = _merged_dirs(root)
    assert path.name.endswith(f"-{dtype}") and (path / MARKER).is_file()
    _forbid_peft(monkeypatch)
    second = load_named_model("rewriter", device="cpu", dtype=dtype)  # reads the cache
    assert second.model.dtype == getattr(torch, dtype)
    assert not any("lora" in n for n, _ in second.model.named_parameters())
    reference = _logits(in_memory)
    plain = HFBackend.load(base, device="cpu", dtype=dtype)
    assert not torch.allclose(_logits(plain).float(), reference.float(), atol=1e-3)  # the adapter matters
    assert torch.equal(_logits(first), reference) and torch.equal(_logits(second), reference)
    for backend in (first, second):
        assert backend.name == in_memory.name == "rewriter"
        assert backend.options == in_memory.options == {"placeholder": "_", "stop": ["<|end|>"]}
        assert backend.eos_token_ids == in_memory.eos_token_ids
        assert backend.tokenizer("a b c")["input_ids"] == in_memory.tokenizer("a b c")["input_ids"]


def test_a_named_adapter_keeps_its_name_and_the_stop_default(setup, tmp_path):
    _, _, adapter = setup
    (adapter / "tokendp.json").unlink()
    first = load_named_model("rewriter", adapter=adapter, device="cpu")
    second = load_named_model("rewriter", adapter=adapter, device="cpu")
    for backend in (first, second):
        assert backend.name == f"rewriter:{adapter}" and backend.options == {"stop": ["<|im_start|>"]}
    assert torch.equal(_logits(first), _logits(second))


def test_every_input_of_the_merge_changes_the_directory(setup, tmp_path):
    _, base, adapter = setup
    fields = merged.merge_fields(adapter, base, "float32", "cpu")
    here = merged.merged_dir(fields, base.parent)
    assert merged.merged_dir(merged.merge_fields(adapter, base, "float32", "cpu"), base.parent) == here
    other = _save_adapter(tmp_path / "other", seed=2)  # other weights, same config
    changed = [merged.merge_fields(other, base, "float32", "cpu"),
               merged.merge_fields(adapter, base, "bfloat16", "cpu"),
               merged.merge_fields(adapter, base, "float32", "cuda"),
               {**fields, "peft": "0.0.1"}, {**fields, "torch": "0.0.1"},
               {**fields, "base": {**fields["base"], "sha256": "0" * 64}}]
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "lora_alpha": 16}))
    changed.append(merged.merge_fields(adapter, base, "float32", "cpu"))
    (adapter / "tokendp.json").write_text("{}")
    changed.append(merged.merge_fields(adapter, base, "float32", "cpu"))
    names = {merged.merged_dir(f, base.parent).name for f in changed}
    assert here.name not in names and len(names) == len(changed)


def test_a_changed_adapter_file_is_a_new_cache_not_the_old_one(setup, monkeypatch):
    root, _, adapter = setup
    before = _logits(load_named_model("rewriter", device="cpu"))
    weights = adapter / "adapter_model.safetensors"
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(weights))
    save_file({k: v * 2 if "lora_B" in k else v for k, v in tensors.items()}, str(weights),
              metadata={"format": "pt"})
    after = load_named_model("rewriter", device="cpu")
    assert len(_merged_dirs(root)) == 2 and not torch.equal(_logits(after), before)
    assert torch.equal(_logits(after), _logits(load_named_model("rewriter", device="cpu", cache=False)))


def test_a_partial_or_foreign_cache_is_detected_and_rebuilt(setup, monkeypatch, caplog):
    root, base, adapter = setup
    reference = _logits(load_named_model("rewriter", device="cpu"))
    [path] = _merged_dirs(root)
    fields = merged.merge_fields(adapter, base, "float32", "cpu")
    marker = json.loads((path / MARKER).read_text())
    assert marker["key"] == merged.merge_key(fields) and "model.safetensors" in marker["files"]
    (path / "model.safetensors").unlink()
    with pytest.raises(ModelCacheError, match=r"partial \(missing \['model.safetensors'\]\).*build rewriter --force"):
        merged.check_merged(path, fields)
    (path / MARKER).unlink()
    with pytest.raises(ModelCacheError, match="partial .no tokendp-cache.json"):
        merged.check_merged(path, fields)
    (path / MARKER).write_text(json.dumps({**marker, "key": "0" * 64}))
    with pytest.raises(ModelCacheError, match="other inputs"):
        merged.check_merged(path, fields)
    (path / MARKER).unlink()
    calls = []
    real = HFBackend.merge_adapter
    monkeypatch.setattr(HFBackend, "merge_adapter", lambda self, p: (calls.append(p), real(self, p))[1])
    with caplog.at_level("WARNING", logger="tokendp"):
        rebuilt = load_named_model("rewriter", device="cpu")
    assert calls == [adapter] and "partial" in caplog.text
    assert torch.equal(_logits(rebuilt), reference) and merged.is_merged(path, fields)
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []  # no temporary directories


def test_an_unwritable_cache_falls_back_to_the_merge_in_memory(setup, monkeypatch, caplog):
    root, _, _ = setup
    reference = _logits(load_named_model("rewriter", device="cpu", cache=False))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(merged.shutil, "copy2", full)  # fails after the weights are written
    with caplog.at_level("WARNING", logger="tokendp"):
        backend = load_named_model("rewriter", device="cpu")
    assert torch.equal(_logits(backend), reference)
    assert "could not cache the merged rewriter" in caplog.text and "OSError" in caplog.text
    assert sorted(p.name for p in root.iterdir()) == [cache_dir(SMOLLM2).name]  # nothing half-written


def test_the_first_load_reports_caching_and_later_loads_do_not(setup):
    root, _, _ = setup
    heard = []

    @contextlib.contextmanager
    def report(message, steps=None, kind="convert"):
        heard.append((message, steps, kind))
        yield lambda name: heard.append(name)

    with report_conversions(report):
        load_named_model("rewriter", device="cpu")
        load_named_model("rewriter", device="cpu")
    [path] = _merged_dirs(root)
    assert heard == [(f"caching the merged rewriter once into {path} (a few seconds)", merged.MERGE_STEPS, "merge"),
                     *merged.MERGE_STEPS]


def test_model_build_and_info_show_the_merged_cache(setup, monkeypatch):
    from tokendp.cli import main

    monkeypatch.setattr(registry, "default_merge_target", lambda: ("float32", "cpu"))
    runner = CliRunner()
    before = json.loads(runner.invoke(main, ["model", "info", "rewriter", "--json"]).output)["merged"]
    assert before["built"] is False and before["approx_mb"] == 540 and before["others"] == []
    text = runner.invoke(main, ["model", "info", "rewriter"]).output
    assert "merged:       not cached yet" in text and "about 540 MB in float32" in text
    built = runner.invoke(main, ["model", "build", "rewriter"])
    assert built.exit_code == 0, built.output
    after = json.loads(runner.invoke(main, ["model", "info", "rewriter", "--json"]).output)["merged"]
    assert after["built"] is True and after["mb"] > 0 and f"merged model at {after['path']}" in built.output
    assert "loads skip peft" in runner.invoke(main, ["model", "info", "rewriter"]).output
