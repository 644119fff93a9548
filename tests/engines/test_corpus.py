"""scan_corpus: every bad record is reported with its line or row number, never its text."""

from __future__ import annotations

import json

import pytest

from .corpora import write_jsonl, write_parquet
from tokendp.engines.corpus import scan_corpus
from tokendp.errors import InvalidInputError

SECRET = "Tomas Lindqvist was admitted on 2 June"


def _jsonl(tmp_path, lines):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_ids_in_input_order_and_defaults(tmp_path):
    path = _jsonl(tmp_path, [json.dumps({"text": "a"}), "", json.dumps({"text": "b", "id": None})])
    assert scan_corpus(path).ids == (1, 3)  # line numbers, blank lines skipped
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "z", "text": "a"}, {"id": "y", "text": "b"}])
    corpus = scan_corpus(path, require_ids=True)
    assert corpus.ids == ("z", "y") and [r.id for r in corpus.records()] == ["z", "y"]


@pytest.mark.parametrize("lines, message", [
    ([json.dumps({"id": "a", "text": SECRET}), '{"id": "b", "text": "' + SECRET], "line 2: not valid JSON"),
    ([json.dumps({"id": "a", "text": SECRET}), json.dumps({"id": "b", "body": SECRET})],
     "line 2: \"text\" is missing or not a string"),
    ([json.dumps({"id": "a", "text": 7})], "line 1: \"text\" is missing"),
    ([json.dumps({"id": "a", "text": SECRET}), json.dumps({"id": "b", "text": SECRET}),
      json.dumps({"id": "a", "text": SECRET})], "line 3: duplicate id \"a\" (first at line 1)"),
    ([json.dumps({"id": 1, "text": SECRET}), json.dumps({"id": "2", "text": SECRET})], "line 2: id \"2\" is not of the type"),
    ([json.dumps({"id": [1], "text": SECRET})], "line 1: \"id\" must be a string or an integer"),
    ([json.dumps([SECRET])], "line 1: expected an object"),
    ([json.dumps({"id": "a", "text": SECRET, "spans": [{"start": 0, "end": 99, "label": "PERSON"}]})],
     "line 1: span #0 ends at 99"),
    ([json.dumps({"id": "a", "text": SECRET, "spans": [{"start": 0, "label": "PERSON"}]})], "line 1: span #0 is malformed"),
])
def test_bad_jsonl_records(tmp_path, lines, message):
    with pytest.raises(InvalidInputError) as err:
        scan_corpus(_jsonl(tmp_path, lines))
    assert message in str(err.value) and "Tomas" not in str(err.value) and "June" not in str(err.value)


def test_the_ray_engine_needs_ids(tmp_path):
    path = _jsonl(tmp_path, [json.dumps({"id": "a", "text": SECRET}), json.dumps({"text": SECRET})])
    with pytest.raises(InvalidInputError, match="line 2: no \"id\"; the ray engine needs an id"):
        scan_corpus(path, require_ids=True)


def test_files_that_are_not_corpora(tmp_path):
    (tmp_path / "c.txt").write_text(SECRET)
    with pytest.raises(InvalidInputError, match="a .jsonl or .parquet file"):
        scan_corpus(tmp_path / "c.txt")
    with pytest.raises(InvalidInputError, match="no such file"):
        scan_corpus(tmp_path / "missing.jsonl")
    with pytest.raises(InvalidInputError, match="holds no documents"):
        scan_corpus(_jsonl(tmp_path, [""]))
    (tmp_path / "bad.parquet").write_text(SECRET)
    with pytest.raises(InvalidInputError, match="not a Parquet file") as err:
        scan_corpus(tmp_path / "bad.parquet")
    assert "Tomas" not in str(err.value)


def test_parquet_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = [{"id": "a", "text": SECRET, "spans": [{"start": 0, "end": 5, "label": "PERSON"}]}, {"id": "b", "text": "x"}]
    corpus = scan_corpus(write_parquet(tmp_path / "c.parquet", good))
    assert corpus.ids == ("a", "b")
    records = list(corpus.records())
    assert json.loads(records[0].spans) == good[0]["spans"] and records[1].spans is None
    # spans as a list of structs, the optional score absent in one
    structs = [{"id": 1, "text": SECRET, "spans": [{"start": 0, "end": 5, "label": "PERSON", "score": None}]},
               {"id": 2, "text": SECRET, "spans": [{"start": 0, "end": 5, "label": "PERSON", "score": 0.5}]}]
    pq.write_table(pa.Table.from_pylist(structs), tmp_path / "s.parquet")
    assert [json.loads(r.spans)[0].get("score") for r in scan_corpus(tmp_path / "s.parquet").records()] == [None, 0.5]
    pq.write_table(pa.table({"id": ["a", "b", "a"], "text": [SECRET] * 3}), tmp_path / "dup.parquet")
    with pytest.raises(InvalidInputError, match="row 3: duplicate id \"a\" \\(first at row 1\\)"):
        scan_corpus(tmp_path / "dup.parquet")
    pq.write_table(pa.table({"id": ["a"], "body": [SECRET]}), tmp_path / "nocol.parquet")
    with pytest.raises(InvalidInputError, match="no \"text\" column"):
        scan_corpus(tmp_path / "nocol.parquet")
    pq.write_table(pa.table({"id": ["a", "b"], "text": [SECRET, None]}), tmp_path / "null.parquet")
    with pytest.raises(InvalidInputError, match="row 2: \"text\" is missing"):
        scan_corpus(tmp_path / "null.parquet")


def test_ray_parsers_read_what_the_scan_read(tmp_path):
    """The Ray engine's parsers give the records the scan checked: lines end at "\\n" only, so a
    raw U+2028 or U+0085 inside a text stays inside it (str.splitlines would cut there)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tokendp.engines.arrow import parse_jsonl_files, parse_rows, record_schema

    docs = [{"id": "a", "text": "one\u2028two\x85three", "spans": [{"start": 0, "end": 3, "label": "PERSON"}]},
            {"id": "b", "text": "four"}]
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"".join(json.dumps(d, ensure_ascii=False).encode() + b"\r\n" for d in docs) + b"  \n")
    corpus = scan_corpus(path, require_ids=True)
    expected = [r.to_row() for r in corpus.records()]
    assert [r["text"] for r in expected] == [d["text"] for d in docs]
    kwargs = {"done": frozenset({"b"}), "schema": record_schema(corpus)}
    assert parse_jsonl_files(pa.table({"bytes": [path.read_bytes()]}), **kwargs).to_pylist() == expected[:1]
    table = pq.read_table(write_parquet(tmp_path / "c.parquet", docs))
    assert parse_rows(table, done=frozenset(), schema=record_schema(corpus)).to_pylist() == expected
