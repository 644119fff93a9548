"""Write evaluation results: results.json, results.csv, results.md and PNG plots.

The plots put each private method's settings on a log epsilon axis (perplexity; LOSS and
Min-K% attack success) and draw the baselines without a finite epsilon (original, scrub,
a non-private ensemble or fine-tune) and public (epsilon 0) as horizontal lines, with random
guessing (1/5) on the attack plots. :func:`write_tables` and :func:`plot_metric` serve every
evaluation (``eval sanitize``, ``eval predict``); :func:`write_results` is the sanitization one.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokendp._optional import require
from tokendp.eval.candidates import ATTACK_LABELS

COLUMNS = ("method", "setting", "epsilon", "ppl", "asr_loss", "asr_mink",
           *(f"asr_{a}_{lab}" for a in ("loss", "mink") for lab in ATTACK_LABELS), "games", "docs")
MD_COLUMNS = (("method", "method"), ("setting", "setting"), ("epsilon", "epsilon"), ("ppl", "perplexity"),
              ("asr_loss", "ASR LOSS"), ("asr_mink", "ASR Min-K%"),
              *((f"asr_loss_{lab}", f"LOSS {lab}") for lab in ATTACK_LABELS))


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:.3e}"
    return str(value)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]] = MD_COLUMNS) -> str:
    """The results as a Markdown table, ``columns`` (key, title) (epsilon '-' = no formal guarantee)."""
    head = "| " + " | ".join(t for _, t in columns) + " |"
    rule = "|" + "|".join("---" if k in ("method", "setting") else "---:" for k, _ in columns) + "|"
    body = ["| " + " | ".join(_fmt(r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def write_tables(rows: Sequence[dict[str, Any]], out_dir: str | Path, *, title: str, note: str,
                 csv_columns: Sequence[str], table: str, command: str = "") -> list[Path]:
    """results.json (every field), results.csv (``csv_columns``) and results.md (``title``, the
    command, the Markdown ``table`` and ``note``) in ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(list(rows), indent=2))
    with (out / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(csv_columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"# {title}", ""]
    if command:
        lines += ["```", command, "```", ""]
    lines += [table, "", note]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    return [out / "results.json", out / "results.csv", out / "results.md"]


def write_results(rows: Sequence[dict[str, Any]], out_dir: str | Path, *, command: str = "",
                  plots: bool = True) -> list[Path]:
    """Write every output file of the sanitization evaluation into ``out_dir``; return their paths.

    With ``plots``, matplotlib (the ``eval`` extra) is checked before anything is written.
    """
    if plots and rows:
        pyplot()
    meta = rows[0] if rows else {}
    note = (f"{meta.get('docs', 0)} documents, T = {meta.get('max_new_tokens')} max new tokens, "
            f"delta = {meta.get('delta')}, {meta.get('seconds_total')} s. Perplexity: teacher-forced, "
            "pooled over tokens. ASR: success rate of the attack in the 5-candidate token-recovery "
            "game, pooled over PERSON, CODE and DATETIME (chance 0.2).")
    paths = write_tables(rows, out_dir, title="Sanitization evaluation", note=note, csv_columns=COLUMNS,
                         table=markdown_table(rows, MD_COLUMNS), command=command)
    if plots and rows:
        paths += plot_results(rows, Path(out_dir))
    return paths


def plot_metric(rows: Sequence[dict[str, Any]], key: str, ylabel: str, path: Path, *, log_y: bool = False) -> Path:
    """One panel of ``key`` against the certified epsilon, saved to ``path`` (PNG)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    _panel(ax, rows, key, ylabel)
    if log_y:
        ax.set_yscale("log")
    return save_figure(fig, path)


def plot_results(rows: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """``epsilon_vs_ppl.png`` and ``epsilon_vs_asr.png`` (LOSS and Min-K% panels)."""
    plt = pyplot()

    paths = [plot_metric(rows, "ppl", "perplexity (log)", out / "epsilon_vs_ppl.png", log_y=True)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, key, title in zip(axes, ("asr_loss", "asr_mink"), ("LOSS attack", "Min-K% attack")):
        _panel(ax, rows, key, "attack success rate")
        ax.axhline(0.2, color="grey", linestyle=":", label="random guess (0.2)")
        ax.set_title(title)
        ax.set_ylim(0, 1.02)
    axes[0].legend(fontsize=7, loc="best")
    paths.append(save_figure(fig, out / "epsilon_vs_asr.png"))
    return paths


_FLAT_COLORS = {"original": "black", "public": "tab:green", "scrub": "tab:brown"}


_PALETTE = ("tab:blue", "tab:orange", "tab:red", "tab:purple", "tab:olive", "tab:cyan", "tab:pink", "tab:gray")
"""Colours of the other methods, in order of appearance (none of _FLAT_COLORS')."""


def _panel(ax, rows: Sequence[dict[str, Any]], key: str, ylabel: str) -> None:
    from matplotlib.ticker import FuncFormatter

    methods = list(dict.fromkeys(r["method"] for r in rows))
    others = [m for m in methods if m not in _FLAT_COLORS]
    for method in methods:
        color = _FLAT_COLORS.get(method) or _PALETTE[others.index(method) % len(_PALETTE)]
        pts = sorted((r["epsilon"], r[key], r["setting"]) for r in rows
                     if r["method"] == method and r[key] is not None and r["epsilon"] not in (None, 0.0))
        flat = [r for r in rows if r["method"] == method and r[key] is not None and r["epsilon"] in (None, 0.0)]
        if pts:
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=method, color=color)
            for x, y, name in pts:
                ax.annotate(name, (x, y), fontsize=6, textcoords="offset points", xytext=(3, 3),
                            color=line.get_color())
        for r in flat:
            suffix = " (eps 0)" if r["epsilon"] == 0.0 else " (no DP)"
            ax.axhline(r[key], linestyle="--", linewidth=1, label=method + suffix, color=color)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(_minor_label))  # 2 and 5 of each decade: readable over many decades
    ax.set_xlabel("certified epsilon (log)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if key == "ppl":
        ax.legend(fontsize=7, loc="best")


def _minor_label(x: float, _: int) -> str:
    return f"{x:g}" if x > 0 and round(x / 10 ** math.floor(math.log10(x))) in (2, 5) else ""


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (the ``eval`` extra)."""
    matplotlib = require("matplotlib", "eval", "the evaluation plots")
    matplotlib.use("Agg")
    return require("matplotlib.pyplot", "eval", "the evaluation plots", package="matplotlib")


def save_figure(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
    return path
