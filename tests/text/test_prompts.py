"""The rows of a generation prompt: public prompt, trusted documents with spans, untrusted chunks."""

from __future__ import annotations

import pytest

import tinylm
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.contexts import PromptTemplate, placeholder_id
from tokendp.text.prompts import STAND_IN, build_prompt_contexts
from tokendp.text.spans import Span

LETTER = "Dear Dr Helen Marsh, I am writing about my patient Mr Tomas Lindqvist."
NOTE = "The applicant was born in 1961 and lives in Leeds."
PAGE = "Please review him in clinic in six weeks."
WRAP = PromptTemplate((7,), (8,))


def _build(prompt="Who wrote it?", contexts=(), untrusted=(), **kw):
    tok = tinylm.tokenizer()
    return build_prompt_contexts(prompt, list(contexts), list(untrusted), tok, template=WRAP,
                                 placeholder=placeholder_id(tok), **kw)


def _text(ids):
    return tinylm.tokenizer().decode(ids[1:-1])


def test_each_row_shows_its_own_group_and_the_public_row_shows_none():
    ctx = _build(contexts=[(LETTER, [Span(8, 19, "PERSON"), Span(54, 69, "PERSON")]),
                           (NOTE, [Span(26, 30, "DATETIME"), Span(44, 49, "LOC")])],
                 untrusted=[PAGE, "The court held a hearing."])
    assert [g.name for g in ctx.groups] == ["DATETIME", "LOC", "PERSON", "untrusted-1", "untrusted-2"]
    assert [g.n_spans for g in ctx.groups][:3] == [1, 1, 2]
    public, *rows = [_text(r) for r in ctx.rows]
    secrets = {"DATETIME": ["1961"], "LOC": ["Leeds"], "PERSON": ["Helen Marsh", "Tomas Lindqvist"],
               "untrusted-1": [PAGE], "untrusted-2": ["The court held a hearing."]}
    assert all(r[0] == 7 and r[-1] == 8 for r in ctx.rows)
    assert public.count(STAND_IN) == 2 and "Question: Who wrote it?" in public
    for name, text in zip([g.name for g in ctx.groups], rows):
        for group, values in secrets.items():
            for v in values:
                assert (v in text) == (group == name), (name, v)
                assert v not in public
        assert text.count(STAND_IN) == (1 if name.startswith("untrusted") else 2)
    original = _text(ctx.original)
    assert all(v in original for vs in secrets.values() for v in vs) and STAND_IN not in original
    assert public.index("Document 1:") < public.index("Document 3:") < public.index("Question:")


def test_a_chunk_that_is_the_stand_in_gives_the_public_row_exactly():
    ctx = _build(contexts=[(LETTER, [Span(8, 19, "PERSON")])], untrusted=[STAND_IN, PAGE])
    assert ctx.rows[2] == ctx.rows[0] and ctx.rows[3] != ctx.rows[0]
    other = _build(contexts=[(LETTER, [Span(8, 19, "PERSON")])], untrusted=["anything at all " * 9, PAGE])
    assert other.rows[0] == ctx.rows[0] and other.rows[1] == ctx.rows[1]  # only the chunk's own row changes


def test_untrusted_text_never_becomes_a_control_token():
    tok = tinylm.tokenizer()
    ctx = _build(untrusted=["stop <|endoftext|> now"])
    assert tok.eos_token_id not in ctx.rows[1] and tok.eos_token_id not in ctx.original
    assert "<|endoftext|>" in _text(ctx.rows[1])


@pytest.mark.parametrize("question, at_start, at_end", [("last", 0, 1), ("first", 1, 0), ("both", 1, 1)])
def test_the_question_goes_where_asked_and_first_is_shared(question, at_start, at_end):
    ctx = _build(contexts=[(LETTER, [Span(8, 19, "PERSON")])], untrusted=[PAGE], question=question,
                 instruction="Answer.")
    public = _text(ctx.rows[0])
    assert public.count("Question: Who wrote it?") == at_start + at_end
    assert public.startswith("Answer.\n\nQuestion: Who wrote it?") == bool(at_start)
    assert public.endswith("Question: Who wrote it?") == bool(at_end)
    with pytest.raises(InvalidParameterError, match="question"):
        _build(untrusted=[PAGE], question="middle")


def test_without_documents_the_prompt_is_the_whole_body():
    ctx = _build(prompt="Say hello.")
    assert len(ctx.rows) == 1 and ctx.groups == () and _text(ctx.rows[0]) == "Say hello."


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompt="  "), "prompt is empty"),
    (dict(untrusted=[""]), "untrusted chunk 1 is empty"),
    (dict(contexts=[(LETTER, [Span(8, 19, "untrusted-9")])]), "untrusted chunks"),
    (dict(contexts=[(LETTER, [Span(8, 19, "Untrusted-9")])]), "untrusted chunks"),
    (dict(contexts=[(LETTER, [Span(8, 19, "PERSON")])], groups={"PERSON": "UNTRUSTED-x"}), "privacy group"),
    (dict(untrusted=[PAGE], stand_in=""), "stand-in"),
    (dict(contexts=[(LETTER, [Span(8, 99, "PERSON")])]), "past the end"),
])
def test_bad_input_is_refused_without_quoting_it(kwargs, match):
    with pytest.raises(InvalidInputError, match=match) as err:
        _build(**kwargs)
    assert "Helen" not in str(err.value) and "clinic" not in str(err.value)
