"""``get_tagger(name)``: build a tagger by name."""

from __future__ import annotations

from tokendp.errors import InvalidParameterError
from tokendp.text.taggers.base import Tagger

TAGGER_NAMES: tuple[str, ...] = ("auto", "patterns", "model", "presidio", "spacy")


def get_tagger(name: str = "auto", **options) -> Tagger:
    """The tagger called ``name`` (one of :data:`TAGGER_NAMES`); ``options`` go to its constructor.

    Optional back-ends are imported only when asked for, and raise
    :class:`tokendp.errors.InvalidParameterError` naming what to install when missing.
    """
    if name == "patterns":
        from tokendp.text.taggers.patterns import PatternTagger
        return PatternTagger(**options)
    if name == "model":
        from tokendp.text.taggers.model import ModelTagger
        return ModelTagger(**options)
    if name == "auto":
        from tokendp.text.taggers.combined import AutoTagger
        return AutoTagger(**options)
    if name == "presidio":
        from tokendp.text.taggers.presidio_tagger import PresidioTagger
        return PresidioTagger(**options)
    if name == "spacy":
        from tokendp.text.taggers.spacy_tagger import SpacyTagger
        return SpacyTagger(**options)
    raise InvalidParameterError(f"unknown tagger {name!r}; choose one of {', '.join(TAGGER_NAMES)}")
