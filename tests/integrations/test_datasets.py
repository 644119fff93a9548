"""tokendp.sanitize_dataset (docs/integrations.md, "Hugging Face datasets"): a datasets.Dataset in,
the same rows with rewrite and report columns out, resumable as corpus runs are; the docs' example
runs as written against the real datasets."""

from __future__ import annotations

import json

import pytest

datasets = pytest.importorskip("datasets", reason="the datasets extra is not installed")

import tokendp  # noqa: E402
from tests.engines.corpora import documents, interrupt_after, model_dir  # noqa: E402
from tests.integrations.examples import run  # noqa: E402
from tokendp.errors import InvalidInputError, InvalidParameterError  # noqa: E402
from tokendp.integrations.datasets import sanitize_dataset  # noqa: E402

PARAMS = {"beta": 0.05, "max_new_tokens": 6, "temperature": 1.0, "progress": False}


def _dataset(n: int = 6) -> datasets.Dataset:
    docs = documents(n)
    return datasets.Dataset.from_dict({"id": [d["id"] for d in docs], "text": [d["text"] for d in docs],
                                       "spans": [d.get("spans") for d in docs], "ward": list(range(n))})


def test_the_docs_example_adds_rewrite_and_report_columns(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = run("Hugging Face datasets", 0)["out"]
    assert out.column_names == ["id", "text", "spans", "rewrite", "report"]
    reports = [json.loads(r) for r in out["report"]]
    assert [r["spans_source"] for r in reports] == ["given", "tagger auto 0.1.0"]
    assert {g["label"] for g in reports[0]["groups"]} == {"PERSON"} and reports[0]["groups"][0]["epsilon"] == 8
    assert (tmp_path / "letters.sanitized.parquet").is_file()
    assert tokendp.sanitize_dataset is sanitize_dataset


def test_an_interrupted_run_resumes_to_the_records_of_an_uninterrupted_one(tmp_path, monkeypatch):
    ds, params = _dataset(), {**PARAMS, "model": model_dir(), "seed": 5}
    whole = sanitize_dataset(ds, out=tmp_path / "whole.jsonl", **params)
    interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        sanitize_dataset(ds, out=tmp_path / "resumed.parquet", batch_size=3, **params)
    monkeypatch.undo()
    resumed = sanitize_dataset(ds, out=tmp_path / "resumed.parquet", batch_size=3, **params)
    assert resumed["rewrite"] == whole["rewrite"] and resumed["report"] == whole["report"]
    assert resumed["ward"] == list(range(6))  # the other columns, as they were
    import tokendp.engines.worker as worker

    monkeypatch.setattr(worker, "load_backend", lambda *a, **k: pytest.fail("the model loaded"))
    again = sanitize_dataset(ds, out=tmp_path / "resumed.parquet", **params)
    assert again["rewrite"] == whole["rewrite"]  # a finished run called again: read back, nothing loads


def test_without_ids_or_spans_columns_rows_are_numbered_and_tagged():
    ds = datasets.Dataset.from_dict({"body": ["Mr Smith lives in Paris.", "Dr Amir Patel saw him."]})
    out = sanitize_dataset(ds, text_column="body", rewrite_column="safe", report_column="cert",
                           **{**PARAMS, "model": model_dir(), "seed": 0})
    assert out.column_names == ["body", "safe", "cert"]
    assert all(json.loads(c)["spans_source"].startswith("tagger") for c in out["cert"])


@pytest.mark.parametrize("make,kwargs,error,words", [
    (lambda: datasets.DatasetDict({"train": _dataset(2)}), {}, InvalidInputError, "pass dataset['train']"),
    (lambda: _dataset(2).to_iterable_dataset(), {}, InvalidInputError, "got IterableDataset"),
    (lambda: ["Mr Smith"], {}, InvalidInputError, "got list"),
    (lambda: _dataset(2), {"text_column": "body"}, InvalidInputError, "no column 'body'"),
    (lambda: _dataset(2), {"rewrite_column": "ward"}, InvalidParameterError, "ward is taken"),
    (lambda: _dataset(2), {"out": "out.csv"}, InvalidParameterError, ".jsonl or .parquet"),
    (lambda: _dataset(2), {"epsilonn": 8}, InvalidParameterError, "unknown parameter(s) epsilonn"),
    (lambda: _dataset(2), {"diagnostics": True}, InvalidParameterError, "diagnostics"),
    (lambda: _dataset(2), {"batching": "eager"}, InvalidParameterError, "batching"),
    (lambda: datasets.Dataset.from_dict({"id": ["a", "a"], "text": ["x", "y"]}), {}, InvalidInputError,
     "the dataset, row 2: duplicate id \"a\" (first at row 1)"),
    (lambda: datasets.Dataset.from_dict({"text": ["Mr Smith", None]}), {}, InvalidInputError,
     "row 2: \"text\" is missing or not a string"),
    (lambda: datasets.Dataset.from_dict({"text": ["Mr Smith"], "spans": [[{"start": 3, "end": 90, "label": "PERSON"}]]}),
     {}, InvalidInputError, "row 1: span #0 ends at 90"),
])
def test_bad_input_gives_tokendps_errors_before_the_model_loads(monkeypatch, tmp_path, make, kwargs, error, words):
    import tokendp.engines.worker as worker

    monkeypatch.setattr(worker, "load_backend", lambda *a, **k: pytest.fail("the model loaded"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error) as info:
        sanitize_dataset(make(), **{"epsilon": 8, "progress": False, **kwargs})
    assert words in str(info.value) and "Smith" not in str(info.value)
