"""Loading the TAB ECHR test documents and their split convention.

TAB (Pilán et al., Computational Linguistics 48(4), 2022), as packaged in the project's
data folder: ``texts.json`` (doc_id -> text), ``gold_spans.json`` and ``baselines/*.json``
(doc_id -> [[start, end, LABEL], ...]). Sorting the doc_ids as strings, the even-indexed
documents are the tuning half and the odd-indexed the reporting half.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokendp.errors import InvalidInputError
from tokendp.text.spans import Span
from tokendp.text.taggers.labels import to_tab

SPLITS = ("tune", "report", "all")


@dataclass(frozen=True)
class TabSplit:
    """Texts and gold spans (TAB labels) of one split, keyed by doc_id."""

    texts: dict[str, str]
    gold: dict[str, list[Span]]


def split_ids(doc_ids, split: str) -> list[str]:
    """Sorted doc_ids of ``split``: "tune" = even positions, "report" = odd, "all"."""
    if split not in SPLITS:
        raise InvalidInputError(f"unknown split {split!r}; use one of {', '.join(SPLITS)}")
    ids = sorted(doc_ids)
    return ids if split == "all" else ids[0 if split == "tune" else 1::2]


def _read_json(path: Path):
    if not path.is_file():
        raise InvalidInputError(f"missing TAB file {path}; point --data at the tab/ data folder")
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def load_span_file(path: Path, ids: list[str], source: str = "") -> dict[str, list[Span]]:
    """Spans of a ``doc_id -> [[start, end, LABEL], ...]`` file, labels mapped to TAB's."""
    raw = _read_json(Path(path))
    return {d: [Span(int(s), int(e), to_tab(lab), 1.0, source) for s, e, lab in raw[d]] for d in ids}


def load_tab(data_dir: str | Path, split: str) -> TabSplit:
    """The texts and gold spans of ``split`` from a TAB data folder."""
    data_dir = Path(data_dir)
    texts = _read_json(data_dir / "texts.json")
    ids = split_ids(texts, split)
    return TabSplit({d: texts[d] for d in ids}, load_span_file(data_dir / "gold_spans.json", ids, "gold"))


def spread_by_length(texts: dict[str, str], k: int) -> list[str]:
    """``k`` documents at evenly spaced ranks of length (the shortest and the longest among them),
    shortest first: a rule that reads only the documents' lengths."""
    ranked = sorted(texts, key=lambda d: (len(texts[d]), d))
    if k >= len(ranked):
        return ranked
    return [ranked[round(i * (len(ranked) - 1) / max(k - 1, 1))] for i in range(k)]


def baseline_files(data_dir: str | Path) -> dict[str, Path]:
    """The other taggers' span files in ``data_dir/baselines``, keyed by file stem."""
    folder = Path(data_dir) / "baselines"
    return {p.stem: p for p in sorted(folder.glob("*.json"))} if folder.is_dir() else {}
