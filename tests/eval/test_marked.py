"""Hand-written evaluation sets: documents after '=== id ===' lines, gold spans marked {{LABEL|text}}."""

import pytest

from tokendp.errors import InvalidInputError
from tokendp.eval.marked import load_marked, parse_marked
from tokendp.text.spans import Span


def test_marks_become_offsets_into_the_unmarked_text():
    texts, gold = parse_marked("=== a ===\nDear {{PERSON|Mr F.A. O'Brien}}, call {{CODE|4417}}.\n"
                               "=== b ===\nNothing here.\n")
    assert texts == {"a": "Dear Mr F.A. O'Brien, call 4417.", "b": "Nothing here."}
    assert gold["a"] == [Span(5, 20, "PERSON", 1.0, "gold"), Span(27, 31, "CODE", 1.0, "gold")]
    assert [texts["a"][s.start:s.end] for s in gold["a"]] == ["Mr F.A. O'Brien", "4417"]
    assert gold["b"] == []


@pytest.mark.parametrize("source,problem", [
    ("no header at all", "header"),
    ("=== a ===\nx\n=== a ===\ny", "twice"),
    ("=== a ===\nDear {{PERSON Smith}}", "malformed"),
])
def test_bad_files_are_refused_without_their_text(source, problem):
    with pytest.raises(InvalidInputError, match=problem) as err:
        parse_marked(source)
    assert "Smith" not in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(InvalidInputError, match="no marked-up file"):
        load_marked(tmp_path / "none.txt")
