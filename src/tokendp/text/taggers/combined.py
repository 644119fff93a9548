"""``auto``: the pattern recognisers and the learned CRF, combined.

Every span either tagger finds is kept (a missed span is a leak; an extra one only costs
utility); overlaps are resolved by :func:`~tokendp.text.taggers.resolve.resolve_overlaps`
with source priority patterns > model, so a validated pattern (an IBAN, a date) keeps its
label when scores tie. With ``whole`` (the default), the CRF's spans that are a generic word
alone are dropped first (:mod:`~tokendp.text.taggers.generic`), and after resolution its ORG
spans that read as a name become PERSON (:mod:`~tokendp.text.taggers.relabel`) and every span is
widened to its whole mention (:mod:`~tokendp.text.taggers.whole`); ``whole=False`` gives the
spans as found, as before. Last, DATETIME and DEM are split into DATE / DURATION and OCCUPATION /
DEM (:mod:`~tokendp.text.taggers.subtypes`).
"""

from __future__ import annotations

from pathlib import Path

from tokendp.text.spans import Span
from tokendp.text.taggers.generic import drop_generic
from tokendp.text.taggers.model import ModelTagger
from tokendp.text.taggers.patterns import PatternTagger
from tokendp.text.taggers.relabel import names_as_person
from tokendp.text.taggers.resolve import resolve_overlaps
from tokendp.text.taggers.subtypes import refine_labels
from tokendp.text.taggers.whole import whole_entities

SOURCE_PRIORITY = ("patterns", "model")


class AutoTagger:
    """Patterns plus the shipped CRF (or the one in ``model_dir``); ``whole=False``: spans as found
    (no generic-word drop, relabelling or widening)."""

    name = "auto"

    def __init__(self, model_dir: str | Path | None = None, *, threshold: float | None = None,
                 whole: bool = True) -> None:
        self.patterns = PatternTagger()
        self.model = ModelTagger(model_dir, threshold=threshold)
        self.whole = whole

    def tag(self, text: str) -> list[Span]:
        candidates = self.patterns.candidates(text)
        found = self.model.predict(text, resolve_overlaps(candidates, text))
        if self.whole:
            found = drop_generic(found, text)
        spans = resolve_overlaps(candidates + found, text, source_priority=SOURCE_PRIORITY)
        if self.whole:
            spans = whole_entities(names_as_person(spans, text), text)
        return refine_labels(spans, text)
