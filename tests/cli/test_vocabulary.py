"""Issue 29: one vocabulary of flags (old names as hidden, deprecated aliases), the exit codes of
``tokendp.cli._exit``, errors as JSON under --json, and the order alpha chosen for the user."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from tokendp.cli import main
from tokendp.cli._exit import EXIT_BAD_INPUT, EXIT_CODES, EXIT_MISSING_EXTRA, EXIT_USAGE, exit_code_of
from tokendp.errors import BudgetExceededError, InvalidInputError, InvalidParameterError, MissingDependencyError

FUSION = ["account", "dp-fusion", "--epsilon", "3", "--groups", "2", "--delta", "1e-5", "--json"]


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _flags(command: click.Command) -> set[str]:
    return {opt for p in command.params if isinstance(p, click.Option) and not p.hidden for opt in p.opts}


@pytest.mark.parametrize("old", ["--base", "--max-tokens", "--ensemble-sample-rate"])
def test_retired_names_are_hidden_everywhere(old):
    """No command shows a retired name in its help; it lives on only as a hidden alias."""
    for path, command in _commands(main):
        assert old not in _flags(command), f"tokendp {' '.join(path)} still shows {old}"


def test_batch_size_means_one_thing():
    """--batch-size is left only where it is a plain training batch (ensemble train)."""
    shown = {" ".join(path) for path, command in _commands(main) if "--batch-size" in _flags(command)}
    assert shown == {"ensemble train"}
    for path, model_flag in [(("sanitize",), "--model"), (("generate",), "--model"), (("synthesize",), "--model"),
                             (("predict",), "--model"), (("finetune",), "--model"), (("ensemble", "train"), "--model"),
                             (("serve",), "--model")]:
        command = main
        for name in path:
            command = command.commands[name]
        assert model_flag in _flags(command)


@pytest.mark.parametrize("old, new, args", [
    ("--max-tokens", "--max-new-tokens", FUSION),
    ("--batch-size", "--references-per-text",
     ["account", "invisibleink", "--epsilon", "3", "--temperature", "1", "--max-new-tokens", "50", "--delta", "1e-5",
      "--json"]),
])
def test_an_old_name_gives_the_same_result_and_a_deprecation_line_on_stderr(old, new, args):
    value = "100" if old == "--max-tokens" else "8"
    fresh, aged = run(*args, new, value), run(*args, old, value)
    assert fresh.exit_code == aged.exit_code == 0, aged.output
    assert json.loads(aged.stdout) == json.loads(fresh.stdout)
    assert f"{old} is deprecated, use {new}" in aged.stderr and "deprecated" not in fresh.stderr
    both = run(*args, new, value, old, value)
    assert both.exit_code == EXIT_USAGE and f"give {new} once" in both.output


def test_a_required_option_given_by_neither_name_is_a_usage_error():
    res = run(*FUSION[:-1])
    assert res.exit_code == EXIT_USAGE and "Missing option '--max-new-tokens'" in res.output


def test_exit_codes_are_distinct_documented_and_in_the_top_level_help():
    assert sorted(EXIT_CODES) == [0, 1, 2, 3, 4, 5, 6, 130]
    assert len({kind for kind, _ in EXIT_CODES.values()}) == len(EXIT_CODES)
    helptext = " ".join(run("--help").output.split())
    for code, (_, meaning) in EXIT_CODES.items():
        assert f"{code} {' '.join(meaning.split())}" in helptext
    assert exit_code_of(InvalidParameterError("x")) == EXIT_USAGE
    assert exit_code_of(InvalidInputError("x")) == EXIT_BAD_INPUT
    assert exit_code_of(MissingDependencyError("x")) == EXIT_MISSING_EXTRA
    assert exit_code_of(BudgetExceededError("x")) == 5


def test_bad_input_and_usage_errors_have_their_own_codes(tmp_path):
    missing = run("sanitize", tmp_path / "nope.txt", "--epsilon", 8)
    assert missing.exit_code == EXIT_BAD_INPUT and "not found" in missing.output
    unknown = run("sanitize", tmp_path / "nope.txt", "--no-such-option")
    assert unknown.exit_code == EXIT_USAGE and "No such option" in unknown.output


MISSING = "nope.jsonl"  # under tmp_path, never created
PMIXED = ["--prompt", "x", "--epsilon", 8, "--delta", 1e-5, "--queries", 3]
SYNTHESIZE = ["--epsilon", 1, "--delta", 1e-5, "--references-per-text", 2, "--max-new-tokens", 3]


@pytest.mark.parametrize("args", [
    ["predict", "--ensemble", MISSING, *PMIXED],
    ["predict", "--ensemble", ".", "--prompts", MISSING, *PMIXED[2:]],
    ["synthesize", MISSING, *SYNTHESIZE],
    ["synthesize", "--references", MISSING, *SYNTHESIZE],
    ["finetune", "--data", MISSING, "--out", "ft"],
    ["ensemble", "train", "--data", MISSING, "--shards", 2, "--out", "ens"],
    ["eval", "predict", "--ensemble", ".", "--data", MISSING, "--out", "res"],
    ["eval", "exposure", "--model", "tiny", "--canaries", MISSING],
    ["generate", "--prompt", "x", "--context", MISSING, "--spans", MISSING, "--epsilon", 8],
    ["sanitize", __file__, "--spans", MISSING, "--epsilon", 8],  # the document exists, its spans do not
])
def test_a_missing_input_file_is_bad_input_not_usage(args, tmp_path, monkeypatch):
    """Every input path click checks (tokendp.cli._common.InputPath) fails with exit code 3, as
    sanitize and tag do for theirs, and under --json as one JSON error naming the option."""
    monkeypatch.chdir(tmp_path)
    plain = run(*args)
    assert plain.exit_code == EXIT_BAD_INPUT, plain.output
    assert f"'{MISSING}' does not exist" in plain.stderr
    if args[:2] == ["ensemble", "train"]:  # the one command here without --json
        return
    res = run(*args, "--json")
    assert res.exit_code == EXIT_BAD_INPUT and res.stdout == ""
    error = json.loads(res.stderr.strip().splitlines()[-1])["error"]
    assert error["kind"] == "bad_input" and MISSING in error["message"]


def test_under_json_an_error_is_one_json_line_on_stderr_and_nothing_on_stdout(tmp_path):
    for args, code, kind in [
        ((*FUSION, "--max-new-tokens", "0"), EXIT_USAGE, "usage"),
        (("account", "dp-fusion", "--epsilon", "3", "--json"), EXIT_USAGE, "usage"),  # click's own usage error
        (("sanitize", tmp_path / "nope.txt", "--epsilon", 8, "--json"), EXIT_BAD_INPUT, "bad_input"),
    ]:
        res = run(*args)
        assert res.exit_code == code and res.stdout == ""
        error = json.loads(res.stderr.strip().splitlines()[-1])["error"]
        assert error["exit_code"] == code and error["kind"] == kind and error["message"]
    plain = run(*FUSION[:-1], "--max-new-tokens", "0")
    assert plain.exit_code == EXIT_USAGE and plain.stderr.startswith("Error: ")


def test_account_json_is_indented_like_the_other_commands():
    res = run(*FUSION, "--max-new-tokens", "100")
    assert res.exit_code == 0 and res.stdout.startswith("{\n  \"mechanism\"")


def test_account_dp_fusion_chooses_the_order_as_sanitize_does():
    """epsilon 3 over 100 tokens at delta 1e-5 is out of reach at alpha 2; without --alpha the
    order is the one sanitize would choose (fusion.choose_alpha) and the output says so."""
    from tokendp.accounting.mechanisms import dp_fusion_alpha

    at_two = run(*FUSION, "--max-new-tokens", "100", "--alpha", "2")
    assert at_two.exit_code == EXIT_USAGE and "not above" in at_two.stderr
    out = json.loads(run(*FUSION, "--max-new-tokens", "100").stdout)
    assert out["alpha"] == dp_fusion_alpha([(3.0, 2, 100)], delta=1e-5) != 2.0
    assert out["alpha_source"].startswith("chosen") and out["epsilon"] <= 3
    with_beta = json.loads(run("account", "dp-fusion", "--beta", "0.01", "--groups", "2", "--max-new-tokens", "100",
                               "--delta", "1e-5", "--json").stdout)
    assert with_beta["alpha"] == 2.0 and with_beta["alpha_source"].startswith("default")
    given = json.loads(run(*FUSION, "--max-new-tokens", "100", "--alpha", "8").stdout)
    assert given["alpha"] == 8.0 and given["alpha_source"] == "given"


def test_choose_alpha_is_the_accounting_choice():
    from tokendp.accounting.mechanisms import dp_fusion_alpha
    from tokendp.fusion import ALPHA_GRID, choose_alpha

    targets = [(3.0, 2, 100), (8.0, 1, 400)]
    assert choose_alpha(targets, delta=1e-5) == dp_fusion_alpha(targets, delta=1e-5, orders=ALPHA_GRID)


def test_listings_keep_whole_sentences():
    """short_help: no listing is cut at "et al." or anywhere else with an ellipsis."""
    for args in (["--help"], ["account", "--help"], ["eval", "--help"], ["keys", "--help"], ["model", "--help"]):
        listing = run(*args).output.split("Commands:")[1]
        assert "...\n" not in listing and "et al.\n" not in listing, args


@pytest.mark.parametrize("command", ["sanitize", "generate"])
def test_help_explains_delta_temperature_placement_and_the_tagger_choices(command):
    params = {p.name: p for p in main.commands[command].params}
    for name in ("delta", "temperature", "device", "dtype", "epsilon", "beta"):
        assert len(params[name].help or "") > 15, name
    assert "One of --epsilon or --beta is required" in params["epsilon"].help
    assert list(params["tagger"].type.choices) == ["auto", "patterns", "model", "presidio", "spacy"]


def test_generate_temperature_help_compares_with_the_true_defaults():
    """generate's help says why its 0.7 is lower: it must name commands whose default is the 1.0 it quotes."""
    def params(name):
        return {p.name: p for p in main.commands[name].params}

    help_text = params("generate")["temperature"].help
    assert params("generate")["temperature"].default == 0.7 and "Below the 1.0 of synthesize and predict" in help_text
    assert params("synthesize")["temperature"].default == params("predict")["temperature"].default == 1.0
    assert params("sanitize")["temperature"].default == 0.7 and "sanitize" not in help_text


def _readme_vocabulary() -> dict[str, set[str]]:
    """README "One vocabulary": flag -> the commands its row names ("account pmixed/dpsgd" is two)."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    table = readme.split("### One vocabulary", 1)[1].split("\n\n")[2]
    rows = {}
    for line in table.splitlines()[2:]:
        flag, _, commands = (cell.strip() for cell in line.strip("|").split("|"))
        names = set()
        for command in commands.split(", "):
            head, _, subs = command.rpartition(" ")
            names |= {f"{head} {sub}".strip() for sub in subs.split("/")}
        rows[flag.strip("`")] = names
    return rows


@pytest.mark.parametrize("flag", ["--sample-rate", "--device", "--dtype", "--references-per-text", "--queries",
                                  "--expected-batch-size", "--concurrency", "--batching", "--batch-size"])
def test_readme_vocabulary_names_exactly_the_commands_with_the_flag(flag):
    """The table's rows that list commands one by one list exactly those that show the flag."""
    shown = {" ".join(path) for path, command in _commands(main) if flag in _flags(command)}
    assert _readme_vocabulary()[flag] == shown


def _recorder(monkeypatch, module: str, name: str, result):
    """Replace ``module.name`` (the library function a command calls) by one that records its
    arguments and returns ``result``: the command's own parsing runs, no model does."""
    import importlib

    calls = []

    def record(*args, **kwargs):
        calls.append((args, kwargs))
        return result

    monkeypatch.setattr(importlib.import_module(module), name, record)
    return calls


def _corpus_run():
    from types import SimpleNamespace

    return SimpleNamespace(lines=[], summary=SimpleNamespace(format=lambda: ""), output=None, diagnostics=None,
                           diagnostics_path=None)


def _manifest():
    from types import SimpleNamespace

    return SimpleNamespace(ensemble_size=1, shards=[SimpleNamespace(records=1)])


SYNTH = ["--epsilon", 1, "--delta", 1e-5, "--engine", "local", "-q"]
RETIRED = [  # command, the new spelling, the old one, the library call it feeds, what the call received
    (["sanitize", "docs.jsonl", "--epsilon", 8, "-q"], ["--concurrency", 3], ["--batch-size", 3],
     ("tokendp.engines.runner", "sanitize_corpus", _corpus_run), lambda a, k: k["batch_size"]),
    (["synthesize", "refs.jsonl", *SYNTH, "--max-new-tokens", 5], ["--references-per-text", 3], ["--batch-size", 3],
     ("tokendp.engines.synthesis", "synthesize_corpus", _corpus_run), lambda a, k: a[1]["batch_size"]),
    (["synthesize", "refs.jsonl", *SYNTH, "--references-per-text", 3], ["--max-new-tokens", 5], ["--max-tokens", 5],
     ("tokendp.engines.synthesis", "synthesize_corpus", _corpus_run), lambda a, k: a[1]["max_tokens"]),
    (["finetune", "--data", "refs.jsonl", "--out", "ft", "--method", "none", "--lora-r", 0, "--json"],
     ["--model", "tiny"], ["--base", "tiny"],
     ("tokendp.jobs.finetune", "finetune", dict), lambda a, k: k["model"]),
    (["finetune", "--data", "refs.jsonl", "--out", "ft", "--method", "none", "--lora-r", 0, "--json"],
     ["--expected-batch-size", 3], ["--batch-size", 3],
     ("tokendp.jobs.finetune", "finetune", dict), lambda a, k: k["config"].batch_size),
    (["ensemble", "train", "--data", "refs.jsonl", "--shards", 1, "--out", "ens", "-q"], ["--model", "tiny"],
     ["--base", "tiny"], ("tokendp.ensemble.train", "train_ensemble", _manifest), lambda a, k: k["base"]),
]


@pytest.mark.parametrize("args, new, old, call, received", RETIRED)
def test_retired_names_of_sanitize_synthesize_finetune_and_ensemble_train(args, new, old, call, received, tmp_path,
                                                                         monkeypatch):
    """The old spelling reaches the same library argument as the new one, says it is deprecated
    on stderr (also under -q), and both at once are a usage error naming the new flag."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "refs.jsonl").write_text('{"id": "a", "text": "a b"}\n')
    (tmp_path / "docs.jsonl").write_text('{"id": "a", "text": "a b"}\n')
    module, name, result = call
    values = []
    for spelling in (new, old):
        calls = _recorder(monkeypatch, module, name, result())
        res = run(*args, *spelling)
        assert res.exit_code == 0 and len(calls) == 1, res.output
        assert (f"{old[0]} is deprecated, use {new[0]}" in res.stderr) == (spelling is old)
        values.append(received(*calls[0]))
    assert values[0] == values[1] == new[1]
    both = run(*args, *new, *old)
    assert both.exit_code == EXIT_USAGE and f"give {new[0]} once" in both.stderr


def test_docs_give_predicts_spent_budget_its_exit_code():
    """README and docs/predict.md say what predict exits with when its T tokens are spent."""
    from pathlib import Path

    from tokendp.cli._exit import EXIT_BUDGET

    root = Path(__file__).resolve().parents[2]
    for doc in ("README.md", "docs/predict.md"):
        text = " ".join((root / doc).read_text(encoding="utf-8").split())
        assert f"exits with code {EXIT_BUDGET} and a message" in text, doc
        assert "exits with code 2 and a message" not in text, doc
