"""`tokendp tag`: JSON and JSONL round trips, terminal and HTML views, bad input (exit 2)."""

import json

import pytest
from click.testing import CliRunner

from tokendp.cli import main
from tokendp.cli._exit import EXIT_BAD_INPUT
from tokendp.text.spans import Span
from tokendp.text.taggers import get_tagger

TEXT = "Mr Smith lodged application no. 36110/97 on 30 May 1996 and paid GBP 5,000."


def _run(*args):
    return CliRunner().invoke(main, ["tag", *map(str, args)])


def test_text_file_gives_a_json_list_of_spans(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(TEXT, encoding="utf-8")
    result = _run(path, "--tagger", "patterns", "--json")
    assert result.exit_code == 0, result.output
    spans = [Span.from_dict(d) for d in json.loads(result.output)]
    assert spans == get_tagger("patterns").tag(TEXT)
    assert {"start", "end", "label", "score", "source"} <= set(json.loads(result.output)[0])


def test_jsonl_round_trip(tmp_path):
    docs = [{"id": "a", "text": TEXT}, {"id": 7, "text": "Call +44 20 7946 0958."}]
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in docs) + "\n\n", encoding="utf-8")
    result = _run(path, "--tagger", "patterns", "--json")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [line["id"] for line in lines] == ["a", "7"]
    tagger = get_tagger("patterns")
    for doc, line in zip(docs, lines):
        assert [Span.from_dict(d) for d in line["spans"]] == tagger.tag(doc["text"])


def test_readable_view_and_html_page(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(TEXT + " <b>&", encoding="utf-8")
    page = tmp_path / "out.html"
    result = _run(path, "--tagger", "patterns", "--html", page)
    assert result.exit_code == 0, result.output
    assert "36110/97[CODE]" in result.output and "DATE 1" in result.output
    html = page.read_text(encoding="utf-8")
    assert "<mark" in html and "36110/97" in html and "&lt;b&gt;&amp;" in html


@pytest.mark.parametrize("content,suffix,problem", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00", ".txt", "binary"),
    (b"Secret caf\xe9 text", ".txt", "not valid UTF-8"),
    (b"   \n\t ", ".txt", "empty"),
    (b'{"id": 1, "body": "Secret"}\n', ".jsonl", '"text"'),
    (b'{"id": 1, "text": "Secret"\n', ".jsonl", "not valid JSON"),
    (b'{"id": 1, "text": "  "}\n', ".jsonl", "empty"),
])
def test_bad_input_exits_3_without_echoing_text(tmp_path, content, suffix, problem):
    path = tmp_path / f"input{suffix}"
    path.write_bytes(content)
    result = _run(path, "--tagger", "patterns")
    assert result.exit_code == EXIT_BAD_INPUT
    assert problem in result.output
    assert "Secret" not in result.output and "caf" not in result.output


def test_missing_file_exits_3(tmp_path):
    result = _run(tmp_path / "nope.txt", "--tagger", "patterns")
    assert result.exit_code == EXIT_BAD_INPUT and "not found" in result.output
