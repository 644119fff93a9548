"""Spans mean offsets into the text exactly as given (a BOM, CRLF and lone CR line ends count);
the model reads the clean text, and :mod:`tokendp.text.layout` maps spans both ways (issue 33,
item 2: CRLF offsets drifted one character per line break and left names in the clear)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tokendp.text.layout import BOM, clean
from tokendp.text.spans import Span

PIECES = ["Anna", " ", "\t", "\r\n", "\r", "\n", "e\u0301", "😀", "王小明", "  ", ".", "Zoë", "42"]


def _model_view(raw: str) -> str:
    """What the model should read of a piece of the raw text."""
    return raw.replace(BOM, "").replace("\r\n", "\n").replace("\r", "\n")


@st.composite
def documents(draw):
    text = ("\ufeff" if draw(st.booleans()) else "") + "".join(draw(st.lists(st.sampled_from(PIECES), max_size=30)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8, unique=True)))
    spans = [Span(a, b, "PERSON") for a, b in zip(cuts[::2], cuts[1::2]) if b > a]
    return text, spans


@settings(max_examples=300, deadline=None)
@given(documents())
def test_a_span_hides_exactly_its_characters_in_the_clean_text(doc):
    """The clean text under each mapped span is exactly what the model reads of the span's raw
    characters (a span of the BOM alone maps to nothing)."""
    raw, spans = doc
    body, layout = clean(raw)
    assert body == _model_view(raw)
    assert [body[m.start:m.end] for m in layout.to_clean(spans)] == [
        _model_view(raw[s.start:s.end]) for s in spans if _model_view(raw[s.start:s.end])]


@settings(max_examples=300, deadline=None)
@given(documents())
def test_spans_found_on_the_clean_text_map_back_onto_the_same_characters(doc):
    raw, _ = doc
    body, layout = clean(raw)
    found = [Span(i, min(i + 3, len(body)), "X") for i in range(0, len(body), 4)]
    for f, r in zip(found, layout.to_raw(found)):
        assert _model_view(raw[r.start:r.end]) == body[f.start:f.end]
    assert layout.to_clean(layout.to_raw(found)) == found


def test_crlf_bom_and_lone_cr():
    raw = "\ufeffDear Mr Smith,\r\n\r\nborn 14 March 1961\rin Leeds."
    body, layout = clean(raw)
    assert body == "Dear Mr Smith,\n\nborn 14 March 1961\nin Leeds."
    spans = [Span(raw.index("Smith"), raw.index("Smith") + 5, "PERSON"), Span(raw.index("14"), raw.index("1961") + 4,
                                                                               "DATE"),
             Span(raw.index("Leeds"), raw.index("Leeds") + 5, "LOC")]
    assert [body[s.start:s.end] for s in layout.to_clean(spans)] == ["Smith", "14 March 1961", "Leeds"]
    assert layout.to_clean([Span(0, 1, "X")]) == []  # the BOM alone hides nothing
    assert layout.to_clean([Span(raw.index("\r"), raw.index("\r") + 1, "X")]) == [Span(14, 15, "X")]  # CR takes LF
