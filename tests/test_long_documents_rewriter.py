"""Passages rewrite their own text (issue 45, item 4), read through the default rewriter.

Before, each passage after the first read the previous passage and its rewrite as an earlier
chat turn; the 135M rewriter, trained on single turns, rewrote that earlier turn again ("2. On 14
January 2002 the claim form was issued" four times). Its tokendp.json now has each passage read
alone (``"passage_history": "none"``)."""

from __future__ import annotations

import re

import pytest

from tokendp.jobs.config import SanitizeConfig
from tokendp.jobs.sanitize import prepare_sanitize, run_sanitize
from tokendp.text.spans import Span

pytestmark = pytest.mark.slow

PARAGRAPHS = [
    "On 3 March 2019 Ms Clara Jensen bought a blue bicycle from a shop in Aarhus for her daughter.",
    "The court of appeal heard the tenant's complaint about the broken heating on 9 May 2021.",
    "Dr Pieter de Vries examined the patient and prescribed physiotherapy for her knee.",
]
NAMES = ("3 March 2019", "Clara Jensen", "Aarhus", "9 May 2021", "Pieter de Vries")


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{4,}", text.lower())}


def test_each_passage_of_a_long_document_rewrites_its_own_text():
    text = "\n\n".join(PARAGRAPHS)
    spans = sorted(Span(text.index(n), text.index(n) + len(n), "DATETIME" if n[0].isdigit() else
                        "LOC" if n == "Aarhus" else "PERSON") for n in NAMES)
    prepared = prepare_sanitize([text], spans=[spans], model="rewriter",
                                config=SanitizeConfig(epsilon=8.0, passage_tokens=32, max_new_tokens=120))
    assert len(prepared.documents[0].long.passages) == 3
    pieces: list[list[int]] = []
    (result,) = run_sanitize(prepared, seed=[3], on_passage=lambda i, k, n: pieces.append([]),
                             on_token=lambda i, token: pieces[-1].append(token))
    tokenizer = prepared.backend.tokenizer
    rewrites = [tokenizer.decode(ids, skip_special_tokens=True) for ids in pieces]
    for k, rewrite in enumerate(rewrites):  # each rewrite shares more words with its own paragraph
        own = len(words(rewrite) & words(PARAGRAPHS[k]))
        others = [len(words(rewrite) & words(p)) for j, p in enumerate(PARAGRAPHS) if j != k]
        assert own > max(others), (k, rewrite)
    assert result.report.passages == 3 and result.report.max_new_tokens == 120
