"""``get_tagger(name)``: build a tagger by name."""

from __future__ import annotations

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.layout import clean
from tokendp.text.spans import Span
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


def tag(text: str, *, tagger: str | Tagger = "auto") -> list[Span]:
    """The private spans of ``text`` (``tokendp.tag``): character-offset :class:`Span` objects
    labelled with TAB's categories (DATETIME split into DATE and DURATION, DEM's occupations
    as OCCUPATION), sorted and disjoint, as the jobs would find them.

    ``tagger`` is a name of :data:`TAGGER_NAMES` (built with :func:`get_tagger`; repeated calls
    build it again, so keep a ``get_tagger(name)`` object for many texts) or any object with
    ``tag(text)``. Spans carry offsets and labels; printing them never needs the text. The
    offsets are into ``text`` exactly as given (a BOM and CRLF line ends count): the tagger reads
    the clean text and its spans are mapped back (:mod:`tokendp.text.layout`), so they can be
    passed to ``sanitize(text, spans=...)`` as they are.
    """
    if not isinstance(text, str):
        raise InvalidInputError(f"tag takes one text (a str), got {type(text).__name__}; tag a list one by one")
    if isinstance(tagger, str):
        tagger = get_tagger(tagger)
    elif not callable(getattr(tagger, "tag", None)):
        raise InvalidParameterError(f"tagger must be a name ({', '.join(TAGGER_NAMES)}) or an object with "
                                    f"tag(text), got {type(tagger).__name__}")
    body, layout = clean(text)
    return layout.to_raw(tagger.tag(body))


def tagger_name(tagger: Tagger) -> str:
    """How a report names the tagger that found its spans: ``tagger NAME VERSION``, the version
    being tokendp's for a built-in tagger, else the object's ``version`` attribute, if any."""
    name = getattr(tagger, "name", None) or type(tagger).__name__
    version = getattr(tagger, "version", None)
    if version is None and type(tagger).__module__.startswith("tokendp."):
        from importlib.metadata import version as installed

        version = installed("tokendp")
    return f"tagger {name}" + (f" {version}" if version else "")
