"""Placeholder alignment, templates and validation of public/private contexts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinylm
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.contexts import (Placeholders, PromptTemplate, build_contexts, covered, hidden_ids,
                                   placeholder_id, prompt_template)
from tokendp.text.spans import Span

LETTER = "Dear Dr Helen Marsh, I am writing about my patient Mr Tomas Lindqvist."
EMPTY = PromptTemplate((), ())


def _offsets(tok, text):
    return tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]


def _build(text, spans, tok=None, **kw):
    tok = tok or tinylm.tokenizer()
    kw.setdefault("template", EMPTY)
    return build_contexts(text, spans, tok, placeholder=placeholder_id(tok), **kw)


def _visible_ranges(ctx, text, tok, row, ph):
    """Character ranges of the document tokens a row shows."""
    offs = _offsets(tok, text)
    n = len(ctx.rows[row]) - len(offs)
    doc = ctx.rows[row][n:] if n >= 0 else ctx.rows[row]
    return [offs[i] for i, t in enumerate(doc) if t != ph]


def test_rows_have_equal_length_and_hide_exactly_the_overlapping_tokens():
    tok = tinylm.tokenizer()
    spans = [Span(8, 19, "PERSON"), Span(54, 70, "PERSON"), Span(44, 51, "ROLE")]
    ctx = _build(LETTER, spans)
    ph = placeholder_id(tok)
    assert len({len(r) for r in ctx.rows}) == 1 and len(ctx.rows) == 3
    assert [g.name for g in ctx.groups] == ["PERSON", "ROLE"]
    assert [g.n_spans for g in ctx.groups] == [2, 1]
    offs = _offsets(tok, LETTER)
    ids = tok(LETTER, add_special_tokens=False)["input_ids"]
    def over(a, b, labels):
        return any(a < s.end and b > s.start for s in spans if s.label in labels)
    for i, (a, b) in enumerate(offs):
        person, role = over(a, b, {"PERSON"}), over(a, b, {"ROLE"})
        assert ctx.rows[0][i] == (ph if person or role else ids[i])
        assert ctx.rows[1][i] == (ph if role else ids[i])   # PERSON row shows PERSON tokens
        assert ctx.rows[2][i] == (ph if person else ids[i])
    assert ctx.groups[0].n_tokens == sum(over(a, b, {"PERSON"}) for a, b in offs)


def test_public_row_decodes_without_span_text():
    tok = tinylm.tokenizer()
    spans = [Span(8, 19, "PERSON"), Span(54, 70, "PERSON")]
    ctx = _build(LETTER, spans)
    public = tok.decode(ctx.rows[0])
    assert "Helen" not in public and "Lindqvist" not in public and "Tomas" not in public
    assert "writing about my patient" in public
    assert "Helen Marsh" in tok.decode(ctx.rows[1])


def test_span_that_splits_a_token_hides_the_whole_token():
    tok = tinylm.tokenizer()
    offs = _offsets(tok, LETTER)
    a, b = next((a, b) for a, b in offs if b - a >= 3)
    ctx = _build(LETTER, [Span(a + 1, a + 2, "X")])
    i = offs.index((a, b))
    assert ctx.rows[0][i] == placeholder_id(tok) and ctx.groups[0].n_tokens == 1


def test_tokenizer_that_adds_bos():
    tok = tinylm.tokenizer(add_bos=True)
    tpl = prompt_template(tok, template="<|doc|>{document}<|rewrite|>")
    assert tpl.before[0] == tok.bos_token_id and tpl.before[1] == tok.convert_tokens_to_ids("<|doc|>")
    ctx = _build(LETTER, [Span(8, 19, "PERSON")], tok=tok, template=tpl)
    n = len(tpl.before)
    assert all(r[0] == tok.bos_token_id for r in ctx.rows)
    assert "Helen" not in tok.decode(ctx.rows[0][n:-1]) and "Helen" in tok.decode(ctx.rows[1][n:-1])
    assert ctx.document_tokens == len(ctx.rows[0]) - n - 1


def test_adjacent_spans_of_different_labels_share_a_token_hidden_in_both():
    tok = tinylm.tokenizer()
    offs = _offsets(tok, LETTER)
    a, b = next((a, b) for a, b in offs if b - a >= 2)
    ctx = _build(LETTER, [Span(a, a + 1, "A"), Span(a + 1, b, "B")])
    i, ph = offs.index((a, b)), placeholder_id(tok)
    assert [r[i] for r in ctx.rows] == [ph, ph, ph]
    assert [g.n_tokens for g in ctx.groups] == [1, 1]


def test_overlapping_spans_of_different_labels():
    tok, ph = tinylm.tokenizer(), placeholder_id(tinylm.tokenizer())
    spans = [Span(8, 19, "PERSON"), Span(14, 30, "LOC")]
    ctx = _build(LETTER, spans)
    for row in (1, 2):  # no row shows text of a group it is not about
        other = next(s for s in spans if s.label != ctx.groups[row - 1].name)
        for a, b in _visible_ranges(ctx, LETTER, tok, row, ph):
            assert not (a < other.end and b > other.start)
    with pytest.raises(InvalidInputError, match="overlap"):
        _build(LETTER, spans, on_overlap="error")
    merged = _build(LETTER, [Span(8, 15, "PERSON"), Span(12, 19, "PERSON")])
    assert len(merged.rows) == 2 and merged.groups[0].n_spans == 2


def test_unicode_spans():
    tok = tinylm.tokenizer()
    text = "Zoë Ægir paid 45 € in Zürich; naïve café owners said ok."
    spans = [Span(0, 8, "PERSON"), Span(17, 18, "MONEY"), Span(22, 28, "LOC")]
    ctx = _build(text, spans)
    public = tok.decode(ctx.rows[0])
    for s in spans:
        assert text[s.start:s.end] not in public
    assert "naïve café" in public
    row = {g.name: i + 1 for i, g in enumerate(ctx.groups)}
    assert "Zürich" in tok.decode(ctx.rows[row["LOC"]]) and "Zürich" not in tok.decode(ctx.rows[row["PERSON"]])
    assert "Zoë Ægir" in tok.decode(ctx.rows[row["PERSON"]])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(LETTER) - 1), st.integers(1, 12),
                          st.sampled_from(["A", "B", "C"])), min_size=1, max_size=6))
def test_no_row_shows_a_character_of_another_group(raw):
    tok = tinylm.tokenizer()
    spans = [Span(s, min(s + n, len(LETTER)), lab) for s, n, lab in raw]
    ctx = _build(LETTER, spans)
    ph = placeholder_id(tok)
    assert len({len(r) for r in ctx.rows}) == 1
    for row in range(len(ctx.rows)):
        own = ctx.groups[row - 1].name if row else None
        for a, b in _visible_ranges(ctx, LETTER, tok, row, ph):
            b = max(b, a + 1)
            assert not any(a < s.end and b > s.start for s in spans if s.label != own)


def test_groups_single_and_mapping():
    spans = [Span(8, 19, "PERSON"), Span(54, 70, "PERSON"), Span(44, 51, "ROLE")]
    single = _build(LETTER, spans, groups="single")
    assert [(g.name, g.n_spans) for g in single.groups] == [("ALL", 3)] and len(single.rows) == 2
    mapped = _build(LETTER, spans, groups={"PERSON": "who", "ROLE": "who"})
    assert [g.name for g in mapped.groups] == ["who"]
    with pytest.raises(InvalidInputError, match="ROLE"):
        _build(LETTER, spans, groups={"PERSON": "who"})


def test_templates():
    plain = tinylm.tokenizer()
    tpl = prompt_template(plain, instruction="Rewrite.")
    assert plain.decode(tpl.before).startswith("Rewrite.") and plain.decode(tpl.after).endswith(":\n")
    opt = prompt_template(plain, options={"prompt_template": "<|doc|>{document}<|rewrite|>"})
    assert opt == PromptTemplate((plain.convert_tokens_to_ids("<|doc|>"),),
                                 (plain.convert_tokens_to_ids("<|rewrite|>"),))
    chat = prompt_template(tinylm.tokenizer(chat=True), instruction="Rewrite.")
    text = plain.decode(chat.before) + "DOC" + plain.decode(chat.after)
    assert text == "<|doc|>user: Rewrite.\n\nDOC\n<|rewrite|>"
    with pytest.raises(InvalidParameterError, match="document"):
        prompt_template(plain, template="no slot")


def test_placeholder_choice():
    tok = tinylm.tokenizer()
    assert placeholder_id(tok, options={"placeholder": "<|mask|>"}) == tok.convert_tokens_to_ids("<|mask|>")
    assert placeholder_id(tok) == tok("_", add_special_tokens=False)["input_ids"][0]
    with pytest.raises(InvalidParameterError, match="exactly one token"):
        placeholder_id(tok, placeholder="placeholder text")


def test_bad_inputs_give_clear_errors_without_private_text():
    with pytest.raises(InvalidInputError, match="empty"):
        _build("   ", [])
    with pytest.raises(InvalidInputError, match="past the end") as err:
        _build(LETTER, [Span(60, len(LETTER) + 5, "PERSON")])
    assert "Lindqvist" not in str(err.value)


# --- covered and hidden_ids against their definitions (issue 46: one pass over the characters) ----------------


def _naive_covered(starts, ends, spans):
    out = np.zeros(len(starts), dtype=bool)
    for s in spans:
        out |= (starts < s.end) & (ends > s.start)
    return out


def _naive_hidden(starts, ends, spans, ph):
    out = np.full(len(starts), ph.default, dtype=np.int64)
    for s in reversed(sorted(spans)):
        out[(starts < s.end) & (ends > s.start)] = ph.of(s.label)
    return out


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_covered_and_hidden_ids_match_one_pass_per_span(data):
    """Overlapping and nested spans, tokens that share characters, one-character and long tokens."""
    n = data.draw(st.integers(1, 80))
    starts = np.array(sorted(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=40))), dtype=np.int64)
    ends = np.array([data.draw(st.integers(a + 1, min(n, a + data.draw(st.integers(1, n))))) for a in starts],
                    dtype=np.int64)
    spans = [Span(a, data.draw(st.integers(a + 1, n)), data.draw(st.sampled_from(["PERSON", "LOC", "CODE", "X"])))
             for a in data.draw(st.lists(st.integers(0, n - 1), max_size=8))]
    ph = Placeholders(7, (("CODE", 3), ("LOC", 4), ("PERSON", 5)))
    assert (covered(starts, ends, spans) == _naive_covered(starts, ends, spans)).all()
    assert (hidden_ids(starts, ends, spans, ph) == _naive_hidden(starts, ends, spans, ph)).all()
    assert (hidden_ids(starts, ends, spans, Placeholders(7)) == 7).all()
