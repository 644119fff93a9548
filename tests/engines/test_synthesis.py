"""synthesize on the local engine: the partition fixed on the driver (disjoint, from the ids only),
whole batches per worker batch, the texts of tokendp.synthesize, and a resumed run that writes
every text exactly once and refuses references that changed."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tokendp.backends import HFBackend
from tokendp.cli import main
from tokendp.cli._exit import EXIT_BAD_INPUT
from tokendp.engines import plan_batches, synthesize_corpus
from tokendp.errors import InvalidInputError
from tokendp.jobs.synthesize import synthesize

from .corpora import (assert_disjoint_batches, interrupt_after, model_dir, read_output, references, write_jsonl,
                      write_parquet)

N, B = 13, 2  # six texts; the last reference is not read
PARAMS = {"epsilon": 4.0, "delta": 1e-5, "batch_size": B, "max_tokens": 5, "seed": 7}


@pytest.fixture(scope="module")
def refs_path(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("refs") / "refs.jsonl", references(N))


@pytest.fixture(scope="module")
def whole(refs_path):
    """An uninterrupted local run, in memory."""
    run = synthesize_corpus(refs_path, _params(), batch_size=4, progress=False)
    return [json.loads(line) for line in run.lines]


def _params(**change):
    return {**PARAMS, "model": model_dir(), **change}


def _interrupted_run(path, out, monkeypatch):
    """A run into ``out`` killed after its first two texts (each written as it is done)."""
    interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        synthesize_corpus(path, _params(), out=out, batch_size=2, progress=False)
    monkeypatch.undo()


def test_the_partition_is_disjoint_and_planned_from_the_ids_only(tmp_path):
    for n, b, num in [(13, 2, None), (13, 3, 2), (7, 7, None), (40, 4, 9)]:
        refs = references(n)
        plan = plan_batches(write_jsonl(tmp_path / f"r{n}.jsonl", refs), batch_size=b, num=num)
        flat = [ref for batch in plan.batches for ref in batch]
        assert len(flat) == len(set(flat)) and all(len(batch) == b for batch in plan.batches)
        assert flat == [r["id"] for r in refs[:len(flat)]] and len(plan.batches) == (num or n // b)
    others = [{**r, "text": r["text"].upper()} for r in references(N)]  # other texts, the same ids
    a = plan_batches(write_jsonl(tmp_path / "a.jsonl", references(N)), batch_size=B)
    b_ = plan_batches(write_parquet(tmp_path / "b.parquet", others), batch_size=B)
    assert (a.batches, a.inputs()) == (b_.batches, b_.inputs())
    swapped = references(N)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    assert plan_batches(write_jsonl(tmp_path / "s.jsonl", swapped), batch_size=B).inputs() != a.inputs()


def test_records_are_the_texts_of_tokendp_synthesize_with_their_certificate(refs_path, whole):
    direct = synthesize([r["text"] for r in references(N)], model=model_dir(), **PARAMS)
    assert [r["id"] for r in whole] == list(range(N // B))
    assert [r["text"] for r in whole] == [t.text for t in direct]
    for r, t in zip(whole, direct):
        expected = {k: v for k, v in t.to_dict().items() if k != "text"}
        assert r["report"] == {**expected, "references": r["report"]["references"]}
        assert {"clip", "rho", "epsilon", "delta"} <= r["report"].keys() and r["report"]["epsilon"] <= 4.0
    assert_disjoint_batches(whole, references(N), B)


def test_each_reference_reaches_one_row_of_one_worker_batch(refs_path, monkeypatch):
    """Across the worker batches of a run, every reference is shown by exactly one private row
    (the thirteenth by none); each worker batch holds whole batches of B."""
    seen = []
    real = HFBackend.prefill

    def prefill(self, sequences, **kwargs):
        seen.append([[self.tokenizer.decode(list(row.ids)) for row in seq.rows] for seq in sequences])
        return real(self, sequences, **kwargs)

    monkeypatch.setattr(HFBackend, "prefill", prefill)
    synthesize_corpus(refs_path, _params(), batch_size=4, progress=False)
    assert [len(call) for call in seen] == [4, 2] and all(len(rows) == 1 + B for call in seen for rows in call)
    rows = [row for call in seen for seq in call for row in seq]
    texts = [r["text"] for r in references(N)]
    assert [sum(t in row for row in rows) for t in texts] == [1] * (N - 1) + [0]


def test_interrupted_run_resumes_with_every_text_once(refs_path, whole, tmp_path, monkeypatch):
    out = tmp_path / "out.jsonl"
    _interrupted_run(refs_path, out, monkeypatch)
    first = (tmp_path / "out.jsonl.parts" / "part-00000.jsonl").read_text().splitlines()
    assert len(first) == 2 and not out.exists()
    run = synthesize_corpus(refs_path, _params(), out=out, batch_size=3, progress=False)
    assert run.output == out and (run.summary.documents, run.summary.skipped) == (4, 2)
    assert "4 texts written (2 already done)" in run.summary.format()
    rows = read_output(out)
    assert rows == whole and rows[:2] == [json.loads(line) for line in first]  # kept, not redone
    assert_disjoint_batches(rows, references(N), B)
    again = synthesize_corpus(refs_path, _params(), out=tmp_path / "dir", batch_size=6, progress=False)
    assert again.summary.documents == N // B and (tmp_path / "dir" / "_SUCCESS").exists()


@pytest.mark.parametrize("change", ["swap", "insert", "append", "drop"])
def test_changed_references_on_resume_are_refused(change, tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "refs.jsonl", references(N))
    out = tmp_path / "out.jsonl"
    _interrupted_run(path, out, monkeypatch)
    refs = references(N)
    if change == "swap":  # a reference of a written text's batch moves into a pending one
        refs[0], refs[5] = refs[5], refs[0]
    elif change == "insert":
        refs.insert(1, {"id": "new", "text": "Helen Marsh"})
    elif change == "append":
        refs.append({"id": "new", "text": "Helen Marsh"})
    else:
        refs.pop()  # even the unread last reference: the ids must be those the run began with
    write_jsonl(path, refs)
    with pytest.raises(InvalidInputError, match="not the input the run in .* began with") as err:
        synthesize_corpus(path, _params(), out=out, batch_size=2, progress=False)
    assert "Helen" not in str(err.value) and "Dear" not in str(err.value)
    assert len((tmp_path / "out.jsonl.parts" / "part-00000.jsonl").read_text().splitlines()) == 2  # kept as it was


def test_other_settings_on_resume_are_refused_and_placement_is_not_a_setting(refs_path, tmp_path, monkeypatch):
    out = tmp_path / "out.jsonl"
    _interrupted_run(refs_path, out, monkeypatch)
    with pytest.raises(InvalidInputError, match=r"other settings \(num differ\)"):
        synthesize_corpus(refs_path, _params(), num=5, out=out, progress=False)
    with pytest.raises(InvalidInputError, match=r"other settings \(epsilon differ\)"):
        synthesize_corpus(refs_path, _params(epsilon=2.0), out=out, progress=False)
    run = synthesize_corpus(refs_path, _params(device="cpu"), out=out, batch_size=5, progress=False)
    assert run.output == out and run.summary.skipped == 2


def test_cli_engine_local_gives_the_texts_of_the_single_process_command(refs_path, tmp_path):
    args = ["synthesize", str(refs_path), "--model", model_dir(), "--epsilon", "4", "--delta", "1e-5",
            "--references-per-text", str(B), "--max-new-tokens", "5", "--seed", "7"]
    plain = CliRunner().invoke(main, [*args, "--json"])
    assert plain.exit_code == 0, plain.output
    res = CliRunner().invoke(main, [*args, "--engine", "local", "--concurrency", "4"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["text"] for r in rows] == [json.loads(line)["text"] for line in plain.stdout.splitlines()]
    assert "6 texts written (0 already done)" in res.stderr and "tokens/s" in res.stderr
    out = tmp_path / "texts.parquet"
    res = CliRunner().invoke(main, [*args, "--engine", "local", "--out", str(out)])
    assert res.exit_code == 0 and f"wrote {out}" in res.stderr
    assert [r["text"] for r in read_output(out)] == [r["text"] for r in rows]


@pytest.mark.parametrize(("args", "message"), [
    (["--workers", "2"], "apply with --engine"),
    (["--engine", "local", "--address", "auto"], "--address applies to --engine ray"),
    (["--engine", "local", "--num", "7"], "at most 6"),
    (["--engine", "local", "--delta", "2"], "delta"),
])
def test_cli_errors_exit_2(refs_path, args, message):
    base = ["synthesize", str(refs_path), "--model", model_dir(), "--epsilon", "1", "--delta", "1e-5",
            "--references-per-text", str(B), "--max-new-tokens", "2"]
    res = CliRunner().invoke(main, [*base, *args])
    assert res.exit_code == 2 and message in res.output, res.output


def test_bad_references_fail_with_their_place_and_never_their_text(tmp_path):
    refs = write_jsonl(tmp_path / "x.jsonl", [{"id": "a", "text": "a reference"}])
    both = CliRunner().invoke(main, ["synthesize", str(refs), "--references", str(refs),
                                     "--epsilon", "1", "--delta", "1e-5", "--references-per-text", "1", "--max-new-tokens", "2"])
    assert both.exit_code == 2
    empty = write_jsonl(tmp_path / "e.jsonl", [{"id": "a", "text": "Helen Marsh"}, {"id": "b", "text": "  "}])
    with pytest.raises(InvalidInputError, match="reference \"b\" is empty"):
        synthesize_corpus(empty, _params(batch_size=1), progress=False)
    dup = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "text": "Helen Marsh"}, {"id": "a", "text": "Helen"}])
    res = CliRunner().invoke(main, ["synthesize", str(dup), "--engine", "local", "--model", model_dir(),
                                    "--epsilon", "1", "--delta", "1e-5", "--references-per-text", "1", "--max-new-tokens", "2"])
    assert res.exit_code == EXIT_BAD_INPUT and "line 2: duplicate id \"a\"" in res.output and "Helen" not in res.output
