"""Corpora for the engine tests: documents built from tinylm's sentences, with and without spans,
and references for synthesize."""

from __future__ import annotations

import json
from pathlib import Path

import tinylm

OPTIONS = '{"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>"}'
LABELS = ("PERSON", "DATETIME", "LOC")


def documents(n: int) -> list[dict]:
    """``n`` records {id, text, spans?}: 1 to 3 spans in 1 to 3 groups; every fifth left to the tagger."""
    docs = []
    for i in range(n):
        text = " ".join(tinylm.CORPUS[(i + k) % len(tinylm.CORPUS)] for k in range(1 + i % 2))
        rec = {"id": f"doc-{i:03d}", "text": text}
        if i % 5 != 4:
            words = [(j, j + 4) for j in range(0, min(len(text), 48) - 4, 12)]
            rec["spans"] = [{"start": s, "end": e, "label": LABELS[k % (1 + i % 3)]}
                            for k, (s, e) in enumerate(words[: 1 + i % 3])]
        docs.append(rec)
    return docs


def references(n: int) -> list[dict]:
    """``n`` reference records {id, text} for synthesize, every text distinct."""
    return [{"id": f"ref-{i:02d}", "text": f"{tinylm.CORPUS[i % len(tinylm.CORPUS)]} Case {i}."} for i in range(n)]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_parquet(path: Path, records: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"id": r["id"], "text": r["text"], "spans": json.dumps(r["spans"]) if "spans" in r else None}
            for r in records]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def read_output(path: Path) -> list[dict]:
    """The records of a finished --out file (JSONL or Parquet; a Parquet report is JSON text)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return [{**r, "report": json.loads(r["report"])} for r in pq.read_table(path).to_pylist()]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def model_dir() -> str:
    return str(tinylm.model_dir(OPTIONS))


def assert_same_records(rows: list[dict], reference: list[dict]) -> None:
    """The same ids, texts and reports (which hold no diagnostics: nothing data-dependent that
    the batch's padding could move)."""
    assert [r["id"] for r in rows] == [r["id"] for r in reference]
    assert [r["text"] for r in rows] == [r["text"] for r in reference]
    assert [r["report"] for r in rows] == [r["report"] for r in reference]
    assert all("diagnostics" not in r["report"] for r in rows)


def assert_disjoint_batches(rows: list[dict], refs: list[dict], batch_size: int) -> None:
    """Text j read references jB .. jB + B - 1 of the input, so no reference reached two texts."""
    read = [ref for r in rows for ref in r["report"]["references"]]
    assert len(read) == len(set(read))
    ids = [r["id"] for r in refs]
    assert [r["report"]["references"] for r in rows] == [ids[j * batch_size:(j + 1) * batch_size]
                                                         for j in range(len(rows))]


def interrupt_after(monkeypatch, batches: int) -> list[int]:
    """Make the store's writer die (like a kill) after ``batches`` batches were written; returns
    the sizes of the batches written."""
    from tokendp.engines.store import RunStore

    inner, calls = RunStore.write, []

    def write(self, records):
        if len(calls) == batches:
            raise KeyboardInterrupt
        calls.append(len(records))
        return inner(self, records)

    monkeypatch.setattr(RunStore, "write", write)
    return calls
