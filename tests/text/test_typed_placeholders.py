"""Typed placeholders: each hidden token shows its span's label, and the public row is still a
function of public data only (labels, positions, token counts, text outside the spans)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinylm
from tokendp.errors import InvalidParameterError
from tokendp.fusion import drafter
from tokendp.text.contexts import (Placeholders, PromptTemplate, build_contexts, placeholder_id, placeholders,
                                   qualified_label, typed_markers)
from tokendp.text.spans import Span

EMPTY = PromptTemplate((), ())
# Single tokens of the tiny test tokenizer, standing in for a model's markers.
MARKERS = {"PERSON": "Dr", "DATETIME": "He", "LOC": "The"}
TYPED = {"placeholder": "<|mask|>", "placeholder_style": "typed", "placeholders": MARKERS}
# ASCII words after a space: a span starting with a non-ASCII letter may move the token boundary
# before it (the caveat of tokenising once, docs/sanitize.md), which is not about placeholders.
NAMES = ["Helen Marsh", "Tomas Lindqvist", "Amir Patel", "Marsh Helen", "Leeds Patel",
         "Tomas Marsh", "Helen Patel", "Amir Lindqvist", "Amir Marsh"]
PLACES = ["Leeds", "Sheffield", "Marsh", "Patel", "Lindqvist"]
WORDS = ["Marsh", "Helen", "Patel", "Amir", "Leeds", "Tomas"]


def _letter(name: str, year: str, place: str) -> tuple[str, list[Span]]:
    head = "Dear Dr "
    mid = ", I am writing about my patient, born in "
    tail = ", who lives in "
    text = f"{head}{name}{mid}{year}{tail}{place}. Yours sincerely."
    a = len(head)
    b = a + len(name) + len(mid)
    c = b + len(year) + len(tail)
    return text, [Span(a, a + len(name), "PERSON"), Span(b, b + len(year), "DATETIME"),
                  Span(c, c + len(place), "LOC")]


def _public(text, spans, options=TYPED):
    tok = tinylm.tokenizer()
    return build_contexts(text, spans, tok, template=EMPTY, placeholder=placeholders(tok, options=options))


def test_single_style_is_the_default_and_the_shipped_rewriter_declares_typed_slots():
    tok = tinylm.tokenizer()
    single = placeholders(tok, options={"placeholder": "<|mask|>"})
    assert single == Placeholders(placeholder_id(tok, placeholder="<|mask|>")) and single.style == "single"
    shipped = json.loads((Path(__file__).resolve().parents[2] / "src/tokendp/models/rewriter/tokendp.json").read_text())
    # Trained with --placeholder-style typed (issue 37): its markers are SmolLM2's words.
    assert shipped["placeholder_style"] == "typed" and shipped["placeholders"]["PERSON"] == "Name"
    assert set(shipped["placeholders"]) >= set(MARKERS)


def test_typed_rows_show_each_hidden_tokens_label_one_placeholder_per_token():
    tok = tinylm.tokenizer()
    text, spans = _letter("Helen Marsh", "1961", "Leeds")
    ph = placeholders(tok, options=TYPED)
    typed, single = _public(text, spans), _public(text, spans, {"placeholder": "<|mask|>"})
    assert [len(r) for r in typed.rows] == [len(r) for r in single.rows]  # the same layout
    ids = {label: tok.convert_tokens_to_ids(m) for label, m in MARKERS.items()}
    mask = tok.convert_tokens_to_ids("<|mask|>")
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    for i, (a, b) in enumerate(offsets):
        label = next((s.label for s in spans if a < s.end and b > s.start), None)
        assert (single.rows[0][i] == mask) == (label is not None)
        assert typed.rows[0][i] == (ids[label] if label else single.rows[0][i])
        for g, group in enumerate(typed.groups, start=1):  # a private row hides the other groups alike
            assert typed.rows[g][i] == (single.rows[g][i] if single.rows[g][i] != mask else ids[label])
    assert ph.ids == {mask, *ids.values()}


def test_a_label_without_a_marker_gets_the_default_and_overlaps_take_the_first_span():
    tok = tinylm.tokenizer()
    text = "Dear Dr Helen Marsh, I am writing."
    ph = placeholders(tok, options=TYPED)
    ctx = build_contexts(text, [Span(8, 19, "ROLE")], tok, template=EMPTY, placeholder=ph)
    assert set(ctx.rows[0]) - set(tok(text, add_special_tokens=False)["input_ids"]) == {ph.default}
    both = build_contexts(text, [Span(8, 13, "PERSON"), Span(11, 19, "LOC")], tok, template=EMPTY, placeholder=ph)
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    shared = [i for i, (a, b) in enumerate(offsets) if a < 13 and b > 11]
    assert shared and all(both.rows[0][i] == ph.of("PERSON") for i in shared)
    assert ph.of("ROLE") == ph.default != ph.of("PERSON")


def test_a_label_qualified_by_its_group_is_hidden_with_its_base_labels_marker():
    """The vault names one unit's PERSON spans ``unit-001/PERSON`` (issue 45): they are hidden
    as Name, exactly as the command line hides PERSON, whatever group they belong to."""
    tok = tinylm.tokenizer()
    text, spans = _letter("Helen Marsh", "1961", "Leeds")
    ph = placeholders(tok, options=TYPED)
    assert ph.of(qualified_label("unit-001", "PERSON")) == ph.of("PERSON") != ph.default
    assert ph.of(qualified_label("unit-002", "ROLE")) == ph.default
    units = [Span(s.start, s.end, qualified_label(f"unit-00{i}", s.label)) for i, s in enumerate(spans, start=1)]
    groups = {s.label: s.label.partition("/")[0] for s in units}
    ctx = build_contexts(text, units, tok, template=EMPTY, placeholder=ph, groups=groups)
    assert ctx.rows[0] == _public(text, spans).rows[0]
    assert [g.name for g in ctx.groups] == ["unit-001", "unit-002", "unit-003"]


def test_documents_differing_only_in_span_text_give_identical_typed_public_rows():
    """Among letters that differ only in the text of their spans, those whose spans cover as many
    tokens have the same public row (and two different labels do not)."""
    rows: dict[tuple[int, ...], set[tuple[int, ...]]] = {}
    originals = set()
    for name in NAMES:
        for year in ("1961", "2024", "June 2024"):
            for place in PLACES:
                text, spans = _letter(name, year, place)
                ctx = _public(text, spans)
                counts = tuple(g.n_tokens for g in ctx.groups)
                rows.setdefault(counts, set()).add(ctx.rows[0])
                originals.add(ctx.original)
    assert all(len(r) == 1 for r in rows.values())  # the public row is a function of the counts
    assert len(rows) < len(originals)  # and many different documents share one
    text, spans = _letter("Helen Marsh", "1961", "Leeds")
    relabelled = [Span(s.start, s.end, "LOC" if s.label == "PERSON" else s.label) for s in spans]
    assert _public(text, spans).rows[0] != _public(text, relabelled).rows[0]  # labels are shown


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
def test_public_row_never_depends_on_span_text_beyond_its_token_count(first, second):
    a, sa = _letter(" ".join(first), "1961", "Leeds")
    b, sb = _letter(" ".join(second), "1961", "Leeds")
    ca, cb = _public(a, sa), _public(b, sb)
    if [g.n_tokens for g in ca.groups] == [g.n_tokens for g in cb.groups]:
        assert ca.rows[0] == cb.rows[0]
        others = [g for g, info in enumerate(ca.groups, start=1) if info.name != "PERSON"]
        assert len(others) == 2 and all(ca.rows[g] == cb.rows[g] for g in others)  # they hide PERSON too


def test_typed_markers_pick_single_tokens_and_bad_metadata_is_refused():
    tok = tinylm.tokenizer()
    chosen = typed_markers(tok)
    assert all(len(tok(m, add_special_tokens=False)["input_ids"]) == 1 for m in chosen.values())
    with pytest.raises(InvalidParameterError, match="placeholder_style"):
        placeholders(tok, options={"placeholder_style": "labelled"})
    with pytest.raises(InvalidParameterError, match="tokens for this tokenizer"):
        placeholders(tok, options={"placeholder_style": "typed", "placeholders": {"PERSON": "Dear Helen"}})
    with pytest.raises(InvalidParameterError, match="marker string"):
        placeholders(tok, options={"placeholder_style": "typed", "placeholders": ["Dr"]})


def test_smollm2_has_one_distinct_marker_word_per_tab_label():
    from tokendp.models.cache import SMOLLM2, cache_dir

    path = cache_dir(SMOLLM2)
    if not (path / "tokenizer.json").is_file():
        pytest.skip("the converted SmolLM2 is not in the local cache")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    chosen = typed_markers(tok, ["PERSON", "ORG", "LOC", "DATETIME", "CODE", "QUANTITY", "DEM", "MISC"])
    assert len(chosen) == 8 and len(set(chosen.values())) == 8
    assert not any(m.startswith("<|") for m in chosen.values())  # words the base model knows


def test_the_drafter_never_guesses_a_typed_placeholder():
    ph = Placeholders(5, (("DATETIME", 7), ("PERSON", 9)))
    assert drafter(True, 4, 1, ph).exclude == {5, 7, 9}
    assert drafter(True, 4, 1, 5).exclude == {5}


def test_sanitize_builds_typed_rows_for_a_model_whose_metadata_declares_them():
    from tokendp.jobs.config import SanitizeConfig
    from tokendp.jobs.sanitize import prepare_sanitize, run_sanitize

    tok = tinylm.tokenizer()
    text, spans = _letter("Helen Marsh", "1961", "Leeds")
    rows = {}
    for style, options in (("single", {"placeholder": "<|mask|>"}), ("typed", TYPED)):
        path = tinylm.model_dir(json.dumps({"prompt_template": "<|doc|>{document}<|rewrite|>", **options}))
        prepared = prepare_sanitize([text], spans=[spans], model=str(path),
                                    config=SanitizeConfig(method="public", max_new_tokens=3))
        assert prepared.placeholder == placeholders(tok, options=options)
        rows[style] = prepared.documents[0].context.rows[0]
        assert run_sanitize(prepared, seed=0)[0].report.groups  # it runs; the certificate is unchanged
    marker_ids = {tok.convert_tokens_to_ids(m) for m in MARKERS.values()}
    assert len(rows["typed"]) == len(rows["single"])
    assert marker_ids <= set(rows["typed"]) and tok.convert_tokens_to_ids("<|mask|>") not in rows["typed"]
