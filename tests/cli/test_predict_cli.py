"""`tokendp predict`: the report matches `tokendp account pmixed`; the order chosen for the user; exit codes
(2 parameters, 3 bad input, 5 a spent budget with partial output); old option names."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import tinylm
from tokendp.cli import main
from tokendp.cli._exit import EXIT_BAD_INPUT, EXIT_BUDGET, EXIT_USAGE


@pytest.fixture(scope="module")
def ens():
    return tinylm.ensemble_dir(3)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_json_report_matches_tokendp_account(ens, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "The court held"}\n\n{"text": "Dear Dr"}\n')
    res = run("predict", "--ensemble", ens, "--prompts", prompts, "--epsilon", 8, "--delta", 1e-5, "--queries", 8,
              "--sample-rate", 0.5, "--max-new-tokens", 3, "--seed", 0, "--json")
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
            "--sample-rate", 0.5, "--seed", 0]
    plain, asked = run(*args), run(*args, "--diagnostics")
    assert plain.exit_code == asked.exit_code == 0, asked.output
    assert "mean |S|" not in plain.output and "lambda" not in plain.output and asked.stdout == plain.stdout
    lines = asked.stderr.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("WARNING: the diagnostics below are data-dependent"))
    assert 0 <= json.loads(lines[start + 1])["diagnostics"]["mean_sampled_members"] <= 3


def test_text_output_and_budget_exhausted_exit_5(ens, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ["The court", "Dear", "He was"]))
    res = run("predict", "--ensemble", ens, "--prompts", prompts, "--beta", 0.2, "--delta", 1e-5, "--queries", 2,
              "--seed", 0)
    assert res.exit_code == EXIT_BUDGET
    assert "# pmixed: epsilon" in res.stdout and "not_started" in res.stdout and "2 tokens released" in res.stdout
    assert "budget exhausted" in res.stderr


@pytest.mark.parametrize("args, match", [
    (["--prompt", "x"], "exactly one of --epsilon"),
    (["--epsilon", 8], "exactly one of --prompt"),
    (["--prompt", "x", "--epsilon", 8, "--sample-rate", 0], "sample_rate"),
    (["--prompt", "x", "--epsilon", 8, "--sample-rate", 2], "sample_rate"),
    (["--prompt", "x", "--epsilon", 0.01], "below the conversion cost at every order"),
    (["--prompt", "x", "--epsilon", 0.5, "--alpha", 3], "not above"),
])
def test_bad_parameters_exit_2(ens, args, match):
    res = run("predict", "--ensemble", ens, "--delta", 1e-5, "--queries", 4, *args)
    assert res.exit_code == EXIT_USAGE and match in res.output, res.output


def test_empty_prompt_file_and_unknown_adapter_exit_3(ens, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    res = run("predict", "--ensemble", ens, "--prompts", empty, "--epsilon", 8, "--delta", 1e-5, "--queries", 4)
    assert res.exit_code == EXIT_BAD_INPUT and "holds no prompts" in res.output
    import shutil

    broken = tmp_path / "ens"
    shutil.copytree(ens, broken)
    (broken / "shard-002" / "adapter_model.safetensors").unlink()
    res = run("predict", "--ensemble", broken, "--prompt", "x", "--epsilon", 8, "--delta", 1e-5, "--queries", 4)
    assert res.exit_code == EXIT_BAD_INPUT and "unknown adapter(s) shard-002" in res.output


def test_without_alpha_the_order_is_chosen_from_public_parameters_and_reported(ens):
    """Issue 29: epsilon 3 at delta 1e-5 fails at alpha 3 (below the conversion cost), so predict
    picks the order as `account pmixed` does (pmixed_alpha over epsilon, delta, N, q, T) and reports it."""
    from tokendp.accounting import pmixed_alpha

    at_three = run("predict", "--ensemble", ens, "--prompt", "The court held", "--epsilon", 3, "--delta", 1e-5,
                   "--queries", 4, "--alpha", 3)
    assert at_three.exit_code == EXIT_USAGE and "not above" in at_three.output
    res = run("predict", "--ensemble", ens, "--prompt", "The court held", "--epsilon", 3, "--delta", 1e-5,
              "--queries", 4, "--sample-rate", 0.5, "--seed", 0, "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)["report"]
    chosen = pmixed_alpha(epsilon=3, ensemble_size=3, sample_rate=0.5, max_tokens=4, delta=1e-5)
    assert chosen != 3.0 and rep["alpha"] == chosen and rep["epsilon"] <= 3 and rep["temperature"] == 1.0
    account = json.loads(run("account", "pmixed", "--epsilon", 3, "--ensemble-size", 3, "--sample-rate", 0.5,
                             "--queries", 4, "--delta", 1e-5, "--json").stdout)
    assert account["alpha"] == chosen and account["alpha_source"].startswith("chosen")
    assert rep["beta"] == pytest.approx(account["beta"], rel=1e-12)


def test_old_option_names_still_work_with_a_deprecation_message(ens):
    new = run("predict", "--ensemble", ens, "--prompt", "The court held", "--epsilon", 8, "--delta", 1e-5,
              "--queries", 3, "--seed", 0, "--sample-rate", 0.5, "--model", tinylm.model_dir(), "-q")
    old = run("predict", "--ensemble", ens, "--prompt", "The court held", "--epsilon", 8, "--delta", 1e-5,
              "--queries", 3, "--seed", 0, "--ensemble-sample-rate", 0.5, "--base", tinylm.model_dir(), "-q")
    assert new.exit_code == old.exit_code == 0, old.output
    assert old.stdout == new.stdout and "q 0.5" in old.stdout
    assert "--ensemble-sample-rate is deprecated, use --sample-rate" in old.stderr
    assert "--base is deprecated, use --model" in old.stderr and "deprecated" not in new.stderr
    both = run("predict", "--ensemble", ens, "--prompt", "x", "--epsilon", 8, "--delta", 1e-5, "--queries", 3,
               "--sample-rate", 0.5, "--ensemble-sample-rate", 0.5)
    assert both.exit_code == EXIT_USAGE and "give --sample-rate once" in both.output


def test_budget_exhausted_under_json_is_a_json_error_after_the_partial_output(ens, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ["The court", "Dear", "He was"]))
    res = run("predict", "--ensemble", ens, "--prompts", prompts, "--beta", 0.2, "--delta", 1e-5, "--queries", 2,
              "--seed", 0, "--json")
    assert res.exit_code == EXIT_BUDGET
    out = json.loads(res.stdout)
    assert out["stopped"] and out["report"]["tokens_released"] == 2
    error = json.loads(res.stderr.strip().splitlines()[-1])["error"]
    assert error == {"exit_code": 5, "kind": "budget_exhausted", "message": out["stopped"]}
