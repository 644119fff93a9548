"""`tokendp predict`: the report matches `tokendp account pmixed`, errors and a spent budget -> exit 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import tinylm
from tokendp.cli import main


@pytest.fixture(scope="module")
def ens():
    return tinylm.ensemble_dir(3)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_json_report_matches_tokendp_account(ens, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "The court held"}\n\n{"text": "Dear Dr"}\n')
    res = run("predict", "--ensemble", ens, "--prompts", prompts, "--epsilon", 8, "--delta", 1e-5, "--queries", 8,
              "--ensemble-sample-rate", 0.5, "--max-new-tokens", 3, "--seed", 0, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [a["index"] for a in out["answers"]] == [0, 1] and out["stopped"] is None
    rep = out["report"]
    assert rep["ensemble_size"] == 3 and rep["queries"] == 8 and rep["sample_rate"] == 0.5
    account = json.loads(run("account", "pmixed", "--alpha", 3, "--epsilon", 8, "--ensemble-size", 3,
                             "--sample-rate", 0.5, "--queries", 8, "--delta", 1e-5, "--json").stdout)
    assert rep["beta"] == pytest.approx(account["beta"], rel=1e-12)
    assert rep["epsilon"] <= 8


def test_diagnostics_only_with_the_flag_on_stderr(ens):
    args = ["predict", "--ensemble", ens, "--prompt", "The court held", "--epsilon", 8, "--delta", 1e-5, "--queries", 4,
            "--ensemble-sample-rate", 0.5, "--seed", 0]
    plain, asked = run(*args), run(*args, "--diagnostics")
    assert plain.exit_code == asked.exit_code == 0, asked.output
    assert "mean |S|" not in plain.output and "lambda" not in plain.output and asked.stdout == plain.stdout
    lines = asked.stderr.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("WARNING: the diagnostics below are data-dependent"))
    assert 0 <= json.loads(lines[start + 1])["diagnostics"]["mean_sampled_members"] <= 3


def test_text_output_and_budget_exhausted_exit_2(ens, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ["The court", "Dear", "He was"]))
    res = run("predict", "--ensemble", ens, "--prompts", prompts, "--beta", 0.2, "--delta", 1e-5, "--queries", 2,
              "--seed", 0)
    assert res.exit_code == 2
    assert "# pmixed: epsilon" in res.stdout and "not_started" in res.stdout and "2 tokens released" in res.stdout
    assert "budget exhausted" in res.stderr


@pytest.mark.parametrize("args, match", [
    (["--prompt", "x"], "exactly one of --epsilon"),
    (["--epsilon", 8], "exactly one of --prompt"),
    (["--prompt", "x", "--epsilon", 8, "--ensemble-sample-rate", 0], "sample_rate"),
    (["--prompt", "x", "--epsilon", 8, "--ensemble-sample-rate", 2], "sample_rate"),
    (["--prompt", "x", "--epsilon", 0.5], "not above"),
])
def test_bad_input_exit_2(ens, args, match):
    res = run("predict", "--ensemble", ens, "--delta", 1e-5, "--queries", 4, *args)
    assert res.exit_code == 2 and match in res.output, res.output


def test_empty_prompt_file_and_unknown_adapter_exit_2(ens, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    res = run("predict", "--ensemble", ens, "--prompts", empty, "--epsilon", 8, "--delta", 1e-5, "--queries", 4)
    assert res.exit_code == 2 and "holds no prompts" in res.output
    import shutil

    broken = tmp_path / "ens"
    shutil.copytree(ens, broken)
    (broken / "shard-002" / "adapter_model.safetensors").unlink()
    res = run("predict", "--ensemble", broken, "--prompt", "x", "--epsilon", 8, "--delta", 1e-5, "--queries", 4)
    assert res.exit_code == 2 and "unknown adapter(s) shard-002" in res.output
