"""A corpus run as a person at a terminal meets it (issue 33, item 5): a first line on stderr
before anything slow, each finished document saved as it finishes (static batches too), Ctrl-C
exits 130 saying how to resume, and rerunning a finished run says it is complete and exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tokendp.cli import main
from tokendp.cli._exit import EXIT_BAD_INPUT
from tokendp.engines import sanitize_corpus
from tokendp.engines.worker import SanitizeWorker

from .corpora import documents, interrupt_after, model_dir, read_output, write_jsonl

SRC = Path(__file__).resolve().parents[2] / "src"
EXIT_INTERRUPTED = 130  # the shell's 128 + SIGINT (README, "Exit codes")


def _params(**change):
    return {"beta": 0.05, "temperature": 1.0, "seed": 3, "model": model_dir(), **change}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def test_static_batches_save_each_document_as_it_finishes(tmp_path, monkeypatch):
    """Documents of different lengths (so different default T) in one static batch: each is on
    disk when it finishes, not when the batch's last one does, so an interrupt keeps it."""
    corpus = write_jsonl(tmp_path / "c.jsonl", documents(6))
    writes = interrupt_after(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        sanitize_corpus(corpus, _params(), out=tmp_path / "o.jsonl", batch_size=3, progress=False, batching="static")
    monkeypatch.undo()
    assert writes == [1]
    saved = (tmp_path / "o.jsonl.parts" / "part-00000.jsonl").read_text().splitlines()
    assert len(saved) == 1
    run = sanitize_corpus(corpus, _params(), out=tmp_path / "o.jsonl", batch_size=3, progress=False, batching="static")
    assert (run.summary.documents, run.summary.skipped) == (5, 1)
    whole = sanitize_corpus(corpus, _params(), out=tmp_path / "whole.jsonl", batch_size=6, progress=False)
    assert read_output(run.output) == read_output(whole.output)  # with a seed, the same records


@pytest.mark.parametrize("name", ["o.jsonl", "o.parquet", "odir"])
def test_rerunning_a_finished_run_is_complete_without_loading_the_model(tmp_path, monkeypatch, name):
    corpus = write_jsonl(tmp_path / "c.jsonl", documents(3))
    out = tmp_path / name
    first = sanitize_corpus(corpus, _params(max_new_tokens=4), out=out, progress=False)
    before = sorted((p.name, p.read_bytes()) for p in ([out] if out.is_file() else out.iterdir()))

    def no_model(*args, **kwargs):
        raise AssertionError("a finished run loaded the model")

    monkeypatch.setattr(SanitizeWorker, "__init__", no_model)
    again = sanitize_corpus(corpus, _params(max_new_tokens=4), out=out, progress=False)
    assert again.output == first.output == out
    assert (again.summary.documents, again.summary.skipped) == (0, 3)
    assert sorted((p.name, p.read_bytes()) for p in ([out] if out.is_file() else out.iterdir())) == before


def test_cli_rerun_of_a_finished_run_says_complete_and_other_settings_are_refused(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", documents(3))
    out = tmp_path / "o.jsonl"
    args = ["sanitize", str(corpus), "--model", model_dir(), "--beta", "0.05", "--max-new-tokens", "4", "--seed", "1",
            "--out", str(out)]
    assert CliRunner().invoke(main, args).exit_code == 0
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert f"{out} is complete" in res.stderr and "already exists" not in res.stderr
    res = CliRunner().invoke(main, [*args, "--concurrency", "2"])  # placement is not a setting
    assert res.exit_code == 0 and "is complete" in res.stderr
    res = CliRunner().invoke(main, [*args[:-2], "--beta", "0.1", "--out", str(out)])
    assert res.exit_code == EXIT_BAD_INPUT
    assert "other settings (beta differ)" in res.stderr and "delete it or choose another --out" in res.stderr
    out.write_text(out.read_text() + "\n")  # no longer the file the run wrote
    res = CliRunner().invoke(main, args)
    assert res.exit_code == EXIT_BAD_INPUT and "already exists" in res.stderr


# Imports torch's first module under a marker, so that the test sees what was said before it.
_WATCH_TORCH = """
import sys, importlib.abc
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            print("<torch is imported here>", file=sys.stderr, flush=True)
        return None
sys.meta_path.insert(0, Watch())
from tokendp.cli import main
main(sys.argv[1:], prog_name="tokendp")
"""


def test_the_first_line_comes_before_torch_is_imported(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", documents(2))
    res = subprocess.run([sys.executable, "-c", _WATCH_TORCH, "sanitize", str(corpus), "--model", model_dir(),
                          "--beta", "0.05", "--max-new-tokens", "3", "--out", str(tmp_path / "o.jsonl")],
                         capture_output=True, text=True, env=_env(), timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert lines.index("<torch is imported here>") > 0, lines
    assert lines[0].startswith("tokendp: ") and "c.jsonl" in lines[0]


def test_ctrl_c_exits_130_with_a_hint_and_the_rerun_resumes(tmp_path):
    """A real SIGINT in the middle of a static-batch run: exit 130, no "Aborted!", no traceback;
    the documents finished so far are kept and the same command finishes the run. The child starts
    with Ctrl-C's default action, as a command typed at a terminal does, whatever the test run
    inherited (a shell's background job inherits SIGINT ignored, and Python then installs no
    handler): twice, in a whole suite started with ``make test &``, the run ignored the signal."""
    n = 60
    corpus = write_jsonl(tmp_path / "big.jsonl", documents(n))
    out = tmp_path / "o.jsonl"
    args = ["sanitize", str(corpus), "--model", model_dir(), "--beta", "0.05", "--max-new-tokens", "12",
            "--concurrency", "4", "--batching", "static", "--threads", "1", "--seed", "2", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "tokendp", *args], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    part = tmp_path / "o.jsonl.parts" / "part-00000.jsonl"
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and (not part.exists() or part.read_bytes().count(b"\n") < 2):
            assert time.monotonic() < deadline, "no document was written in time"
            time.sleep(0.02)
        assert proc.poll() is None, "the run finished before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_INTERRUPTED, stderr
    assert "interrupted; rerun the same command to resume" in stderr
    assert "Aborted!" not in stderr and "Traceback" not in stderr
    kept = part.read_bytes().count(b"\n")
    res = subprocess.run([sys.executable, "-m", "tokendp", *args], env=_env(), capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    assert f"{n - kept} documents written ({kept} already done)" in res.stderr
    assert [r["id"] for r in read_output(out)] == [d["id"] for d in documents(n)]


def test_a_finished_synthesize_run_rerun_is_complete_too(tmp_path, monkeypatch):
    """synthesize shares the runner and the store: the same command on the same references is complete."""
    from tokendp.engines import synthesize_corpus
    from tokendp.engines.worker import SynthesizeWorker

    from .corpora import references

    refs = write_jsonl(tmp_path / "refs.jsonl", references(4))
    params = {"epsilon": 4.0, "delta": 1e-5, "batch_size": 2, "max_tokens": 3, "seed": 7, "model": model_dir()}
    first = synthesize_corpus(refs, params, out=tmp_path / "s.jsonl", batch_size=2, progress=False)
    monkeypatch.setattr(SynthesizeWorker, "__init__", lambda *a, **k: pytest.fail("a finished run loaded the model"))
    again = synthesize_corpus(refs, params, out=tmp_path / "s.jsonl", batch_size=1, progress=False)
    assert again.complete and again.output == first.output and (again.summary.documents, again.summary.skipped) == (0, 2)


def test_a_synthesize_run_saves_each_text_as_it_is_done(tmp_path, monkeypatch):
    from tokendp.engines import synthesize_corpus

    from .corpora import references

    refs = write_jsonl(tmp_path / "refs.jsonl", references(8))
    params = {"epsilon": 4.0, "delta": 1e-5, "batch_size": 2, "max_tokens": 3, "seed": 7, "model": model_dir()}
    writes = interrupt_after(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        synthesize_corpus(refs, params, out=tmp_path / "s.jsonl", batch_size=4, progress=False)
    monkeypatch.undo()
    assert writes == [1]  # not the worker batch's 4 texts at once
    run = synthesize_corpus(refs, params, out=tmp_path / "s.jsonl", batch_size=4, progress=False)
    whole = synthesize_corpus(refs, params, batch_size=4, progress=False)
    assert (run.summary.documents, run.summary.skipped) == (3, 1)
    assert read_output(run.output) == [json.loads(line) for line in whole.lines]
