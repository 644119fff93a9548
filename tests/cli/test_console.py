"""What the CLI says on stderr besides its output: a first line before the model loads, token
bars (counts only) where a person watches and never in piped or --json output, no library
noise, the global -q/-v/--progress, NO_COLOR, and --threads on the commands that run a model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import tinylm
import tokendp
from tokendp.cli import main

ROOT = Path(__file__).resolve().parents[2]
LETTER = ["sanitize", str(ROOT / "examples" / "letter.txt"), "--spans", str(ROOT / "examples" / "letter.spans.json"),
          "--epsilon", "8", "--model", "tiny", "--max-new-tokens", "6", "--seed", "0"]
# --progress where stderr is not a terminal: whole lines, counts and a rate
LINE = re.compile(r"tokendp: sanitize:\s+\d+% \d/6 tokens \[[0-9:<?]+,\s+[?0-9.]+token/s\]")
# T = 6 cuts the letter short: the command says so last (issue 33, item 3)
CUT = ("tokendp: warning: the rewrite was cut at T (max_new_tokens): 6 tokens for a document of 136; it may not "
       'cover the whole document (docs/sanitize.md, "Long documents")')
TEXT = "Dear Dr Helen Marsh, I am writing about my patient Mr Tomas Lindqvist."


def _run(*args, **kwargs):
    return CliRunner().invoke(main, [str(a) for a in args], **kwargs)


def _tokendp(*args: str) -> subprocess.CompletedProcess:
    """The real command in its own process, stdout and stderr piped (as a script or a log would)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "PYTHONWARNINGS")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(Path(tokendp.__file__).parents[1]), env.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "tokendp", *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


@pytest.fixture
def threads():
    """torch's thread count, put back after a test that sets it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_piped_output_has_notes_only_no_bar_or_library_noise():
    plain = _tokendp(*LETTER)
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.splitlines() == ["tokendp: loading model tiny", "tokendp: generating up to 6 tokens", CUT]
    assert "privacy report" in plain.stdout
    as_json = _tokendp(*LETTER, "--json", "-q")
    assert as_json.returncode == 0, as_json.stderr
    assert as_json.stderr == "" and set(json.loads(as_json.stdout)) == {"text", "report"}


def test_the_first_line_comes_before_the_model_loads(monkeypatch):
    import tokendp.jobs.sanitize as library

    real = library.load_backend

    def slow_load(*args, **kwargs):
        print("<the model loads here>", file=sys.stderr)
        return real(*args, **kwargs)

    monkeypatch.setattr(library, "load_backend", slow_load)
    res = _run(*LETTER)
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines() == ["tokendp: loading model tiny", "<the model loads here>",
                                       "tokendp: generating up to 6 tokens", CUT]


def test_forced_progress_off_a_terminal_is_whole_lines_of_counts_and_never_text():
    """A log, a pipe or a CI job shows a line once it ends: tqdm's redrawn frames would show
    nothing there until the run is over (issue 45: 9.5 minutes of nothing, --progress included)."""
    res = _run("--progress", *LETTER)
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    progress = [line for line in lines if line.startswith("tokendp: sanitize:")]
    assert progress and all(LINE.fullmatch(p) for p in progress), progress  # a count out of T and a rate: no text
    assert "\r" not in res.stderr and progress[-1].startswith("tokendp: sanitize: 100% 6/6 tokens")
    assert [line for line in lines if line not in progress] == ["tokendp: loading model tiny",
                                                               "tokendp: generating up to 6 tokens", CUT]
    assert "sanitize:" not in _run("--progress", *LETTER, "--json").stderr  # never with --json
    assert "sanitize:" not in _run(*LETTER).stderr  # stderr not a terminal


def test_a_long_document_says_how_many_passages_it_is_rewritten_in():
    res = _run(*LETTER[:-4], "--max-new-tokens", "24", "--passage-tokens", "40", "--seed", "0")
    assert res.exit_code == 0, res.output
    assert re.search(r"^tokendp: generating up to \d+ tokens in \d passages$", res.stderr, re.M), res.stderr


def test_a_long_documents_progress_names_each_passage_and_verbose_agrees_with_the_report():
    res = _run("--progress", "-v", *LETTER[:-4], "--max-new-tokens", "24", "--passage-tokens", "40", "--seed", "0",
               "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)["report"]
    res = _run("--progress", "-v", *LETTER[:-4], "--max-new-tokens", "24", "--passage-tokens", "40", "--seed", "0")
    n = report["passages"]
    assert n > 1 and report["max_new_tokens"] == 24  # the T asked for, split over the passages
    for k in range(1, n + 1):
        assert f"sanitize (passage {k} of {n}):" in res.stderr
    assert f"tokendp: {report['tokens_generated']} tokens in " in res.stderr


def test_a_terminals_bar_shows_the_passage_and_the_rate(capsys, monkeypatch):
    from tokendp.cli._console import Console

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # capsys's stderr, as a terminal
    with Console().tokens("generating up to 6 tokens", 6, desc="sanitize") as progress:
        progress(0, 11)
        progress.on_passage(0, 1, 3)
        progress(0, 12)
    frames = capsys.readouterr().err.replace("\r", "\n")
    assert "sanitize (passage 2 of 3):  17%|" in frames and "1/6 [" in frames and "token/s]" in frames


def test_lines_come_at_most_every_line_seconds_and_at_each_passage(capsys, monkeypatch):
    from tokendp.cli import _console
    from tokendp.cli._console import Console

    with Console(progress=True).tokens("generating", 100, desc="sanitize") as progress:
        for _ in range(3):
            progress(0, 7)
        progress.on_passage(0, 1, 2)
        progress(0, 7)
    lines = [line.split(" [")[0] for line in capsys.readouterr().err.splitlines()]
    assert lines == ["tokendp: generating", "tokendp: sanitize:   1% 1/100 tokens",  # the first at once
                     "tokendp: sanitize (passage 2 of 2):   3% 3/100 tokens",  # a new passage at once
                     "tokendp: sanitize (passage 2 of 2):   4% 4/100 tokens"]  # the last as it closes
    monkeypatch.setattr(_console, "LINE_SECONDS", 0.0)
    with Console(progress=True).tokens("generating", None, desc="ask") as progress:
        for _ in range(3):
            progress.count()
    assert [line.split(" [")[0] for line in capsys.readouterr().err.splitlines()] == [
        "tokendp: generating", "tokendp: ask: 1 tokens", "tokendp: ask: 2 tokens", "tokendp: ask: 3 tokens"]


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_silences_every_note_before_or_after_the_subcommand(where):
    args = ["-q", *LETTER] if where == "before" else [*LETTER, "--quiet"]
    res = _run(*args)
    assert res.exit_code == 0, res.output
    assert res.stderr == "" and "privacy report" in res.stdout


def test_quiet_keeps_errors():
    res = _run("-q", *LETTER, "--draft-tokens", "0")
    assert res.exit_code == 2 and "draft-tokens" in res.stderr


def test_verbose_adds_timings_and_the_rate():
    res = _run(*LETTER, "-v")
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    assert "tokendp: loading model tiny" in lines and any(line.endswith(" s") and "done in" in line for line in lines)
    assert any("tokens/s" in line for line in lines)


@pytest.fixture
def fake_conversion(monkeypatch, tmp_path):
    """SmolLM2's conversion with a few bytes for the GGUF and a converter that only steps."""
    from tokendp.models import cache

    gguf = tmp_path / "smollm2.gguf"
    gguf.write_bytes(b"GGUF stand-in")

    def convert(source, dest, *, on_step):
        for name in cache.CONVERSION_STEPS:
            on_step(name)
        (dest / "config.json").write_text("{}")

    monkeypatch.setenv("TOKENDP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "gguf_path", lambda spec: gguf)
    monkeypatch.setattr(cache, "verify_gguf", lambda path, spec: None)
    monkeypatch.setattr(cache, "_find_spec", lambda name: object())
    monkeypatch.setattr(cache, "convert_gguf", convert)


def test_the_conversion_says_so_and_draws_its_steps_wherever_a_load_starts_it(fake_conversion):
    res = _run("--progress", "model", "build", "smollm2", "-v")
    assert res.exit_code == 0, res.output
    assert res.stderr.startswith("tokendp: converting SmolLM2-135M-Instruct.Q4_1.gguf once into ")
    assert "convert (saving)" in res.stderr and "3/4 steps [" in res.stderr and "step/s" in res.stderr
    assert "tokendp: conversion: done in" in res.stderr


def test_quiet_silences_the_conversion(fake_conversion):
    res = _run("-q", "--progress", "model", "build", "smollm2")
    assert res.exit_code == 0 and res.stderr == "" and "converted model at" in res.stdout


def test_no_color_removes_the_tags_highlighting(tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text("Mr Smith lodged application no. 36110/97 on 30 May 1996.", encoding="utf-8")
    args = ["tag", doc, "--tagger", "patterns"]
    assert "\x1b[" in _run(*args, color=True, env={"NO_COLOR": None}).stdout
    assert "\x1b[" in _run(*args, color=True, env={"NO_COLOR": ""}).stdout  # set but empty: colour stays
    plain = _run(*args, color=True, env={"NO_COLOR": "1"})
    assert plain.exit_code == 0 and "\x1b[" not in plain.output and "36110/97" in plain.stdout


def test_threads_sets_torchs_thread_count_for_a_document(threads):
    torch.set_num_threads(2)
    res = _run(*LETTER, "--threads", "1")
    assert res.exit_code == 0, res.output
    assert torch.get_num_threads() == 1
    assert _run(*LETTER, "--threads", "0").exit_code == 2


@pytest.mark.parametrize("command", ["generate", "synthesize"])
def test_threads_is_accepted_by_the_other_model_commands(command, threads, tmp_path):
    torch.set_num_threads(2)
    if command == "generate":
        doc = tmp_path / "doc.txt"
        doc.write_text(TEXT, encoding="utf-8")
        args = ["generate", "--prompt", "Who?", "--context", doc, "--tagger", "patterns", "--model", "tiny",
                "--max-new-tokens", "2", "--epsilon", "8", "--seed", "0"]
    else:
        refs = tmp_path / "refs.jsonl"
        refs.write_text("".join(json.dumps({"text": t}) + "\n" for t in tinylm.CORPUS), encoding="utf-8")
        args = ["synthesize", refs, "--model", tinylm.model_dir(), "--epsilon", "3", "--delta", "1e-5",
                "--references-per-text", "2", "--max-new-tokens", "2", "--domain", "a note", "--seed", "0"]
    res = _run(*args, "--threads", "1")
    assert res.exit_code == 0, res.output
    assert torch.get_num_threads() == 1
    assert "tokendp: loading model" in res.stderr and "tokendp: generating" in res.stderr


def test_help_says_when_one_thread_helps():
    res = _run("sanitize", "--help")
    assert "--threads" in res.output and "busy machine" in res.output


def test_quiet_keeps_a_corpus_run_to_its_records(tmp_path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(json.dumps({"id": "a", "text": TEXT, "spans": [{"start": 8, "end": 19, "label": "PERSON"}]})
                      + "\n", encoding="utf-8")
    args = ["sanitize", corpus, "--model", "tiny", "--beta", "0.05", "--max-new-tokens", "2", "--seed", "0"]
    loud, quiet = _run(*args, "--out", tmp_path / "out.jsonl"), _run("-q", *args, "--out", tmp_path / "quiet.jsonl")
    assert loud.exit_code == quiet.exit_code == 0, loud.output
    assert "1 documents written" in loud.stderr and "wrote" in loud.stderr
    assert quiet.stderr == "" and (tmp_path / "quiet.jsonl").read_text() == (tmp_path / "out.jsonl").read_text()
