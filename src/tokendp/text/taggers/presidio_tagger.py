"""Adapter for Microsoft Presidio's analyzer (``pip install "tokendp[presidio]"``).

Presidio's predefined recognisers run as they are. When the spaCy model ``spacy_model`` is
installed, Presidio's spaCy NLP engine adds its NER (PERSON, LOCATION, ...); otherwise the
analyzer uses Presidio's no-op NLP engine and only its pattern recognisers (e-mail, phone,
IBAN, card, URL, ...) run, with nothing downloaded. Presidio's entity names are mapped to
TAB's with :func:`~tokendp.text.taggers.labels.to_tab`; an entity type tokendp does not know
(a country-specific identifier) becomes CODE.
"""

from __future__ import annotations

import os

from tokendp._optional import require
from tokendp.text.spans import Span
from tokendp.text.taggers.labels import to_tab
from tokendp.text.taggers.resolve import resolve_overlaps
from tokendp.text.taggers.subtypes import refine_labels


def _presidio():
    # tldextract (used by Presidio's e-mail recogniser) would fetch the public suffix list
    # over the network; an empty URL list makes it use its bundled snapshot instead.
    os.environ.setdefault("TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS", "")
    presidio_analyzer = require("presidio_analyzer", "presidio", "the presidio tagger", package="presidio-analyzer")
    nlp_engine = require("presidio_analyzer.nlp_engine", "presidio", "the presidio tagger", package="presidio-analyzer")
    return presidio_analyzer, nlp_engine.NlpEngineProvider, nlp_engine.NoOpNlpEngine


def _spacy_model_installed(name: str) -> bool:
    try:
        import spacy.util
    except ImportError:
        return False
    return bool(spacy.util.is_package(name))


class PresidioTagger:
    """Presidio's AnalyzerEngine, with spaCy NER if ``spacy_model`` is installed."""

    name = "presidio"

    def __init__(self, *, spacy_model: str = "en_core_web_lg", language: str = "en",
                 min_score: float = 0.0) -> None:
        presidio_analyzer, provider, no_op = _presidio()
        model = {"lang_code": language, "model_name": spacy_model}
        if _spacy_model_installed(spacy_model):
            nlp_engine = provider(nlp_configuration={"nlp_engine_name": "spacy", "models": [model]}).create_engine()
            self.uses_ner = True
        else:
            nlp_engine = no_op(models=[{"lang_code": language, "model_name": "no_op"}])
            self.uses_ner = False
        registry = presidio_analyzer.RecognizerRegistry(supported_languages=[language])
        registry.load_predefined_recognizers(languages=[language], nlp_engine=nlp_engine)
        self._analyzer = presidio_analyzer.AnalyzerEngine(registry=registry, nlp_engine=nlp_engine,
                                                          supported_languages=[language])
        self.language = language
        self.min_score = min_score

    def tag(self, text: str) -> list[Span]:
        results = self._analyzer.analyze(text=text, language=self.language, score_threshold=self.min_score)
        spans = [Span(r.start, r.end, to_tab(r.entity_type, unknown="CODE"), float(r.score), f"presidio:{r.entity_type}")
                 for r in results if r.end > r.start]
        return refine_labels(resolve_overlaps(spans, text), text)
