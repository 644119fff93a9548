"""What the LangChain and LlamaIndex sanitizers share: a document's text and metadata in, its
DP-Fusion rewrite and metadata with the certificate out.

A document's spans come from its metadata (``spans_key``: ``{start, end, label}`` dicts, or
Presidio's ``RecognizerResult``s, offsets into that document's text) or, when it has none,
from the tagger. The output's metadata is the input's without ``spans_key`` (offsets into the
original mean nothing for the rewrite), with the certificate (the report's ``to_dict()``) under
``certificate_key``. The rest of the metadata is copied as it is: tokendp does not rewrite
metadata, so a private field there is released as it is (docs/integrations.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.fusion import spans_of
from tokendp.generation import document_seed
from tokendp.jobs.config import SanitizeConfig
from tokendp.jobs.sanitize import SanitizeResult, prepare_sanitize, run_sanitize

# Besides the job's settings (SanitizeConfig), what a sanitizer takes: where it runs and the seed.
LOADING = ("model", "tokenizer", "device", "dtype", "tagger", "seed")


def check_keywords(params: Mapping[str, Any], loading: Sequence[str] = LOADING) -> SanitizeConfig:
    """The job's settings from :func:`tokendp.sanitize`'s keyword arguments ``params``, checked:
    a name that is neither a setting nor one of ``loading`` is refused (never silently ignored),
    and so is a seed that is not one integer."""
    allowed = {f.name for f in dataclasses.fields(SanitizeConfig)} | set(loading)
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise InvalidParameterError(f"unknown parameter(s) {', '.join(unknown)}; this takes tokendp.sanitize's "
                                    "keyword arguments (but spans, diagnostics and on_token)")
    seed = params.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise InvalidParameterError(f"seed must be an integer or None, got {seed!r}")
    return SanitizeConfig.of(params)


class Sanitizer:
    """``params``: :func:`tokendp.sanitize_batch`'s keyword arguments but the documents, their
    spans, ``diagnostics`` (not part of a release) and ``on_token``; checked now, before any
    document or model. The model and tagger load at the first documents, once. Documents are
    rewritten ``batch_size`` at a time; with an integer ``seed``, document i of a call gets the
    stream ``document_seed(seed, i)``, as in one ``sanitize_batch`` call."""

    def __init__(self, params: Mapping[str, Any], *, spans_key: str = "spans", certificate_key: str = "tokendp",
                 batch_size: int = 8) -> None:
        self.config = check_keywords(params)
        for name, value in (("spans_key", spans_key), ("certificate_key", certificate_key)):
            if not isinstance(value, str) or not value:
                raise InvalidParameterError(f"{name} must be a non-empty string, got {value!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidParameterError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self.params = dict(params)
        self.spans_key, self.certificate_key, self.batch_size = spans_key, certificate_key, batch_size
        self._backend: Any = None
        self._tagger: Any = None

    def rewrite(self, texts: Sequence[Any], metadatas: Sequence[Mapping[str, Any]]
                ) -> list[tuple[str, dict[str, Any]]]:
        """Each document's (rewrite, metadata), spans from the metadata (see :meth:`results`)."""
        spans = [m.get(self.spans_key) for m in metadatas]
        results = self.results(texts, spans, where=f"metadata[{self.spans_key!r}]")
        return [(r.text, {**{k: v for k, v in m.items() if k != self.spans_key},
                          self.certificate_key: r.report.to_dict()}) for r, m in zip(results, metadatas)]

    def results(self, texts: Sequence[Any], spans: Sequence[Any], *, where: str = "spans") -> list[SanitizeResult]:
        """Each document's result, its spans given (None: the tagger's). Every text and every
        document's spans are checked before anything loads; messages name the document's
        position and ``where`` its spans came from, never its text."""
        for i, (text, given) in enumerate(zip(texts, spans)):
            if not isinstance(text, str) or not text.strip():
                raise InvalidInputError(f"document #{i} has no text to rewrite (a {type(text).__name__}"
                                        f"{', empty' if isinstance(text, str) else ''})")
            if given is not None:
                if not isinstance(given, (list, tuple)):
                    raise InvalidInputError(f"document #{i}, {where}: spans are a list of {{start, end, label}} or "
                                            f"Presidio RecognizerResults, not a {type(given).__name__}")
                try:
                    body, found = spans_of(text, given, None)
                except InvalidInputError as err:
                    raise InvalidInputError(f"document #{i}, {where}: {err}") from None
                past = [s.end for s in found if s.end > len(body)]
                if past:
                    raise InvalidInputError(f"document #{i}, {where}: a span ends at character {max(past)}, past the "
                                            f"end of the text ({len(body)} characters); are the offsets for this "
                                            "document?")
        results: list[SanitizeResult] = []
        for start in range(0, len(texts), self.batch_size):
            results += self._batch(list(texts[start:start + self.batch_size]),
                                   list(spans[start:start + self.batch_size]), start)
        return results

    def _batch(self, texts: list[str], spans: list[Any], first: int) -> list[SanitizeResult]:
        backend = self._load_backend()
        tagger = self._load_tagger() if any(s is None for s in spans) else None
        seed = self.params.get("seed")
        seeds = None if seed is None else [document_seed(seed, first + i) for i in range(len(texts))]
        prepared = prepare_sanitize(texts, spans=spans, config=self.config, tagger=tagger, model=backend,
                                    whole_input=False)
        return run_sanitize(prepared, seed=seeds)

    def _load_backend(self) -> Any:
        if self._backend is None:
            from tokendp.backends import load_backend

            p = self.params
            self._backend = load_backend(p.get("model", "rewriter"), tokenizer=p.get("tokenizer"),
                                         device=p.get("device"), dtype=p.get("dtype"))
        return self._backend

    def _load_tagger(self) -> Any:
        if self._tagger is None:
            from tokendp.text.taggers import get_tagger

            spec = self.params.get("tagger", "auto")
            self._tagger = get_tagger(spec) if isinstance(spec, str) else spec
        return self._tagger
