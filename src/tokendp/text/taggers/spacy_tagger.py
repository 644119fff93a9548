"""Adapter for a spaCy NER pipeline the user has installed (nothing is downloaded).

Entity labels (OntoNotes: PERSON, GPE, ORG, DATE, ...) are mapped to TAB's with
:func:`~tokendp.text.taggers.labels.to_tab`; a label tokendp does not know becomes MISC.
"""

from __future__ import annotations

from tokendp._optional import require
from tokendp.errors import InvalidParameterError
from tokendp.text.spans import Span
from tokendp.text.taggers.labels import to_tab
from tokendp.text.taggers.resolve import resolve_overlaps
from tokendp.text.taggers.subtypes import refine_labels


def _load(model: str):
    spacy = require("spacy", None, "the spacy tagger", why="and a trained pipeline such as en_core_web_sm")
    try:
        return spacy.load(model)
    except OSError:
        raise InvalidParameterError(
            f"spaCy model {model!r} is not installed; install it (python -m spacy download {model}) "
            "or use --tagger auto, which ships with tokendp") from None


class SpacyTagger:
    """Named entities from the spaCy pipeline ``model`` (a package name or a folder)."""

    name = "spacy"

    def __init__(self, *, model: str = "en_core_web_sm") -> None:
        self._nlp = _load(model)
        if not {"ner", "entity_ruler"} & set(self._nlp.pipe_factories.values()):
            raise InvalidParameterError(f"spaCy pipeline {model!r} has no 'ner' or 'entity_ruler' component")

    def tag(self, text: str) -> list[Span]:
        doc = self._nlp(text)
        spans = [Span(e.start_char, e.end_char, to_tab(e.label_, unknown="MISC"), 1.0, f"spacy:{e.label_}") for e in doc.ents]
        return refine_labels(resolve_overlaps(spans, text), text)
