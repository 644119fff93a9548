"""The local engine: a run killed mid-way and rerun writes every document exactly once."""

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
from tokendp.errors import InvalidParameterError

from .corpora import assert_same_records, documents, interrupt_after, model_dir, read_output, write_jsonl

PARAMS = {"beta": 0.05, "max_new_tokens": 6, "temperature": 1.0}
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "docs.jsonl", documents(12))


def _params(seed=None):
    return {**PARAMS, "model": model_dir(), "seed": seed}


def test_interrupted_run_resumes_with_every_document_once(corpus_path, tmp_path, monkeypatch):
    out = tmp_path / "out.jsonl"
    interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        sanitize_corpus(corpus_path, _params(), out=out, batch_size=3, progress=False)
    monkeypatch.undo()
    first = [json.loads(x) for x in (tmp_path / "out.jsonl.parts" / "part-00000.jsonl").read_text().splitlines()]
    assert len(first) == 2 and not out.exists()  # each document is written as it finishes
    run = sanitize_corpus(corpus_path, _params(), out=out, batch_size=3, progress=False)
    assert run.output == out and (run.summary.documents, run.summary.skipped) == (10, 2)
    rows = read_output(out)
    assert [r["id"] for r in rows] == [d["id"] for d in documents(12)]
    assert all(rows[[r["id"] for r in rows].index(f["id"])] == f for f in first)  # kept, not redone
    again = sanitize_corpus(corpus_path, _params(), out=tmp_path / "dir", batch_size=5, progress=False)
    assert again.summary.documents == 12 and (tmp_path / "dir" / "_SUCCESS").exists()


def test_resumed_run_equals_an_uninterrupted_one(corpus_path, tmp_path, monkeypatch):
    """With a seed, what a document gets does not depend on the batches of the run it lands in."""
    whole = sanitize_corpus(corpus_path, _params(seed=3), out=tmp_path / "whole.jsonl", batch_size=4, progress=False)
    interrupt_after(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        sanitize_corpus(corpus_path, _params(seed=3), out=tmp_path / "resumed.jsonl", batch_size=5, progress=False)
    monkeypatch.undo()
    sanitize_corpus(corpus_path, _params(seed=3), out=tmp_path / "resumed.jsonl", batch_size=5, progress=False)
    assert_same_records(read_output(tmp_path / "resumed.jsonl"), read_output(whole.output))


def test_killed_process_resumes(tmp_path):
    """A real SIGKILL in the middle of a run (the records written so far are kept as they are)."""
    corpus = write_jsonl(tmp_path / "big.jsonl", documents(80))
    out = tmp_path / "out.jsonl"
    args = [str(corpus), "--model", model_dir(), "--beta", "0.05", "--max-new-tokens", "16", "--concurrency", "1",
            "--threads", "1", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "tokendp", "sanitize", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    part = tmp_path / "out.jsonl.parts" / "part-00000.jsonl"
    try:
        while proc.poll() is None and (not part.exists() or part.read_bytes().count(b"\n") < 3):
            time.sleep(0.02)
        assert proc.poll() is None, "the run finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    kept = part.read_bytes()
    res = CliRunner().invoke(main, ["sanitize", *args[:-4], "--max-new-tokens", "2", "--concurrency", "50",
                                    "--out", str(out)])
    assert res.exit_code == EXIT_BAD_INPUT and "other settings (max_new_tokens differ)" in res.output
    res = CliRunner().invoke(main, ["sanitize", *args[:-2], "--concurrency", "50", "--out", str(out)])
    assert res.exit_code == 0, res.output
    done = kept.count(b"\n")
    assert f"{80 - done} documents written ({done} already done)" in res.output
    ids = [r["id"] for r in read_output(out)]
    assert ids == [d["id"] for d in documents(80)]
    assert kept.decode().splitlines()[0] in out.read_text().splitlines()


def test_cli_corpus_to_stdout_and_bad_input(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", documents(3))
    res = CliRunner().invoke(main, ["sanitize", str(corpus), "--model", model_dir(), "--beta", "0.05",
                                    "--max-new-tokens", "3"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in res.stdout.splitlines()]
    assert [r["id"] for r in rows] == ["doc-000", "doc-001", "doc-002"]
    assert "3 documents written (0 already done)" in res.stderr and "tokens/s" in res.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "text": "Helen Marsh"}) + "\n" + json.dumps({"id": "a", "text": "Helen"}) + "\n")
    res = CliRunner().invoke(main, ["sanitize", str(bad), "--model", model_dir(), "--beta", "0.05"])
    assert res.exit_code == EXIT_BAD_INPUT and "line 2: duplicate id \"a\" (first at line 1)" in res.output and "Helen" not in res.output
    res = CliRunner().invoke(main, ["sanitize", str(corpus), "--model", model_dir(), "--beta", "0.05", "--workers", "2"])
    assert res.exit_code == 2 and "--workers applies to --engine ray" in res.output


def test_continuous_batching_writes_each_document_as_it_finishes_and_resumes(corpus_path, tmp_path, monkeypatch):
    """Continuous batching (issue 27): the same records as static batches, one write per document,
    and an interrupted run resumes (static or continuous) to the same output."""
    static = sanitize_corpus(corpus_path, _params(seed=3), out=tmp_path / "static.jsonl", batch_size=4, progress=False)
    writes = interrupt_after(monkeypatch, 5)
    with pytest.raises(KeyboardInterrupt):
        sanitize_corpus(corpus_path, _params(seed=3), out=tmp_path / "cont.jsonl", batch_size=4, progress=False,
                        batching="continuous")
    monkeypatch.undo()
    assert writes == [1] * 5  # each document written as it finishes, not with its batch
    run = sanitize_corpus(corpus_path, _params(seed=3), out=tmp_path / "cont.jsonl", batch_size=3, progress=False,
                          batching="continuous")
    assert (run.summary.documents, run.summary.skipped) == (7, 5)
    assert_same_records(read_output(tmp_path / "cont.jsonl"), read_output(static.output))


def test_auto_batching_is_static_on_a_cpu_and_ray_runs_static_batches(corpus_path, tmp_path, monkeypatch):
    import tokendp.engines.worker as worker

    def no_stream(*args, **kwargs):
        raise AssertionError("continuous batching on a CPU")

    monkeypatch.setattr(worker, "sanitize_stream", no_stream)
    writes = interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        sanitize_corpus(corpus_path, _params(), out=tmp_path / "auto.jsonl", batch_size=3, progress=False,
                        batching="auto")
    assert writes == [1, 1]  # static batches, each document written as it finishes
    with pytest.raises(InvalidParameterError, match="local engine"):
        sanitize_corpus(corpus_path, _params(), engine="ray", batching="continuous", progress=False)
    with pytest.raises(InvalidParameterError, match="batching"):
        sanitize_corpus(corpus_path, _params(), batching="dynamic", progress=False)


def test_cli_batching_option(tmp_path):
    corpus = write_jsonl(tmp_path / "c.jsonl", documents(5))
    args = ["sanitize", str(corpus), "--model", model_dir(), "--beta", "0.05", "--max-new-tokens", "5", "--seed", "1",
            "--concurrency", "2"]
    runs = [CliRunner().invoke(main, [*args, "--batching", b]) for b in ("continuous", "static")]
    assert all(r.exit_code == 0 for r in runs), runs[0].output
    assert runs[0].stdout == runs[1].stdout and len(runs[0].stdout.splitlines()) == 5
    bad = CliRunner().invoke(main, [*args, "--batching", "dynamic"])
    assert bad.exit_code != 0 and "dynamic" in bad.output


def test_continuous_error_names_the_chunk_not_its_text(tmp_path):
    docs = documents(6)
    docs[4] = {"id": "long", "text": "secret word " * 400, "spans": []}  # more passages than T = 6
    corpus = write_jsonl(tmp_path / "c.jsonl", docs)
    with pytest.raises(InvalidParameterError, match="ask for at least") as err:
        sanitize_corpus(corpus, _params(seed=1), out=tmp_path / "o.jsonl", batch_size=3, progress=False,
                        batching="continuous")
    message = str(err.value)
    assert '"doc-003", "long", "doc-005"' in message and "doc-000" not in message and "secret" not in message
