"""RunStore: a run interrupted anywhere resumes with every document written exactly once."""

from __future__ import annotations

import json

import pytest

from tokendp.engines.corpus import scan_corpus
from tokendp.engines.store import OutputRecord, RunStore, diagnostics_path
from tokendp.errors import InvalidInputError

from .corpora import read_output, write_jsonl

RUN = {"job": "sanitize", "parameters": {"beta": 0.05, "seed": 0}}


@pytest.fixture
def corpus(tmp_path):
    return scan_corpus(write_jsonl(tmp_path / "c.jsonl", [{"id": f"d{i}", "text": "t"} for i in range(10)]))


def _records(ids, tag="first"):
    return [OutputRecord(i, json.dumps({"id": i, "text": f"{tag} {i}", "report": {}})) for i in ids]


def _assert_exactly_once(path, corpus):
    rows = read_output(path)
    assert [r["id"] for r in rows] == list(corpus.ids)
    return rows


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_interrupted_then_resumed(tmp_path, corpus, suffix):
    out = tmp_path / f"out{suffix}"
    with RunStore(out, corpus, RUN) as store:
        assert store.write(_records(["d3", "d0", "d1"])) == 3
        assert store.finish() is None and not out.exists()  # killed here: nothing final yet
    with RunStore(out, corpus, RUN) as store:
        assert store.done == {"d0", "d1", "d3"}
        # an engine may deliver a document again: dropped, the first record kept
        assert store.write(_records(["d1", "d2", "d2"], tag="again")) == 1
        assert store.write(_records([i for i in corpus.ids if i not in store.done], tag="second")) == 6
        assert store.finish() == out
    rows = _assert_exactly_once(out, corpus)
    assert rows[1]["text"] == "first d1" and rows[2]["text"] == "again d2"
    assert not (tmp_path / f"out{suffix}.parts").exists()


def test_a_torn_last_line_is_cut_and_redone(tmp_path, corpus):
    out = tmp_path / "out.jsonl"
    with RunStore(out, corpus, RUN) as store:
        store.write(_records(["d0", "d1"]))
    part = tmp_path / "out.jsonl.parts" / "part-00000.jsonl"
    whole = part.read_bytes()
    part.write_bytes(whole + _records(["d2"])[0].line.encode()[:17])  # killed inside a write
    with RunStore(out, corpus, RUN) as store:
        assert store.done == {"d0", "d1"} and part.read_bytes() == whole
        store.write(_records(corpus.ids[2:]))
        assert (tmp_path / "out.jsonl.parts" / "part-00001.jsonl").exists()  # a new log per session
        store.finish()
    _assert_exactly_once(out, corpus)


def test_garbage_after_a_crash_is_cut(tmp_path, corpus):
    out = tmp_path / "out"
    with RunStore(out, corpus, RUN) as store:
        store.write(_records(["d0"]))
    part = out / "part-00000.jsonl"
    part.write_bytes(part.read_bytes() + b"\0" * 40 + b"\n" + _records(["d1"])[0].line.encode() + b"\n")
    with RunStore(out, corpus, RUN) as store:
        assert store.done == {"d0"}  # everything from the first bad line on is redone


def test_crash_after_the_rename_before_the_cleanup(tmp_path, corpus):
    out = tmp_path / "out.jsonl"
    with RunStore(out, corpus, RUN) as store:
        store.write(_records(corpus.ids))
    work = tmp_path / "out.jsonl.parts"
    out.write_text("a stale or partial final file\n")
    with RunStore(out, corpus, RUN) as store:
        assert store.done == set(corpus.ids) and store.finish() == out
    _assert_exactly_once(out, corpus)
    assert not work.exists()


def test_a_finished_file_is_not_overwritten(tmp_path, corpus):
    out = tmp_path / "out.jsonl"
    out.write_text("{}\n")
    with pytest.raises(InvalidInputError, match="already exists"):
        RunStore(out, corpus, RUN).__enter__()


def test_directory_output_keeps_parts_and_marks_success(tmp_path, corpus):
    out = tmp_path / "out"
    with RunStore(out, corpus, RUN) as store:
        store.write(_records(corpus.ids[:4]))
        assert store.finish() is None and not (out / "_SUCCESS").exists()
    with RunStore(out, corpus, RUN) as store:
        store.write(_records(corpus.ids[4:]))
        assert store.finish() == out
    lines = [json.loads(x) for p in sorted(out.glob("part-*.jsonl")) for x in p.read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == sorted(corpus.ids) and (out / "_SUCCESS").exists()


def test_other_settings_corpora_and_concurrent_runs_are_refused(tmp_path, corpus):
    out = tmp_path / "out.jsonl"
    with RunStore(out, corpus, RUN) as store:
        store.write(_records(["d0"]))
        with pytest.raises(InvalidInputError, match="another run is writing"):
            RunStore(out, corpus, RUN).__enter__()
    other = {"job": "sanitize", "parameters": {"beta": 0.1, "seed": 0}}
    with pytest.raises(InvalidInputError, match=r"other settings \(beta differ\)"):
        RunStore(out, corpus, other).__enter__()
    smaller = scan_corpus(write_jsonl(tmp_path / "s.jsonl", [{"id": "d9", "text": "t"}]))
    with pytest.raises(InvalidInputError, match="holds id \"d0\", which is not an output of this run"):
        RunStore(out, smaller, RUN).__enter__()
    with RunStore(out, corpus, RUN) as store, pytest.raises(InvalidInputError, match="not an output of this run"):
        store.write(_records(["zzz"]))
    planned = {**RUN, "inputs": {"references": 10}}
    with pytest.raises(InvalidInputError, match="not the input the run in .* began with"):
        RunStore(out, corpus, planned).__enter__()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("x")
    with pytest.raises(InvalidInputError, match="not empty and holds no tokendp run"):
        RunStore(tmp_path / "busy", corpus, RUN).__enter__()


@pytest.mark.parametrize("name", ["out.jsonl", "out.parquet", "outdir"])
def test_diagnostics_are_written_beside_the_output_across_sessions(tmp_path, corpus, name):
    """Never inside the output (a directory output too), appended by a resumed session; a fresh
    run refuses a diagnostics file it did not start, so no two runs' diagnostics mix."""
    out = tmp_path / name
    beside = diagnostics_path(out)
    assert beside == tmp_path / ("outdir.diagnostics.jsonl" if name == "outdir" else "out.diagnostics.jsonl")

    def records(ids):
        return [OutputRecord(r.id, r.line, json.dumps({"id": r.id, "diagnostics": {"mean_lambda": {}}}))
                for r in _records(ids)]

    with RunStore(out, corpus, RUN) as store:
        store.write(records(["d0", "d1"]))
    with RunStore(out, corpus, RUN) as store:
        store.write(records(corpus.ids[2:]))
        final = store.finish()
    assert [json.loads(line)["id"] for line in beside.read_text().splitlines()] == list(corpus.ids)
    files = sorted(final.glob("part-*.jsonl")) if final.is_dir() else [final]
    rows = [r for f in files for r in read_output(f)]
    assert len(rows) == len(corpus.ids) and all("diagnostics" not in r and "diagnostics" not in r["report"] for r in rows)
    assert final.is_file() or not list(final.glob("*diagnostics*"))
    other = tmp_path / ("again.jsonl" if name != "outdir" else "againdir")
    diagnostics_path(other).write_text("{}\n")
    with pytest.raises(InvalidInputError, match="delete it or choose another --out"):
        with RunStore(other, corpus, RUN):
            pass
