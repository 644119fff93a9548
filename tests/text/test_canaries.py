"""Canaries: distinct seeded secrets, spaced digits, insertion as records, file round trip."""

from __future__ import annotations

import pytest

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.canaries import CanaryFormat, insert_canaries, make_canaries, read_canaries, write_canaries


def test_canaries_are_distinct_seeded_and_inserted_as_records(tmp_path):
    fmt = CanaryFormat()
    canaries = make_canaries(5, repeats=3, seed=7)
    assert canaries == make_canaries(5, repeats=3, seed=7)
    assert len({c.secret for c in canaries}) == 5 and all(len(c.secret) == 6 for c in canaries)
    corpus = insert_canaries(["a", "b", "c"], canaries, seed=1)
    assert len(corpus) == 3 + 15 and [t for t in corpus if t in "abc"] == ["a", "b", "c"]
    assert corpus.count(fmt.text(canaries[0].secret)) == 3
    assert fmt.text("123456") == "the secret number is 1 2 3 4 5 6"
    path = write_canaries(tmp_path / "c.json", canaries, fmt)
    assert read_canaries(path) == (fmt, canaries)


def test_bad_canaries(tmp_path):
    with pytest.raises(InvalidParameterError):
        make_canaries(0, repeats=1, seed=0)
    with pytest.raises(InvalidParameterError):
        CanaryFormat(digits=0)
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(InvalidInputError, match="not a tokendp canary file"):
        read_canaries(tmp_path / "x.json")
