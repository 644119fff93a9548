"""tokendp on Hugging Face ``datasets`` (``pip install "tokendp[datasets]"``; docs/integrations.md,
"Hugging Face datasets"): :func:`sanitize_dataset`, also ``tokendp.sanitize_dataset``.

A ``datasets.Dataset`` runs as a corpus does on the local engine (docs/engines.md): every row
is checked before anything loads, each document is rewritten with its own random stream
(``document_seed(seed, id)``), and with ``out`` the run is resumable: each document is saved as
it finishes and a rerun of the same call skips the documents already done (a finished run
rerun loads nothing). ``datasets`` is imported when the function is called, not before.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokendp._optional import require
from tokendp.engines.corpus import FORMATS, CorpusRecord, parse_record, scan_records
from tokendp.engines.local import Batching, check_batching
from tokendp.engines.runner import sanitize_checked
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.integrations._sanitizer import check_keywords

__all__ = ["sanitize_dataset"]

# What the corpus worker loads besides the job's settings (no tokenizer: a model by name, a
# directory or an HFBackend).
_LOADING = ("model", "device", "dtype", "tagger", "seed")


@dataclass(frozen=True)
class _Rows:
    """The dataset's documents as a checked corpus (what :func:`sanitize_checked` reads)."""

    dataset: Any
    columns: dict[str, str | None]  # "id", "text", "spans" -> the dataset's column (None: absent)
    path: Path = Path("the dataset")
    ids: tuple[str | int, ...] = ()
    needs_tagger: bool = False

    def raw(self) -> Iterator[tuple[str, int, dict[str, Any]]]:
        present = [c for c in self.columns.values() if c is not None]
        for i, row in enumerate(self.dataset.select_columns(present)):
            yield f"row {i + 1}", i + 1, {key: None if col is None else row[col] for key, col in self.columns.items()}

    def records(self) -> Iterator[CorpusRecord]:
        for where, number, raw in self.raw():
            yield parse_record(raw, where=where, default_id=number)


def sanitize_dataset(dataset: Any, *, out: str | Path | None = None, text_column: str = "text",
                     spans_column: str = "spans", id_column: str = "id", rewrite_column: str = "rewrite",
                     report_column: str = "report", batch_size: int = 8, threads: int | None = None,
                     progress: bool = True, batching: Batching = "static", **params: Any) -> Any:
    """``dataset`` with two columns added: ``rewrite_column`` (each row's DP-Fusion rewrite) and
    ``report_column`` (its certificate, the report as JSON text: ``json.loads(row["report"])``).

    Each row's document is ``text_column``; its spans ``spans_column`` when the dataset has it
    (``{start, end, label}`` or Presidio's ``{start, end, entity_type}``; a null row runs the
    tagger), else the tagger's; its id ``id_column`` when the dataset has it (unique strings or
    integers), else its 1-based row number. ``params``: :func:`tokendp.sanitize`'s keyword
    arguments (``epsilon`` or ``beta``, ``model``, ``max_new_tokens``, ``seed``, ``tagger``,
    ``labels``, ``keep``, ...). ``out``: a ``.jsonl`` or ``.parquet`` file that makes the run
    resumable (the same file ``tokendp sanitize CORPUS --out`` writes; None: in memory).
    ``batch_size``, ``threads``, ``progress`` and ``batching`` as for
    :func:`tokendp.engines.sanitize_corpus`. Every argument and row is checked before the model
    loads; errors name rows and ids, never text.
    """
    datasets = require("datasets", "datasets", "tokendp.sanitize_dataset")
    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise InvalidInputError(f"sanitize_dataset takes one split, not a {type(dataset).__name__}: pass "
                                f"dataset[{next(iter(dataset), 'train')!r}]")
    if not isinstance(dataset, datasets.Dataset):
        raise InvalidInputError(f"sanitize_dataset takes a datasets.Dataset; got {type(dataset).__name__} (an "
                                "IterableDataset: materialise it with Dataset.from_generator, or write it to "
                                "Parquet and run tokendp.engines.sanitize_corpus)")
    check_keywords(params, _LOADING)
    check_batching(batching)
    if out is not None and Path(out).suffix.lower() not in FORMATS:
        raise InvalidParameterError(f"out must be a .jsonl or .parquet file (the resumable output), got {out}")
    names = dataset.column_names
    if text_column not in names:
        raise InvalidInputError(f"the dataset has no column {text_column!r} (its columns: {', '.join(names)}); "
                                "pass text_column=")
    taken = [c for c in (rewrite_column, report_column) if c in names]
    if taken or rewrite_column == report_column:
        raise InvalidParameterError(f"rewrite_column and report_column must be two new column names; "
                                    f"{', '.join(taken) or rewrite_column} is taken")
    columns = {"id": id_column if id_column in names else None, "text": text_column,
               "spans": spans_column if spans_column in names else None}
    rows = _Rows(dataset, columns)
    ids, needs_tagger = scan_records(rows.raw(), "the dataset")
    rows = _Rows(dataset, columns, ids=ids, needs_tagger=needs_tagger)
    run = sanitize_checked(rows, params, out=out, engine="local", batch_size=batch_size, threads=threads,
                           progress=progress, batching=batching)
    released = _released(run.lines if out is None else None, run.output)
    return (dataset.add_column(rewrite_column, [released[i][0] for i in ids])
            .add_column(report_column, [released[i][1] for i in ids]))


def _released(lines: list[str] | None, path: Path | None) -> dict[str | int, tuple[str, str]]:
    """id -> (rewrite, report as JSON text), from the records in memory (``lines``) or in the
    finished ``.jsonl`` or ``.parquet`` output at ``path``."""
    if lines is None and path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        return {r["id"]: (r["text"], r["report"]) for r in pq.read_table(path).to_pylist()}
    if lines is None:
        lines = path.read_text(encoding="utf-8").splitlines()
    return {r["id"]: (r["text"], json.dumps(r["report"], ensure_ascii=False)) for r in map(json.loads, lines)}
