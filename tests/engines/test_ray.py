"""The Ray engine on a local Ray instance (CPU, loopback): the same records as the local engine,
and an interrupted run resumed with every document (or synthetic text) exactly once.

One Ray instance serves the module; each run still starts its own actor pool (a model load per
actor), which is most of these tests' time.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tokendp.cli import main
from tokendp.cli._exit import EXIT_BAD_INPUT
from tokendp.engines import sanitize_corpus, synthesize_corpus

from .corpora import (assert_disjoint_batches, assert_same_records, documents, interrupt_after, model_dir, read_output,
                      references, write_jsonl, write_parquet)

ray = pytest.importorskip("ray")

N = 40
ARGS = ["--epsilon", "8", "--max-new-tokens", "6", "--seed", "0"]
PARAMS = {"epsilon": 8.0, "max_new_tokens": 6, "seed": 0}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    d = tmp_path_factory.mktemp("ray")
    return write_jsonl(d / "docs.jsonl", documents(N)), write_parquet(d / "docs.parquet", documents(N))


@pytest.fixture(scope="module")
def reference(corpora, tmp_path_factory):
    """The local engine's records, in batches of 8."""
    out = tmp_path_factory.mktemp("local") / "local.jsonl"
    res = CliRunner().invoke(main, ["sanitize", str(corpora[0]), "--model", model_dir(), *ARGS,
                                    "--engine", "local", "--concurrency", "8", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return read_output(out)


def test_ray_gives_the_local_records(local_ray, corpora, reference, tmp_path):
    """... with --diagnostics too: they come back from the actors apart from the records, which
    equal the local engine's run without them."""
    out = tmp_path / "ray.jsonl"
    res = CliRunner().invoke(main, ["sanitize", str(corpora[0]), "--model", model_dir(), *ARGS, "--diagnostics",
                                    "--engine", "ray", "--workers", "2", "--concurrency", "4", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"{N} documents written (0 already done)" in res.stderr and "worker " in res.stderr
    rows = read_output(out)
    assert [r["id"] for r in rows] == [d["id"] for d in documents(N)]
    assert_same_records(rows, reference)
    diagnostics = read_output(tmp_path / "ray.diagnostics.jsonl")
    assert sorted(d["id"] for d in diagnostics) == sorted(d["id"] for d in documents(N))


def test_interrupted_ray_run_resumes(local_ray, corpora, reference, tmp_path, monkeypatch):
    out = tmp_path / "ray.parquet"
    params = {**PARAMS, "model": model_dir()}
    calls = interrupt_after(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        sanitize_corpus(corpora[1], params, out=out, engine="ray", workers=2, batch_size=4, progress=False)
    monkeypatch.undo()
    assert not out.exists() and sum(calls) >= 3
    run = sanitize_corpus(corpora[1], params, out=out, engine="ray", workers=2, batch_size=4, progress=False)
    assert (run.summary.skipped, run.summary.documents) == (sum(calls), N - sum(calls))
    assert_same_records(read_output(out), reference)


def test_synthesize_resumed_on_two_ray_workers_gives_the_local_texts(local_ray, tmp_path, monkeypatch):
    """The driver fixes the batches of references: a run interrupted on the local engine and resumed
    on two Ray workers writes every text once, the texts of an uninterrupted local run, and each
    reference in one text's batch only."""
    refs = references(24)
    path = write_jsonl(tmp_path / "refs.jsonl", refs)
    args = ["--epsilon", "4", "--delta", "1e-5", "--references-per-text", "2", "--max-new-tokens", "6", "--seed", "1"]
    params = {"epsilon": 4.0, "delta": 1e-5, "batch_size": 2, "max_tokens": 6, "seed": 1, "model": model_dir()}
    whole = [json.loads(line) for line in synthesize_corpus(path, params, batch_size=4, progress=False).lines]
    out = tmp_path / "texts.jsonl"
    interrupt_after(monkeypatch, 3)  # three texts written, each as it was done
    with pytest.raises(KeyboardInterrupt):
        synthesize_corpus(path, params, out=out, batch_size=3, progress=False)
    monkeypatch.undo()
    res = CliRunner().invoke(main, ["synthesize", str(path), "--model", model_dir(), *args, "--engine", "ray",
                                    "--workers", "2", "--concurrency", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "9 texts written (3 already done)" in res.stderr and f"wrote {out}" in res.stderr
    rows = read_output(out)
    assert rows == whole
    assert_disjoint_batches(rows, refs, 2)


def test_a_worker_error_ends_the_run_with_its_message(local_ray, corpora, tmp_path):
    """A document too long for the model's context fails in an actor: exit 3 (bad input), the batch's ids,
    no text and no remote traceback; nothing is written for that batch."""
    out = tmp_path / "out.jsonl"
    res = CliRunner().invoke(main, ["sanitize", str(corpora[0]), "--model", model_dir(), "--beta", "0.1",
                                    "--max-new-tokens", "500", "--engine", "ray", "--workers", "1", "--out", str(out)])
    assert res.exit_code == EXIT_BAD_INPUT, res.output
    # Ray's own log lines (the actor's shutdown) may arrive after the error line: look for it.
    errors = [line for line in res.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and errors[0].startswith("Error: documents \"doc-") and "context" in errors[0]
    assert "Traceback" not in res.output and "Dear" not in res.output and "Helen" not in res.output


def test_ids_are_required(local_ray, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"text": "Helen Marsh"}) + "\n")
    res = CliRunner().invoke(main, ["sanitize", str(path), "--engine", "ray", "--beta", "0.1"])
    assert res.exit_code == EXIT_BAD_INPUT and "line 1: no \"id\"" in res.output and "Helen" not in res.output
