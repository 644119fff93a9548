"""`tokendp eval predict`: held-out perplexity of PMixED, the public model, the non-private
ensemble and adapters, at the same T teacher-forced positions; resumable; the CLI shell."""

from __future__ import annotations

import copy
import json
import math
import shutil

import pytest
import torch
from click.testing import CliRunner

import tinylm
import tokendp.eval.prediction as mod
from tokendp.accounting import pmixed_alpha, pmixed_epsilon
from tokendp.cli import main
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.eval.prediction import AdapterMethod, PredictEvalConfig, evaluate_prediction, windows


@pytest.fixture(scope="module")
def heldout(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "test.txt"
    path.write_text("\n".join(tinylm.CORPUS[::-1] * 6) + "\n")
    return path


@pytest.fixture(scope="module")
def ens():
    return tinylm.ensemble_dir(3)


def test_windows_cover_t_positions_spread_over_the_text():
    spans = windows(1000, queries=40, window=16)
    assert [s for _, s in spans] == [16, 16, 8] and sum(s for _, s in spans) == 40
    assert spans[0][0] == 0 and spans[-1][0] == 1000 - 16 - 1  # first and last offsets at both ends
    assert all(o + s + 1 <= 1000 for o, s in spans)
    assert windows(100, queries=5, window=16) == [(0, 5)]
    with pytest.raises(InvalidInputError, match="fewer than one window"):
        windows(10, queries=40, window=16)


def _public_nll(text_path, spans_of):
    """The base model's NLL at the scored positions, computed directly (no peft, no backend)."""
    from transformers import AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(tinylm.model_dir()), tinylm.model()  # the tokenizer as saved
    stream = tok(text_path.read_text(), add_special_tokens=False)["input_ids"]
    nll, n = 0.0, 0
    for offset, size in spans_of(len(stream)):
        ids = torch.tensor([stream[offset:offset + size + 1]])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids[:, :-1]).logits[0].double(), -1)  # (size, V)
        nll -= float(logp.gather(-1, ids[0, 1:, None]).sum())
        n += size
    return nll, n


def test_rows_and_numbers(ens, heldout, tmp_path):
    adapter = tinylm.adapter_dirs(4, 0)[3]
    config = PredictEvalConfig(data=str(heldout), ensemble=str(ens), epsilons=(3.0, 8.0), sample_rates=(0.5,),
                               queries=40, window=16, adapters=(AdapterMethod("fine-tuned", str(adapter)),
                                                                AdapterMethod("dp-sgd", str(adapter), 8.0)))
    rows = evaluate_prediction(config, tmp_path / "out", progress=False)
    assert [(r["method"], r["setting"]) for r in rows] == [
        ("public", "base model"), ("ensemble", "average of 3 (non-private)"), ("pmixed q=0.5", "eps 3"),
        ("pmixed q=0.5", "eps 8"), ("fine-tuned", "fine-tuned"), ("dp-sgd", "dp-sgd (eps 8)")]
    assert all(r["tokens"] == 40 and math.isfinite(r["ppl"]) for r in rows)
    nll, n = _public_nll(heldout, lambda s: windows(s, queries=40, window=16))
    assert rows[0]["ppl"] == pytest.approx(math.exp(nll / n), rel=1e-4) and rows[0]["epsilon"] == 0.0
    assert rows[1]["epsilon"] is None and rows[4]["epsilon"] is None and rows[5]["epsilon"] == 8.0
    assert rows[4]["ppl"] == rows[5]["ppl"]  # the same adapter, scored alike
    for row, eps in zip(rows[2:4], (3.0, 8.0)):  # the certificate: public parameters over the T queries
        alpha = pmixed_alpha(epsilon=eps, ensemble_size=3, sample_rate=0.5, max_tokens=40, delta=1e-5)
        assert row["alpha"] == alpha and row["sample_rate"] == 0.5
        assert row["epsilon"] == pmixed_epsilon(alpha=alpha, beta=row["beta"], ensemble_size=3, sample_rate=0.5,
                                                max_tokens=40, delta=1e-5) <= eps
        assert 0 < row["mean_sampled"] < 3 and 0 <= row["mean_lambda"] <= 1
    # more epsilon lets the members further from the public model: a larger mean lambda
    assert rows[3]["mean_lambda"] > rows[2]["mean_lambda"]


def test_members_trained_on_nothing_give_the_public_perplexity(heldout, tmp_path):
    """Every member a fresh adapter (B = 0): PMixED and the ensemble release the public model."""
    from peft import get_peft_model

    ens = tinylm.ensemble_dir(2)
    for name in ("shard-000", "shard-001"):
        shutil.rmtree(ens / name)
        get_peft_model(copy.deepcopy(tinylm.model()), tinylm.lora_config()).save_pretrained(ens / name)
    config = PredictEvalConfig(data=str(heldout), ensemble=str(ens), epsilons=(8.0,), sample_rates=(1.0,),
                               queries=20, window=10)
    rows = evaluate_prediction(config, tmp_path / "out", progress=False)
    public, ensemble, pmixed = (r["ppl"] for r in rows)
    assert ensemble == pytest.approx(public, rel=1e-12)
    assert pmixed == pytest.approx(public, rel=1e-6)  # the mechanism takes log_softmax in float32


def test_a_killed_run_resumes_from_the_cache(ens, heldout, tmp_path, monkeypatch):
    config = PredictEvalConfig(data=str(heldout), ensemble=str(ens), methods=("public", "pmixed"),
                               epsilons=(8.0,), queries=24, window=8)
    first = evaluate_prediction(config, tmp_path / "out", progress=False)
    cached = list((tmp_path / "out" / "cache").glob("*/window-*.json"))
    assert len(cached) == 3 and "Dear" not in cached[0].read_text()  # numbers only

    def fail(*args, **kwargs):
        raise AssertionError("recomputed a cached window")

    monkeypatch.setattr(mod, "_window_nll", fail)
    again = evaluate_prediction(config, tmp_path / "out", progress=False)
    assert [{k: v for k, v in r.items() if k != "seconds_total"} for r in again] == \
           [{k: v for k, v in r.items() if k != "seconds_total"} for r in first]


def test_config_errors(ens, heldout):
    base = dict(data=str(heldout), ensemble=str(ens))
    with pytest.raises(InvalidParameterError, match="unknown method"):
        PredictEvalConfig(**base, methods=("dp-sgd",)).check()
    with pytest.raises(InvalidParameterError, match="distinct"):
        PredictEvalConfig(**base, adapters=(AdapterMethod("public", "x"),)).check()
    with pytest.raises(InvalidParameterError, match="distinct"):
        PredictEvalConfig(**base, adapters=(AdapterMethod("d", "x", 8.0), AdapterMethod("d", "y", 8.0))).check()
    PredictEvalConfig(**base, adapters=(AdapterMethod("d", "x", 8.0), AdapterMethod("d", "y", 3.0))).check()
    with pytest.raises(InvalidParameterError, match="window"):
        PredictEvalConfig(**base, window=0).check()


def test_cli_writes_table_and_plot(ens, heldout, tmp_path):
    pytest.importorskip("matplotlib")
    adapter = tinylm.adapter_dirs(4, 0)[3]
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["eval", "predict", "--ensemble", str(ens), "--data", str(heldout),
                                    "--out", str(out), "--queries", "16", "--window", "8", "--epsilon", "8",
                                    "--adapter", f"dp-sgd@8={adapter}", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout[res.stdout.index("["):])
    assert [r["method"] for r in rows] == ["public", "ensemble", f"pmixed q={min(1.0, 2.4 / 3):g}", "dp-sgd"]
    assert {p.name for p in out.iterdir()} >= {"results.json", "results.csv", "results.md", "epsilon_vs_ppl.png"}
    assert "| pmixed" in (out / "results.md").read_text()


@pytest.mark.parametrize("args, match", [
    (["--adapter", "no-equals-sign"], "NAME=DIR"),
    (["--adapter", "x@eight=/tmp"], "must be a number"),
    (["--adapter", "x=/nonexistent-dir"], "adapter_config.json"),
    (["--alpha", "three"], "--alpha"),
    (["--epsilon", "8,x"], "--epsilon"),
    (["--methods", "public,oracle"], "unknown method"),
])
def test_cli_bad_input_exit_2(ens, heldout, tmp_path, args, match):
    res = CliRunner().invoke(main, ["eval", "predict", "--ensemble", str(ens), "--data", str(heldout),
                                    "--out", str(tmp_path / "o"), "--no-plots", *args])
    assert res.exit_code == 2 and match in res.output, res.output


def test_help_lists_the_options():
    res = CliRunner().invoke(main, ["eval", "predict", "--help"])
    assert res.exit_code == 0
    for option in ("--ensemble", "--data", "--epsilon", "--sample-rate", "--alpha", "--adapter", "--queries",
                   "--window", "--device", "--json"):
        assert option in res.output


def test_an_added_adapter_reuses_the_cached_methods(ens, heldout, tmp_path, monkeypatch):
    """Adding --adapter to a finished run computes the new row only; the others come from the cache."""
    config = PredictEvalConfig(data=str(heldout), ensemble=str(ens), methods=("public", "pmixed"),
                               epsilons=(8.0,), queries=16, window=8)
    first = evaluate_prediction(config, tmp_path / "out", progress=False)
    real, asked = mod._window_nll, []

    def spy(backend, ids, settings, *args):
        asked.append([s.method for s in settings])
        return real(backend, ids, settings, *args)

    monkeypatch.setattr(mod, "_window_nll", spy)
    adapter = AdapterMethod("fine-tuned", str(tinylm.adapter_dirs(4, 0)[3]))
    rows = evaluate_prediction(PredictEvalConfig(**{**config.__dict__, "adapters": (adapter,)}), tmp_path / "out",
                               progress=False)
    assert asked == [["fine-tuned"], ["fine-tuned"]]
    assert [r["ppl"] for r in rows[:2]] == [r["ppl"] for r in first]


def _finetuned(tmp_path, method="dpsgd", epsilon=8.0):
    """A `tokendp finetune` run on the tiny base with the ensemble's LoRA layout (r 4, alpha 32)."""
    pytest.importorskip("opacus")
    from tokendp.jobs.finetune import FinetuneConfig, finetune

    private = {"epsilon": epsilon, "noise_seed": 0} if method != "none" else {}
    config = FinetuneConfig(method=method, steps=2, batch_size=4, lora_r=4, lora_alpha=32.0, lr=0.05,
                            max_length=16, truncate=True, **private)
    out = tmp_path / f"{method}-{epsilon:g}"
    report = finetune(texts=tinylm.CORPUS * 4, out=out, model=str(tinylm.model_dir()), config=config)
    return out / "adapter", report


def test_a_finetune_adapter_joins_the_table_at_its_certified_epsilon(ens, heldout, tmp_path):
    """`tokendp finetune --method dpsgd` -> OUT/adapter loads beside the ensemble's members (same
    base, same LoRA layout) and its row carries the epsilon its finetune.json certifies."""
    (adapter, report), (adapter3, report3) = _finetuned(tmp_path), _finetuned(tmp_path, epsilon=3.0)
    certified = report["privacy"]["epsilon"]
    assert certified <= 8.0 and json.loads((adapter / "adapter_config.json").read_text())["r"] == 4
    res = CliRunner().invoke(main, ["eval", "predict", "--ensemble", str(ens), "--data", str(heldout), "--no-plots",
                                    "--out", str(tmp_path / "out"), "--queries", "16", "--window", "8",
                                    "--methods", "public", "--adapter", f"dp-sgd@8={adapter}",
                                    "--adapter", f"dp-sgd@3={adapter3}", "--json"])
    assert res.exit_code == 0, res.output
    public, dpsgd, dpsgd3 = json.loads(res.stdout[res.stdout.index("["):])
    assert dpsgd["method"] == dpsgd3["method"] == "dp-sgd"  # one line of the plot
    assert dpsgd["epsilon"] == certified and dpsgd3["epsilon"] == report3["privacy"]["epsilon"] <= 3.0
    assert dpsgd["setting"] == f"dp-sgd (eps {certified:.3g} per record)"
    assert math.isfinite(dpsgd["ppl"]) and dpsgd["ppl"] != public["ppl"]  # the trained adapter was read


def test_a_finetune_certificate_is_never_overstated(tmp_path):
    adapter, report = _finetuned(tmp_path)
    certified = report["privacy"]["epsilon"]
    assert mod.certified_adapter(AdapterMethod("d", str(adapter)), 1e-5) == \
        AdapterMethod("d", str(adapter), certified, "record")
    with pytest.raises(InvalidParameterError, match="more than the 1 claimed"):
        mod.certified_adapter(AdapterMethod("d", str(adapter), 1.0), 1e-5)
    with pytest.raises(InvalidParameterError, match="above this evaluation's"):
        mod.certified_adapter(AdapterMethod("d", str(adapter), 8.0), 1e-6)
    plain, _ = _finetuned(tmp_path, method="none")
    with pytest.raises(InvalidParameterError, match="without DP"):
        mod.certified_adapter(AdapterMethod("f", str(plain), 8.0), 1e-5)
    assert mod.certified_adapter(AdapterMethod("f", str(plain)), 1e-5) == AdapterMethod("f", str(plain))


def test_an_adapter_of_another_base_is_refused(tmp_path):
    adapter, _ = _finetuned(tmp_path)
    other = tmp_path / "other-base"
    shutil.copytree(adapter, other)
    config = json.loads((other / "adapter_config.json").read_text())
    (other / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(tmp_path)}))
    members = {"shard-000": adapter}
    mod.check_same_base(members, [AdapterMethod("same", str(adapter))])
    with pytest.raises(InvalidInputError, match="trained on base model"):
        mod.check_same_base(members, [AdapterMethod("other", str(other))])
