"""The learned tagger: a linear-chain CRF (Lafferty, McCallum and Pereira, ICML 2001).

Trained by ``scripts/train_tagger.py`` on the TAB tuning half only (even-indexed documents),
with python-crfsuite (L-BFGS on the L1+L2-regularised conditional log-likelihood). At tagging
time the per-token marginals P(y_i | x) come from forward-backward; a token is tagged when
P(y_i != O | x) >= ``threshold`` (chosen by cross-validation on the tuning half to trade
precision for recall), with the entity type of largest marginal mass, and a span's score is
the mean over its tokens of P(y_i != O | x). A span made of pronouns only ("I", "Yours") is
dropped: a pronoun identifies no one, and the low threshold tags them in letters, which are
outside the training data (TAB's 7,341 gold spans hold none).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tokendp._optional import require
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.spans import Span
from tokendp.text.taggers.features import Token, bio_from_spans, sentence_features, tokenize
from tokendp.text.taggers.gazetteer import NAMES_FILE, load_names
from tokendp.text.taggers.patterns import PatternTagger
from tokendp.text.taggers.subtypes import refine_labels

PRONOUNS = frozenset(
    "i me my mine myself you your yours yourself yourselves he him his himself she her hers herself it its "
    "itself we us our ours ourselves they them their theirs themselves".split())
MODEL_FILE = "tagger.crfsuite"
META_FILE = "tagger.json"


def default_model_dir() -> Path:
    """Folder of the CRF shipped inside the package."""
    return Path(str(resources.files("tokendp.text.taggers") / "data"))


def _crfsuite():
    # A core dependency, imported late so that tokendp.text loads without it.
    return require("pycrfsuite", None, "the model tagger", package="python-crfsuite")


def _lines(tokens: list[Token], text: str) -> list[tuple[int, int]]:
    """Token index ranges of the text's non-empty lines (the CRF's sequences)."""
    bounds, begin = [], 0
    for i in range(1, len(tokens) + 1):
        if i == len(tokens) or "\n" in text[tokens[i - 1].end:tokens[i].start]:
            bounds.append((begin, i))
            begin = i
    return bounds


def document_items(text: str, pattern_spans: list[Span],
                   names: Mapping[str, str]) -> tuple[list[Token], list[dict]]:
    """Tokens of ``text`` and their CRF features, given the pattern tagger's spans and the
    model's name gazetteer."""
    tokens = tokenize(text)
    return tokens, sentence_features(text, tokens, pattern_spans, names)


@dataclass(frozen=True)
class TrainingSettings:
    """Regularisation and stopping of the L-BFGS fit."""

    c1: float = 0.05
    c2: float = 0.3
    max_iterations: int = 150


def train_crf(texts: Sequence[str], gold: Sequence[Sequence[Span]], model_path: str | Path,
              settings: TrainingSettings = TrainingSettings()) -> None:
    """Fit a CRF on documents ``texts`` with gold spans (TAB labels) and save it to ``model_path``;
    the gazetteer is the ``names.tsv`` beside it, if any (the tagger reads the same one)."""
    pycrfsuite = _crfsuite()
    patterns = PatternTagger()
    names = load_names(Path(model_path).parent / NAMES_FILE)
    trainer = pycrfsuite.Trainer(verbose=False)
    for text, spans in zip(texts, gold, strict=True):
        tokens, items = document_items(text, patterns.spans(text), names)
        tags = bio_from_spans(tokens, list(spans))
        for a, b in _lines(tokens, text):
            trainer.append(items[a:b], tags[a:b])
    trainer.set_params({"c1": settings.c1, "c2": settings.c2, "max_iterations": settings.max_iterations,
                        "feature.possible_transitions": True})
    trainer.train(str(model_path))


def _pronouns_only(span_text: str) -> bool:
    words = [t.text.lower() for t in tokenize(span_text)]
    return bool(words) and all(w in PRONOUNS for w in words)


class ModelTagger:
    """Tags with a CRF from ``model_dir`` (default: the one shipped in the package)."""

    name = "model"

    def __init__(self, model_dir: str | Path | None = None, *, threshold: float | None = None) -> None:
        if threshold is not None and not 0.0 < threshold < 1.0:
            raise InvalidParameterError(f"threshold must be in (0, 1) (lower tags more), got {threshold}")
        model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        model_path, meta_path = model_dir / MODEL_FILE, model_dir / META_FILE
        if not model_path.is_file():
            raise InvalidInputError(f"no tagger model at {model_path}; run scripts/train_tagger.py")
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
        self.threshold = float(meta.get("threshold", 0.5) if threshold is None else threshold)
        self._tagger = _crfsuite().Tagger()
        self._tagger.open(str(model_path))
        self._labels = self._tagger.labels()
        self._names = load_names(model_dir / NAMES_FILE)
        self._patterns = PatternTagger()

    def tag(self, text: str) -> list[Span]:
        """The CRF's spans, DATETIME and DEM split into finer labels (taggers/subtypes.py)."""
        return refine_labels(self.predict(text, self._patterns.spans(text)), text)

    def predict(self, text: str, pattern_spans: list[Span]) -> list[Span]:
        """Spans of ``text`` with TAB's labels, given the pattern tagger's (resolved, TAB-labelled)
        spans, which are features."""
        tokens, items = document_items(text, pattern_spans, self._names)
        spans: list[Span] = []
        for a, b in _lines(tokens, text):
            spans.extend(self._decode(tokens[a:b], items[a:b]))
        return [s for s in spans if not _pronouns_only(text[s.start:s.end])]

    def _decode(self, tokens: list[Token], items: list[dict]) -> Iterable[Span]:
        self._tagger.set(items)
        current: list = []  # [start, end, label, scores]
        for i, tok in enumerate(tokens):
            mass: dict[str, float] = {}
            begin: dict[str, float] = {}
            for label in self._labels:
                if label != "O":
                    p = self._tagger.marginal(label, i)
                    kind = label[2:]
                    mass[kind] = mass.get(kind, 0.0) + p
                    if label.startswith("B-"):
                        begin[kind] = p
            kind = max(mass, key=mass.get)
            p_entity = sum(mass.values())
            if p_entity < self.threshold:
                yield from self._close(current)
                current = []
                continue
            if current and current[2] == kind and begin.get(kind, 0.0) <= mass[kind] / 2:
                current[1] = tok.end
                current[3].append(p_entity)
            else:
                yield from self._close(current)
                current = [tok.start, tok.end, kind, [p_entity]]
        yield from self._close(current)

    @staticmethod
    def _close(current: list) -> list[Span]:
        if not current:
            return []
        start, end, label, scores = current
        return [Span(start, end, label, min(1.0, sum(scores) / len(scores)), "model")]
