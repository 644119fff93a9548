"""`tokendp eval tagger`: character recall and precision, and gold mentions covered whole, on TAB
(next to the baselines) or on a hand-written set with its spans marked inline."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from tokendp.cli._common import library_errors
from tokendp.errors import InvalidParameterError
from tokendp.eval.tagging import TaggingScores, compare_on_marked, compare_on_tab
from tokendp.text.taggers import TAB_LABELS, TAGGER_NAMES, get_tagger


def _fmt(value: float) -> str:
    return "  -  " if math.isnan(value) else f"{value:.3f}"


def _table(results: dict[str, TaggingScores]) -> str:
    names = list(results)
    width = max(10, *(len(n) + 2 for n in names))
    head = "".join(f"{n:>{width}}" for n in names)
    lines = [f"{'':<22}{head}",
             f"{'recall':<22}" + "".join(f"{_fmt(r.recall):>{width}}" for r in results.values()),
             f"{'precision':<22}" + "".join(f"{_fmt(r.precision):>{width}}" for r in results.values()),
             f"{'mentions whole':<22}" + "".join(f"{_fmt(r.mentions.whole_rate):>{width}}" for r in results.values())]
    for kind in ("recall", "precision"):
        lines.append(f"{kind} by {'gold' if kind == 'recall' else 'predicted'} label:")
        for label in TAB_LABELS:
            values = [getattr(r, f"{kind}_by_label").get(label, float("nan")) for r in results.values()]
            lines.append(f"  {label:<20}" + "".join(f"{_fmt(v):>{width}}" for v in values))
    lines.append("gold mentions by label: whole share (whole / partial / missed)")
    for label in TAB_LABELS:
        cells = []
        for r in results.values():
            m = r.mentions_by_label.get(label)
            cells.append(f"{_fmt(m.whole_rate)} ({m.whole}/{m.partial}/{m.missed})" if m else "-")
        cell_width = max(width, *(len(c) + 2 for c in cells))
        lines.append(f"  {label:<20}" + "".join(f"{c:>{cell_width}}" for c in cells))
    return "\n".join(lines)


@click.command("tagger", short_help="Character recall and precision of a tagger, and mentions covered whole.")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path),
              help="TAB data folder (texts.json, gold_spans.json, baselines/).")
@click.option("--marked", "marked_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Instead of TAB: a hand-written set, documents after '=== id ===' lines with gold spans "
                   "written {{LABEL|text}} (benchmarks/tagger_letters/).")
@click.option("--split", type=click.Choice(["report", "tune", "all"]), default="report", show_default=True,
              help="TAB half: report = odd-indexed documents (headline); tune = even-indexed (training/tuning).")
@click.option("--tagger", "tagger_name", type=click.Choice(TAGGER_NAMES), default="auto", show_default=True)
@click.option("--no-whole", "as_found", is_flag=True,
              help="auto only: spans as found, not widened to whole mentions, no generic-word drop or name "
                   "relabelling (the earlier behaviour; docs/tagging.md).")
@click.option("--json", "as_json", is_flag=True, help="Print the scores as JSON.")
@library_errors
def eval_tagger(data_dir: Path | None, marked_path: Path | None, split: str, tagger_name: str, as_found: bool,
                as_json: bool) -> None:
    """Character-level recall and precision (whitespace not counted) of a tagger on TAB or on a
    hand-written set, and the share of gold mentions it covers whole.

    A gold character is recalled if any predicted span covers it, whatever the label; a gold
    mention is whole when every one of its characters is, partial when some are, missed when
    none are. On TAB the baselines in DATA/baselines are scored the same way.
    """
    if (data_dir is None) == (marked_path is None):
        raise InvalidParameterError("give one of --data (TAB) or --marked (a hand-written set)")
    if as_found and tagger_name != "auto":
        raise InvalidParameterError("--no-whole applies to the auto tagger only")
    tagger = get_tagger(tagger_name, **({"whole": False} if as_found else {}))
    name = f"{tagger_name}{' (no-whole)' if as_found else ''}"
    if marked_path is not None:
        results, where = compare_on_marked(marked_path, {name: tagger}), marked_path.name
    else:
        results, where = compare_on_tab(data_dir, split, {name: tagger}), f"TAB {split} half"
    if as_json:
        where_key = {"marked": str(marked_path)} if marked_path else {"split": split}
        click.echo(json.dumps({**where_key, "taggers": {n: r.to_dict() for n, r in results.items()}}, indent=2))
    else:
        click.echo(f"{where}, character-level scores (whitespace not counted)")
        click.echo(_table(results))
