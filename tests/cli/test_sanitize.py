"""`tokendp sanitize`: JSON shape, readable report, JSONL batches, exit code 2 on bad input."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import tinylm
from tokendp.cli import main
from tokendp.cli._exit import EXIT_BAD_INPUT

OPTIONS = '{"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>"}'
TEXT = "Dear Dr Helen Marsh, I am writing about my patient Mr Tomas Lindqvist."
SPANS = [{"start": 8, "end": 19, "label": "PERSON"}, {"start": 54, "end": 70, "label": "PERSON"}]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "doc.txt").write_text(TEXT)
    (d / "doc.spans.json").write_text(json.dumps(SPANS))
    lines = [{"id": "a", "text": TEXT, "spans": SPANS}, {"id": "b", "text": "The court sat in Leeds.",
                                                         "spans": [{"start": 17, "end": 22, "label": "LOC"}]}]
    (d / "docs.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return d


def _run(*args, input=None):
    return CliRunner().invoke(main, ["sanitize", *args], input=input)


def _model():
    return str(tinylm.model_dir(OPTIONS))


def test_json_output_shape(files):
    res = _run(str(files / "doc.txt"), "--spans", str(files / "doc.spans.json"), "--model", _model(),
               "--epsilon", "8", "--max-new-tokens", "8", "--seed", "0", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"text", "report"} and isinstance(out["text"], str)
    rep = out["report"]
    assert rep["mechanism"] == "dp-fusion" and rep["max_new_tokens"] == 8 and rep["alpha"] > 2
    group = rep["groups"][0]
    assert rep["groups"] == [{"label": "PERSON", "n_spans": 2, "n_tokens": group["n_tokens"], "beta": group["beta"],
                              "epsilon": 8.0, "epsilon_certified": group["epsilon_certified"]}]
    assert 7.9 < group["epsilon_certified"] <= 8  # the target is shown, the exact certificate kept beside it
    assert rep["spans_source"] == "given" and rep["kept_labels"] == {} and rep["incomplete"] is True  # cut at T


def test_readable_output_and_stdin(files):
    res = _run("-", "--model", _model(), "--beta", "0.1", "--max-new-tokens", "4", "--seed", "0",
               "--method", "public", "--tagger", "patterns", input="Call me on 07700 900123 please.")
    assert res.exit_code == 0, res.output
    assert "privacy report" in res.output and "guarantee: epsilon 0" in res.output
    report_lines = res.output[res.output.index("-- privacy report"):].splitlines()
    assert report_lines[1].startswith("In plain words: the output never saw the hidden spans")


def test_the_text_report_opens_with_one_plain_line():
    from tokendp.cli.sanitize import format_report

    report = {"mechanism": "dp-fusion", "model": "tiny", "alpha": 2.0, "delta": 1e-5, "max_new_tokens": 8,
              "tokens_generated": 8, "stop_reason": "length", "guarantee": "g",
              "groups": [{"label": "PERSON", "n_spans": 1, "n_tokens": 2, "beta": 0.1, "epsilon": 8.0}]}
    lines = format_report(report).splitlines()
    assert lines[1].startswith("In plain words: for each group below") and "e^epsilon" in lines[1]
    assert "anything the tagger missed" in lines[1] and "docs/concepts.md" in lines[1]
    assert format_report({**report, "mechanism": "original"}).splitlines()[1] == (
        "In plain words: nothing is protected; the model read the whole document.")


def test_jsonl_to_out_file(files, tmp_path):
    out = tmp_path / "out.jsonl"
    res = _run(str(files / "docs.jsonl"), "--model", _model(), "--beta", "0.05", "--max-new-tokens", "4",
               "--seed", "1", "--out", str(out))
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["a", "b"] and all(set(r) == {"id", "text", "report"} for r in rows)
    assert rows[1]["report"]["groups"][0]["label"] == "LOC"


@pytest.mark.parametrize("args, message", [
    (["--max-new-tokens", "4"], "exactly one of beta= or epsilon="),
    (["--beta", "0.1", "--epsilon", "1"], "exactly one"),
    (["--beta", "-1"], "beta"),
])
def test_errors_exit_2(files, args, message):
    res = _run(str(files / "doc.txt"), "--spans", str(files / "doc.spans.json"), "--model", _model(), *args)
    assert res.exit_code == 2 and message in res.output and "Helen" not in res.output


def test_bad_spans_and_missing_input_exit_3(files, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"start": 60, "end": 999, "label": "PERSON"}]))
    res = _run(str(files / "doc.txt"), "--spans", str(bad), "--model", _model(), "--beta", "0.1")
    assert res.exit_code == EXIT_BAD_INPUT and "Lindqvist" not in res.output
    res = _run(str(tmp_path / "none.txt"), "--model", _model(), "--beta", "0.1")
    assert res.exit_code == EXIT_BAD_INPUT and "not found" in res.output


def test_report_epsilon_equals_tokendp_account(files):
    res = _run(str(files / "doc.txt"), "--spans", str(files / "doc.spans.json"), "--model", _model(),
               "--beta", "0.07", "--alpha", "3", "--delta", "1e-6", "--max-new-tokens", "5", "--seed", "0",
               "--groups", "single", "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)["report"]
    acc = CliRunner().invoke(main, ["account", "dp-fusion", "--alpha", "3", "--beta", "0.07", "--groups",
                                    str(len(rep["groups"])), "--max-new-tokens", "5", "--delta", "1e-6", "--json"])
    assert acc.exit_code == 0, acc.output
    assert [g["epsilon"] for g in rep["groups"]] == [json.loads(acc.stdout)["epsilon"]]
    assert rep["groups"][0]["label"] == "ALL" and rep["groups"][0]["n_spans"] == 2


def test_speculative_and_one_token_runs_agree(files):
    """One document, one seed: the same draws in the same order, so the same rewrite and report."""
    outs = []
    for flags in (["--no-speculative"], ["--speculative", "--draft-tokens", "2"]):
        res = _run(str(files / "doc.txt"), "--spans", str(files / "doc.spans.json"), "--model", _model(),
                   "--epsilon", "8", "--max-new-tokens", "24", "--seed", "3", "--json", *flags)
        assert res.exit_code == 0, res.output
        outs.append(json.loads(res.stdout))
    assert outs[0]["text"] == outs[1]["text"] and outs[0]["report"]["groups"] == outs[1]["report"]["groups"]
    res = _run(str(files / "doc.txt"), "--model", _model(), "--epsilon", "8", "--draft-tokens", "0")
    assert res.exit_code == 2 and "draft-tokens" in res.output


def _diagnostics_after_warning(stderr: str) -> list[dict]:
    """The JSON lines that follow the one-line warning on stderr."""
    lines = stderr.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("WARNING: the diagnostics below are data-dependent"))
    return [json.loads(line) for line in lines[start + 1:] if line.startswith("{")]


def test_diagnostics_only_with_the_flag_on_stderr_after_a_warning(files):
    args = [str(files / "doc.txt"), "--spans", str(files / "doc.spans.json"), "--model", _model(), "--epsilon", "8",
            "--max-new-tokens", "8", "--seed", "0"]
    plain, asked = _run(*args), _run(*args, "--diagnostics")
    assert plain.exit_code == asked.exit_code == 0, asked.output
    assert "lambda" not in plain.output and "diagnostic" not in plain.output.lower()
    assert asked.stdout == plain.stdout  # the release does not change
    [record] = _diagnostics_after_warning(asked.stderr)
    assert set(record["diagnostics"]["mean_lambda"]) == {"PERSON"}
    as_json = _run(*args, "--json", "--diagnostics")
    assert "diagnostics" not in json.loads(as_json.stdout)["report"]
    assert _diagnostics_after_warning(as_json.stderr) == [record]


def test_corpus_diagnostics_go_apart_from_the_output(files, tmp_path):
    args = [str(files / "docs.jsonl"), "--model", _model(), "--beta", "0.05", "--max-new-tokens", "4", "--seed", "1"]
    out = tmp_path / "out.jsonl"
    res = _run(*args, "--out", str(out), "--diagnostics")
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(set(r) == {"id", "text", "report"} and "diagnostics" not in r["report"] for r in rows)
    beside = tmp_path / "out.diagnostics.jsonl"
    diag = [json.loads(line) for line in beside.read_text().splitlines()]
    assert sorted(d["id"] for d in diag) == ["a", "b"] and all("mean_lambda" in d["diagnostics"] for d in diag)
    assert f"WARNING: the diagnostics in {beside} are data-dependent" in res.stderr
    plain = _run(*args, "--out", str(tmp_path / "plain.jsonl"))
    assert (tmp_path / "plain.jsonl").read_text() == out.read_text()
    assert not (tmp_path / "plain.diagnostics.jsonl").exists() and "WARNING" not in plain.stderr
    to_stdout = _run(*args, "--diagnostics")
    assert [json.loads(line) for line in to_stdout.stdout.splitlines()] == rows
    assert sorted(d["id"] for d in _diagnostics_after_warning(to_stdout.stderr)) == ["a", "b"]


def test_labels_choose_what_is_private(files, tmp_path):
    """--labels: an unknown name exits 2 before the model loads; a label of the input named in
    neither --labels nor --keep is refused; the chosen labels are the groups (also in a corpus)
    and the readable report names what was protected and what was kept."""
    res = _run(str(files / "doc.txt"), "--model", "no-such-model", "--epsilon", "8", "--labels", "PERSON,FOO")
    assert res.exit_code == 2 and "unknown label(s) FOO" in res.output and "no-such-model" not in res.output
    seen = "Seen on 2 June 2024 for six weeks."
    common = ["-", "--model", _model(), "--beta", "0.1", "--max-new-tokens", "4", "--seed", "0", "--method", "public",
              "--tagger", "patterns"]
    res = _run(*common, "--labels", "date", input=seen)
    assert res.exit_code == 2 and "DURATION (1 span)" in res.output and "six weeks" not in res.output
    res = _run(*common, "--labels", "date", "--keep", "duration", input=seen)
    assert res.exit_code == 0, res.output
    assert "protected labels (--labels): DATE" in res.output
    assert "kept as plain text, NOT protected: DURATION (1 span)" in res.output
    assert "spans: tagger patterns" in res.output
    out = tmp_path / "out.jsonl"
    corpus = [str(files / "docs.jsonl"), "--model", _model(), "--beta", "0.05", "--max-new-tokens", "4", "--seed", "1",
              "--out", str(out)]
    res = _run(*corpus, "--labels", "LOC")
    assert res.exit_code == 2 and "PERSON (2 spans)" in res.output and not out.exists()
    res = _run(*corpus, "--labels", "LOC", "--keep", "PERSON")
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["report"]["groups"] == [] and rows[1]["report"]["groups"][0]["label"] == "LOC"
    assert all(r["report"]["private_labels"] == ["LOC"] for r in rows)
    assert rows[0]["report"]["kept_labels"] == {"PERSON": 2} and rows[1]["report"]["kept_labels"] == {}
    res = _run(*corpus[:-1], str(tmp_path / "typo.jsonl"), "--labels", "LOC,CODE", "--keep", "PERSON")
    assert res.exit_code == 2 and "CODE, which matches no span" in res.output


def test_one_default_temperature_for_python_cli_service_page_and_demo():
    """The temperature chosen in docs/sanitize.md ("Choosing the temperature") is the default
    everywhere a document is sanitized, and `make demo` runs at it."""
    import inspect
    import re
    from pathlib import Path

    import tokendp

    default = inspect.signature(tokendp.sanitize).parameters["temperature"].default
    assert inspect.signature(tokendp.sanitize_batch).parameters["temperature"].default == default
    option = next(p for p in main.commands["sanitize"].params if p.name == "temperature")
    assert option.default == default
    schemas = pytest.importorskip("tokendp.service.schemas")
    assert schemas.SanitizeRequest.model_fields["temperature"].default == default
    root = Path(__file__).resolve().parents[2]
    page = (root / "src" / "tokendp" / "service" / "static" / "index.html").read_text(encoding="utf-8")
    assert float(re.search(r'id="temperature"[^>]*value="([0-9.]+)"', page).group(1)) == default
    makefile = (root / "Makefile").read_text(encoding="utf-8")
    demo = makefile[makefile.index("\ndemo:"):].split("\n\n")[0]
    assert "tokendp sanitize" in demo
    assert all(float(t) == default for t in re.findall(r"--temperature\s+([0-9.]+)", demo))


@pytest.mark.parametrize("args, code, message", [
    (["--epsilon", "-1"], 2, "epsilon must be a finite number >= 0"),
    ([], 2, "exactly one of beta= or epsilon="),
    (["--epsilon", "8", "--labels", "PERSON", "--keep", "person"], 2, "both protected"),
    (["--epsilon", "8", "--max-new-tokens", "0"], 2, "must be an integer >= 1"),
])
def test_parameters_are_checked_before_anything_loads(files, args, code, message):
    """Issue 33, item 4: a bad or missing parameter fails before the model (here one that does
    not exist) is loaded or the 'loading model' line is printed."""
    res = _run(str(files / "doc.txt"), "--model", "no-such-model", *args)
    assert res.exit_code == code and message in res.output, res.output
    assert "loading model" not in res.output and "no-such-model" not in res.output


def test_an_empty_document_is_bad_input_before_anything_loads(tmp_path):
    for content in ("", "\ufeff \r\n\t"):
        path = tmp_path / "empty.txt"
        path.write_text(content, encoding="utf-8")
        res = _run(str(path), "--model", "no-such-model", "--epsilon", "8")
        assert res.exit_code == EXIT_BAD_INPUT and "is empty" in res.output and "loading model" not in res.output
    res = _run("-", "--model", "no-such-model", "--epsilon", "8", input="")
    assert res.exit_code == EXIT_BAD_INPUT and "standard input is empty" in res.output


def test_a_length_beyond_the_model_context_is_a_usage_error(files):
    res = _run(str(files / "doc.txt"), "--model", _model(), "--epsilon", "8", "--max-new-tokens", "9000")
    assert res.exit_code == 2 and "cannot fit the model's context of 512 tokens" in res.output
    assert "loading model" not in res.output  # read from config.json: no weights loaded


@pytest.mark.parametrize("model", ["rewriter", "smollm2", "tiny"])
def test_a_t_no_plan_can_fit_is_refused_from_the_config_before_the_model_loads(files, model, monkeypatch):
    """Issue 44, item 3: --max-new-tokens 999999 exits 2 without loading weights, passages or not."""
    import tokendp.backends.hf as hf

    monkeypatch.setattr(hf, "load_backend", lambda *a, **k: pytest.fail("the model was loaded"))
    for extra in ([], ["--no-passages"]):
        res = _run(str(files / "doc.txt"), "--model", model, "--epsilon", "8", "--max-new-tokens", "999999", *extra)
        assert res.exit_code == 2 and "cannot fit the model's context" in res.output, res.output
        assert "loading model" not in res.output


def test_a_t_below_the_passages_is_refused_with_the_minimum(files, tmp_path):
    long = tmp_path / "long.txt"
    long.write_text("\n\n".join(f"Paragraph {i}: {TEXT}" for i in range(12)))
    (tmp_path / "none.json").write_text("[]")
    res = _run(str(long), "--model", _model(), "--epsilon", "8", "--spans", str(tmp_path / "none.json"),
               "--passage-tokens", "40", "--max-new-tokens", "3")
    assert res.exit_code == 2 and "ask for at least" in res.output, res.output
    n = int(res.output.split("ask for at least ")[1].split(",")[0])
    ok = _run(str(long), "--model", _model(), "--epsilon", "8", "--spans", str(tmp_path / "none.json"),
              "--passage-tokens", "40", "--max-new-tokens", str(n), "--json")
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.stdout)["report"]
    assert report["max_new_tokens"] == n == report["passages"]
