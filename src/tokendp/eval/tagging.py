"""Character-level tagger metrics, as in TAB (Pilán et al., 2022, Section 6).

For a document with characters C (whitespace excluded), gold characters G (covered by any gold
span) and predicted characters P (covered by any predicted span):

    recall    = |G ∩ P| / |G|        precision = |G ∩ P| / |P|

summed over documents before dividing (micro average). The headline is label-agnostic: a gold
character counts as recalled if ANY predicted span covers it, whatever its label (a masked
character is masked). Per gold label L, recall_L = |G_L ∩ P| / |G_L|; per predicted label L,
precision_L = |P_L ∩ G| / |P_L|.

Counted by gold mention (span), the same way: a mention is **whole** when P covers every one of
its non-whitespace characters, **missed** when P covers none, **partial** otherwise. A partial
mention is the worst case for privacy: its found part is protected and tells the reader where
to look, while the rest ("Bexmoor" of "Bexmoor Insurance plc") is released in the clear.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from tokendp.eval.marked import load_marked
from tokendp.text.tab import baseline_files, load_span_file, load_tab
from tokendp.text.spans import Span


@dataclass(frozen=True)
class MentionCounts:
    """Gold mentions covered whole, in part, or not at all by the predicted spans."""

    whole: int = 0
    partial: int = 0
    missed: int = 0

    @property
    def total(self) -> int:
        return self.whole + self.partial + self.missed

    @property
    def whole_rate(self) -> float:
        """Share of mentions covered whole (nan when there are none)."""
        return _ratio(self.whole, self.total)

    def __add__(self, other: MentionCounts) -> MentionCounts:
        return MentionCounts(self.whole + other.whole, self.partial + other.partial, self.missed + other.missed)

    def to_dict(self) -> dict:
        return {"whole": self.whole, "partial": self.partial, "missed": self.missed,
                "whole_rate": self.whole_rate}


@dataclass(frozen=True)
class TaggingScores:
    """Micro-averaged character recall and precision, overall and per label."""

    recall: float
    precision: float
    gold_chars: int
    predicted_chars: int
    recall_by_label: dict[str, float] = field(default_factory=dict)
    precision_by_label: dict[str, float] = field(default_factory=dict)
    mentions_by_label: dict[str, MentionCounts] = field(default_factory=dict)

    @property
    def mentions(self) -> MentionCounts:
        """Gold mentions of every label, whole / partial / missed."""
        return sum(self.mentions_by_label.values(), MentionCounts())

    def to_dict(self) -> dict:
        return {"recall": self.recall, "precision": self.precision, "gold_chars": self.gold_chars,
                "predicted_chars": self.predicted_chars, "recall_by_label": self.recall_by_label,
                "precision_by_label": self.precision_by_label, "mentions": self.mentions.to_dict(),
                "mentions_by_label": {lab: m.to_dict() for lab, m in self.mentions_by_label.items()}}


def _masks(text: str, spans: Iterable[Span], visible: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Characters covered by any span, and by spans of each label (whitespace removed)."""
    anyone = np.zeros(len(text), dtype=bool)  # (n_chars,)
    by_label: dict[str, np.ndarray] = {}
    for span in spans:
        anyone[span.start:span.end] = True
        by_label.setdefault(span.label, np.zeros(len(text), dtype=bool))[span.start:span.end] = True
    return anyone & visible, {lab: m & visible for lab, m in by_label.items()}


def _ratio(num: int, den: int) -> float:
    return num / den if den else float("nan")


def _mention_kind(span: Span, found: np.ndarray, visible: np.ndarray) -> str:
    """"whole", "partial" or "missed": how much of the gold ``span``'s visible characters ``found`` covers."""
    own = visible[span.start:span.end]
    covered, size = int((found[span.start:span.end] & own).sum()), int(own.sum())
    if covered == size:
        return "whole"
    return "missed" if covered == 0 else "partial"


def char_scores(texts: Mapping[str, str], gold: Mapping[str, Iterable[Span]],
                predicted: Mapping[str, Iterable[Span]]) -> TaggingScores:
    """Character recall and precision of ``predicted`` against ``gold`` over ``texts``' documents,
    and the gold mentions of each label covered whole, in part or not at all."""
    hit = n_gold = n_pred = 0
    label_counts: dict[tuple[str, str], list[int]] = {}
    mentions: dict[str, dict[str, int]] = {}
    for doc_id, text in texts.items():
        visible = ~np.array([c.isspace() for c in text], dtype=bool)  # (n_chars,)
        gold_spans = list(gold.get(doc_id, ()))
        g_any, g_by = _masks(text, gold_spans, visible)
        p_any, p_by = _masks(text, predicted.get(doc_id, ()), visible)
        for span in gold_spans:
            counts = mentions.setdefault(span.label, {"whole": 0, "partial": 0, "missed": 0})
            counts[_mention_kind(span, p_any, visible)] += 1
        hit += int((g_any & p_any).sum())
        n_gold += int(g_any.sum())
        n_pred += int(p_any.sum())
        for kind, masks, other in (("recall", g_by, p_any), ("precision", p_by, g_any)):
            for label, mask in masks.items():
                counts = label_counts.setdefault((kind, label), [0, 0])
                counts[0] += int((mask & other).sum())
                counts[1] += int(mask.sum())
    per = {kind: {lab: _ratio(*label_counts[(k, lab)]) for k, lab in sorted(label_counts) if k == kind}
           for kind in ("recall", "precision")}
    return TaggingScores(_ratio(hit, n_gold), _ratio(hit, n_pred), n_gold, n_pred,
                         per["recall"], per["precision"],
                         {lab: MentionCounts(**mentions[lab]) for lab in sorted(mentions)})


def compare_on_tab(data_dir, split: str, taggers: Mapping[str, object]) -> dict[str, TaggingScores]:
    """Scores of each tagger (name -> object with ``tag``) and of every file in ``baselines/``.

    The baselines' labels are mapped to TAB's, so per-label precision compares like with like.
    """
    data = load_tab(data_dir, split)
    results = {name: char_scores(data.texts, data.gold, {d: tagger.tag(t) for d, t in data.texts.items()})
               for name, tagger in taggers.items()}
    for name, path in baseline_files(data_dir).items():
        results[name] = char_scores(data.texts, data.gold, load_span_file(path, list(data.texts), name))
    return results


def compare_on_marked(path, taggers: Mapping[str, object]) -> dict[str, TaggingScores]:
    """Scores of each tagger (name -> object with ``tag``) on a hand-written set whose gold spans
    are marked inline (:mod:`tokendp.eval.marked`)."""
    texts, gold = load_marked(path)
    return {name: char_scores(texts, gold, {d: tagger.tag(t) for d, t in texts.items()})
            for name, tagger in taggers.items()}
