"""Write the synthesis evaluation: results.json, results.csv, results.md and mauve.png."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokendp.eval.report import _fmt, pyplot, save_figure, write_tables

FLAT_COLOURS = {"real": "black", "non-private": "tab:purple", "public": "tab:green", "off-topic": "tab:grey"}
MD_COLUMNS = (("setting", "setting"), ("epsilon", "epsilon"), ("mauve", "MAUVE"), ("on_topic", "on topic"),
              ("empty", "empty"), ("ended", "ended (EOS)"), ("words", "words"))
CSV_COLUMNS = ("setting", "epsilon", "mauve", "mauve_std", "on_topic", "empty", "ended", "words")


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The results as a Markdown table: MAUVE as mean +- standard deviation over k-means seeds;
    epsilon '-' = no guarantee."""
    head = "| " + " | ".join(t for _, t in MD_COLUMNS) + " |"
    rule = "|---|" + "---:|" * (len(MD_COLUMNS) - 1)
    body = []
    for r in rows:
        cells = [f"{r['mauve']:.2f} ± {r['mauve_std']:.2f}" if k == "mauve" else _fmt(r.get(k)) for k, _ in MD_COLUMNS]
        body.append("| " + " | ".join(cells) + " |")
    return "\n".join([head, rule, *body])


def write_synthesis_results(rows: Sequence[dict[str, Any]], out_dir: str | Path, *, command: str = "",
                            plots: bool = True) -> list[Path]:
    """results.json, results.csv, results.md (with the command and the scale) and, with ``plots``, mauve.png."""
    meta = rows[0] if rows else {}
    note = (f"{meta.get('texts')} texts per setting against {meta.get('held_out')} held-out texts; model "
            f"{meta.get('model')}, B = {meta.get('batch_size')}, T = {meta.get('max_tokens')}, "
            f"tau = {meta.get('temperature')}. MAUVE: features are the model's final hidden states averaged over "
            "a text's first T tokens; mean ± standard deviation over k-means seeds.")
    paths = write_tables(rows, out_dir, title="Synthesis evaluation", note=note, csv_columns=CSV_COLUMNS,
                         table=markdown_table(rows), command=command)
    if plots and rows:
        paths.append(plot_mauve(rows, Path(out_dir) / "mauve.png"))
    return paths


def plot_mauve(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """MAUVE against certified epsilon (log axis, error bars: the k-means spread) for InvisibleInk
    and Amin et al.; real, non-private, public and off-topic as horizontal lines."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for method in ("invisibleink", "amin"):
        pts = sorted((r["epsilon"], r["mauve"], r["mauve_std"]) for r in rows if r["method"] == method)
        if pts:
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", capsize=3,
                        label=method)
    for r in rows:
        if r["method"] in FLAT_COLOURS:
            ax.axhline(r["mauve"], linestyle="--", linewidth=1, color=FLAT_COLOURS[r["method"]],
                       label=r["setting"] + (" (eps 0)" if r["method"] == "public" else ""))
    ax.set_xscale("log")
    ax.set_xlabel("certified epsilon per reference (log)")
    ax.set_ylabel("MAUVE against held-out texts")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return save_figure(fig, path)
