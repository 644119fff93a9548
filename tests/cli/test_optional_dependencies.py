"""Issue 12: a command that needs a missing optional package stops at start-up, before any work,
with exit code 4 (a missing extra; a script: 2) and one line naming what to install (simulated with sys.modules[name] = None)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tokendp._optional import require
from tokendp.cli import main
from tokendp.cli._exit import EXIT_MISSING_EXTRA
from tokendp.errors import MissingDependencyError, TokenDPError

PRIVATE = "Dear Dr Helen Marsh, about my patient Mr Tomas Lindqvist."


def _missing(monkeypatch, *names):
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def _forbid(monkeypatch, module, attr, calls):
    """Replace ``module.attr`` with a stub that records that work started."""
    def stub(*args, **kwargs):
        calls.append(attr)
        raise AssertionError(f"{attr} ran although a dependency is missing")
    monkeypatch.setattr(module, attr, stub)


def _one_line(output: str) -> str:
    """The error's one line (after a corpus run's first note, which comes before anything is read)."""
    lines = [line for line in output.strip().splitlines() if line.strip() and not line.startswith("tokendp: ")]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


def test_require_names_the_extra_and_is_a_typed_tokendp_error(monkeypatch):
    _missing(monkeypatch, "matplotlib")
    with pytest.raises(MissingDependencyError) as info:
        require("matplotlib", "eval", "tokendp eval sanitize", why="for its plots")
    assert str(info.value) == 'tokendp eval sanitize needs matplotlib for its plots: pip install "tokendp[eval]"'
    assert isinstance(info.value, TokenDPError) and isinstance(info.value, ImportError)
    assert require("json", None, "x") is json


def test_require_without_an_extra_names_the_package(monkeypatch):
    _missing(monkeypatch, "pycrfsuite")
    with pytest.raises(MissingDependencyError, match="pip install python-crfsuite$"):
        require("pycrfsuite", None, "the model tagger", package="python-crfsuite")


def _eval_args(tmp_path, *extra):
    (tmp_path / "data").mkdir()
    (tmp_path / "c.json").write_text("{}")
    return ["eval", "sanitize", "--data", str(tmp_path / "data"), "--candidates", str(tmp_path / "c.json"),
            "--out", str(tmp_path / "out"), *extra]


def test_eval_sanitize_without_matplotlib_exits_4_before_the_evaluation(monkeypatch, tmp_path):
    import tokendp.backends
    import tokendp.eval.sanitization as sanitization

    calls: list[str] = []
    _forbid(monkeypatch, sanitization, "evaluate_sanitization", calls)
    _forbid(monkeypatch, tokendp.backends, "load_backend", calls)
    _missing(monkeypatch, "matplotlib", "matplotlib.pyplot")
    result = CliRunner().invoke(main, _eval_args(tmp_path))
    assert result.exit_code == EXIT_MISSING_EXTRA, result.output
    line = _one_line(result.output)
    assert "tokendp eval sanitize needs matplotlib" in line and 'pip install "tokendp[eval]"' in line
    assert "--no-plots" in line
    assert calls == [] and not (tmp_path / "out").exists()


def test_eval_sanitize_no_plots_runs_without_matplotlib(monkeypatch, tmp_path):
    import tokendp.eval.sanitization as sanitization

    row = {"method": "public", "setting": "public", "epsilon": 0.0, "ppl": 9.5, "asr_loss": 0.2,
           "asr_mink": 0.2, "games": 3, "docs": 1, "delta": 1e-5, "max_new_tokens": 4}
    monkeypatch.setattr(sanitization, "evaluate_sanitization", lambda config, out, progress: [row])
    _missing(monkeypatch, "matplotlib", "matplotlib.pyplot")
    result = CliRunner().invoke(main, _eval_args(tmp_path, "--no-plots"))
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["results.csv", "results.json", "results.md"]


def test_write_results_checks_matplotlib_before_writing(monkeypatch, tmp_path):
    from tokendp.eval.report import write_results

    _missing(monkeypatch, "matplotlib", "matplotlib.pyplot")
    with pytest.raises(MissingDependencyError, match=r"tokendp\[eval\]"):
        write_results([{"method": "public", "epsilon": 0.0}], tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("tagger,extra", [("presidio", 'pip install "tokendp[presidio]"'),
                                          ("spacy", "pip install spacy")])
def test_sanitize_with_a_missing_tagger_exits_4_before_loading_the_model(monkeypatch, tmp_path, tagger, extra):
    import tokendp.jobs.sanitize as sanitize_module

    calls: list[str] = []
    _forbid(monkeypatch, sanitize_module, "load_backend", calls)
    _missing(monkeypatch, "presidio_analyzer", "presidio_analyzer.nlp_engine", "spacy")
    doc, out = tmp_path / "doc.txt", tmp_path / "out.txt"
    doc.write_text(PRIVATE)
    result = CliRunner().invoke(main, ["sanitize", str(doc), "--tagger", tagger, "--epsilon", "8", "--out", str(out)])
    assert result.exit_code == EXIT_MISSING_EXTRA, result.output
    line = _one_line(result.output)
    assert f"the {tagger} tagger needs" in line and extra in line
    assert "Helen" not in line and "Marsh" not in line
    assert calls == [] and not out.exists()


def test_sanitize_corpus_without_ray_or_a_tagger_exits_4_before_reading_or_loading(monkeypatch, tmp_path):
    import tokendp.engines.runner as runner_module
    import tokendp.engines.worker as worker_module

    calls: list[str] = []
    corpus, out = tmp_path / "docs.jsonl", tmp_path / "out.jsonl"
    corpus.write_text(json.dumps({"id": "a", "text": PRIVATE}) + "\n")
    _forbid(monkeypatch, worker_module, "load_backend", calls)
    _missing(monkeypatch, "presidio_analyzer", "presidio_analyzer.nlp_engine")
    result = CliRunner().invoke(main, ["sanitize", str(corpus), "--tagger", "presidio", "--beta", "0.1", "--out", str(out)])
    assert result.exit_code == EXIT_MISSING_EXTRA and 'pip install "tokendp[presidio]"' in _one_line(result.output)
    _forbid(monkeypatch, runner_module, "scan_corpus", calls)
    _missing(monkeypatch, "ray")
    result = CliRunner().invoke(main, ["sanitize", str(corpus), "--engine", "ray", "--beta", "0.1", "--out", str(out)])
    assert result.exit_code == EXIT_MISSING_EXTRA and 'needs ray (with Ray Data): pip install "tokendp[ray]"' in _one_line(result.output)
    assert calls == [] and not out.exists() and "Helen" not in result.output


def test_synthesize_on_ray_without_ray_exits_4_before_reading_or_loading(monkeypatch, tmp_path):
    import tokendp.engines.synthesis as synthesis_module

    calls: list[str] = []
    refs, out = tmp_path / "refs.jsonl", tmp_path / "out.jsonl"
    refs.write_text(json.dumps({"id": "a", "text": PRIVATE}) + "\n")
    _forbid(monkeypatch, synthesis_module, "scan_corpus", calls)
    _missing(monkeypatch, "ray")
    result = CliRunner().invoke(main, ["synthesize", str(refs), "--engine", "ray", "--epsilon", "1", "--delta", "1e-5",
                                       "--references-per-text", "1", "--max-new-tokens", "2", "--out", str(out)])
    assert result.exit_code == EXIT_MISSING_EXTRA and 'needs ray (with Ray Data): pip install "tokendp[ray]"' in _one_line(result.output)
    assert calls == [] and not out.exists() and "Helen" not in result.output


@pytest.mark.parametrize("command", [["tag", "{doc}", "--tagger", "presidio", "--html", "{html}"],
                                     ["eval", "tagger", "--data", "{data}", "--tagger", "presidio"]])
def test_tag_and_eval_tagger_without_presidio_exit_4(monkeypatch, tmp_path, command):
    _missing(monkeypatch, "presidio_analyzer", "presidio_analyzer.nlp_engine")
    (tmp_path / "doc.txt").write_text(PRIVATE)
    (tmp_path / "data").mkdir()
    paths = {"doc": tmp_path / "doc.txt", "html": tmp_path / "tags.html", "data": tmp_path / "data"}
    result = CliRunner().invoke(main, [a.format(**paths) for a in command])
    assert result.exit_code == EXIT_MISSING_EXTRA, result.output
    line = _one_line(result.output)
    assert 'pip install "tokendp[presidio]"' in line and "Helen" not in line
    assert not (tmp_path / "tags.html").exists()


def test_training_script_without_faker_exits_2_before_training(tmp_path):
    script = Path(__file__).resolve().parents[2] / "scripts" / "train_default_model.py"
    code = ("import sys, runpy; sys.modules['faker'] = None; sys.argv = ['train', '--smoke']; "
            f"runpy.run_path({str(script)!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert _one_line(proc.stderr) == 'error: training the default model needs faker: pip install "tokendp[train]"'


@pytest.mark.parametrize("command", ["predict", "ensemble"])
def test_missing_peft_stops_ensemble_commands_before_any_work(monkeypatch, tmp_path, command):
    import tokendp.backends.hf as hf

    _missing(monkeypatch, "peft")
    calls = []
    _forbid(monkeypatch, hf.HFBackend, "load", calls)
    data = tmp_path / "c.jsonl"
    data.write_text(json.dumps({"text": PRIVATE}) + "\n")
    (tmp_path / "ens").mkdir()
    args = (["predict", "--ensemble", str(tmp_path / "ens"), "--prompt", PRIVATE, "--epsilon", "8", "--delta", "1e-5",
             "--queries", "4"] if command == "predict" else
            ["ensemble", "train", "--data", str(data), "--shards", "1", "--out", str(tmp_path / "out")])
    res = CliRunner().invoke(main, args)
    assert res.exit_code == EXIT_MISSING_EXTRA and calls == []
    line = _one_line(res.output)
    assert 'needs peft' in line and 'pip install "tokendp[ensemble]"' in line and PRIVATE not in res.output


def test_eval_synthesize_without_mauve_exits_4_before_any_work(monkeypatch, tmp_path):
    import tokendp.backends

    calls: list[str] = []
    _forbid(monkeypatch, tokendp.backends, "load_backend", calls)
    _missing(monkeypatch, "mauve")
    result = CliRunner().invoke(main, ["eval", "synthesize", "--data", str(tmp_path), "--out", str(tmp_path / "out"),
                                       "--no-plots"])
    assert result.exit_code == EXIT_MISSING_EXTRA, result.output
    line = _one_line(result.output)
    assert "tokendp eval synthesize needs mauve-text: pip install" in line and 'pip install "tokendp[eval]"' in line
    assert calls == [] and not (tmp_path / "out").exists()
