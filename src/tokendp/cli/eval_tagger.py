"""`tokendp eval tagger`: character recall and precision on TAB, next to the baselines."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from tokendp.cli._common import library_errors
from tokendp.eval.tagging import TaggingScores, compare_on_tab
from tokendp.text.taggers import TAB_LABELS, TAGGER_NAMES, get_tagger


def _fmt(value: float) -> str:
    return "  -  " if math.isnan(value) else f"{value:.3f}"


def _table(results: dict[str, TaggingScores]) -> str:
    names = list(results)
    width = max(10, *(len(n) + 2 for n in names))
    head = "".join(f"{n:>{width}}" for n in names)
    lines = [f"{'':<22}{head}",
             f"{'recall':<22}" + "".join(f"{_fmt(r.recall):>{width}}" for r in results.values()),
             f"{'precision':<22}" + "".join(f"{_fmt(r.precision):>{width}}" for r in results.values())]
    for kind in ("recall", "precision"):
        lines.append(f"{kind} by {'gold' if kind == 'recall' else 'predicted'} label:")
        for label in TAB_LABELS:
            values = [getattr(r, f"{kind}_by_label").get(label, float("nan")) for r in results.values()]
            lines.append(f"  {label:<20}" + "".join(f"{_fmt(v):>{width}}" for v in values))
    return "\n".join(lines)


@click.command("tagger", short_help="Character-level recall and precision of a tagger.")
@click.option("--data", "data_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="TAB data folder (texts.json, gold_spans.json, baselines/).")
@click.option("--split", type=click.Choice(["report", "tune"]), default="report", show_default=True,
              help="report = odd-indexed documents (headline); tune = even-indexed (training/tuning).")
@click.option("--tagger", "tagger_name", type=click.Choice(TAGGER_NAMES), default="auto", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the scores as JSON.")
@library_errors
def eval_tagger(data_dir: Path, split: str, tagger_name: str, as_json: bool) -> None:
    """Character-level recall and precision (whitespace not counted) of a tagger on TAB.

    A gold character is recalled if any predicted span covers it, whatever the label; the
    baselines in DATA/baselines are scored the same way.
    """
    results = compare_on_tab(data_dir, split, {tagger_name: get_tagger(tagger_name)})
    if as_json:
        click.echo(json.dumps({"split": split, "taggers": {n: r.to_dict() for n, r in results.items()}},
                              indent=2))
    else:
        click.echo(f"TAB {split} half, character-level scores (whitespace not counted)")
        click.echo(_table(results))
