"""tokendp for Presidio users (``pip install "tokendp[presidio]"``; docs/integrations.md, "Presidio").

The ``RecognizerResult``s that Presidio's ``AnalyzerEngine.analyze`` returns are spans wherever
tokendp takes spans: ``tokendp.sanitize(text, spans=results, epsilon=8)``, ``sanitize_batch``,
``generate``, a LangChain or LlamaIndex document's ``metadata["spans"]``, and, written as
``json.dumps([r.to_dict() for r in results])``, ``tokendp sanitize --spans FILE``. Entity types
map to tokendp's labels by :data:`DEFAULT_LABELS` (:mod:`tokendp.text.presidio_spans`: other
types keep their own name and are protected as their own group); :func:`to_spans` takes an
override.

:class:`DPAnonymizerEngine` is the one-line switch from anonymising to DP rewriting: where a
pipeline builds ``AnonymizerEngine()``, build ``DPAnonymizerEngine(epsilon=8)``; its
``anonymize(text=..., analyzer_results=...)`` returns the rewrite (``.text``) with its
certificate (``.report``), a :class:`~tokendp.jobs.sanitize.SanitizeResult`.

Presidio itself is not imported here: results are read by their attributes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tokendp.errors import InvalidParameterError
from tokendp.integrations._sanitizer import Sanitizer
from tokendp.jobs.sanitize import SanitizeResult
from tokendp.text.presidio_spans import presidio_spans
from tokendp.text.spans import Span
from tokendp.text.taggers.labels import PRESIDIO_TO_TAB

__all__ = ["DEFAULT_LABELS", "DPAnonymizerEngine", "to_spans"]

#: Presidio entity type -> tokendp label, the default mapping (a copy; pass ``labels=`` to change it).
DEFAULT_LABELS: dict[str, str] = dict(PRESIDIO_TO_TAB)


def to_spans(results: Sequence[Any], text: str | None = None, *, labels: Mapping[str, str] | None = None
             ) -> list[Span]:
    """tokendp spans from Presidio ``results`` (checked against ``text`` when given), entity
    types mapped by ``labels`` first, then by :data:`DEFAULT_LABELS`."""
    return presidio_spans(results, text, labels=labels)


class DPAnonymizerEngine:
    """DP-Fusion rewriting in the place of Presidio's ``AnonymizerEngine``.

    ``params``: :func:`tokendp.sanitize`'s keyword arguments (``epsilon`` or ``beta``, ``model``,
    ``max_new_tokens``, ``seed``, ``keep``, ...), checked here; ``labels``: entity type ->
    tokendp label, over :data:`DEFAULT_LABELS`. The model loads at the first call, once.
    """

    def __init__(self, *, labels: Mapping[str, str] | None = None, **params: Any) -> None:
        to_spans([], labels=labels)  # checks the mapping now
        if "tagger" in params:
            raise InvalidParameterError("DPAnonymizerEngine rewrites the spans Presidio found; it runs no tagger "
                                        "(drop tagger=)")
        self.labels = labels
        self._sanitizer = Sanitizer(params)

    def anonymize(self, text: str, analyzer_results: Sequence[Any], operators: Mapping[str, Any] | None = None,
                  **presidio_options: Any) -> SanitizeResult:
        """The DP-Fusion rewrite of ``text`` with ``analyzer_results`` as its spans, and its
        certificate. ``operators``: only None or empty; DP rewriting has no operator per entity
        (every span is rewritten under its group's budget; ``keep=`` releases labels as they
        are). Presidio's other options (``conflict_resolution``, ...) do not apply: overlapping
        results are merged, their tokens hidden in every group they belong to."""
        if operators:
            raise InvalidParameterError("DP rewriting has no per-entity operators: every span is rewritten under "
                                        "its group's epsilon; drop operators=, and to release an entity type as it "
                                        "is (Presidio's 'keep'), build DPAnonymizerEngine(keep=[label, ...])")
        unknown = sorted(set(presidio_options) - {"conflict_resolution", "merge_entities_with_spaces"})
        if unknown:
            raise InvalidParameterError(f"anonymize() got unknown option(s) {', '.join(unknown)}")
        if isinstance(analyzer_results, (str, bytes)) or not isinstance(analyzer_results, Sequence):
            raise InvalidParameterError("analyzer_results is the list AnalyzerEngine.analyze returned, got a "
                                        f"{type(analyzer_results).__name__}")
        spans = to_spans(analyzer_results, text if isinstance(text, str) else None, labels=self.labels)
        return self._sanitizer.results([text], [spans], where="analyzer_results")[0]
