"""Write the synthesis evaluation: results.json, results.md and mauve.png."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokendp.eval.report import _fmt, _panel, _pyplot, _save

MD_COLUMNS = (("setting", "setting"), ("epsilon", "epsilon"), ("mauve", "MAUVE"), ("on_topic", "on topic"),
              ("empty", "empty"), ("ended", "ended (EOS)"), ("words", "words"))


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
    """results.json, results.md (with the command and the scale) and, with ``plots``, mauve.png."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(list(rows), indent=2))
    meta = rows[0] if rows else {}
    lines = ["# Synthesis evaluation", ""]
    if command:
        lines += ["```", command, "```", ""]
    lines += [markdown_table(rows), "",
              f"{meta.get('texts')} texts per setting against {meta.get('held_out')} held-out texts; model "
              f"{meta.get('model')}, B = {meta.get('batch_size')}, T = {meta.get('max_tokens')}, "
              f"tau = {meta.get('temperature')}. MAUVE: features are the model's last hidden state at the last "
              "of a text's first T tokens, mean ± standard deviation over k-means seeds."]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    paths = [out / "results.json", out / "results.md"]
    if plots and rows:
        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(6, 4))
        _panel(ax, rows, "mauve", "MAUVE vs held-out texts")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7, loc="best")
        paths.append(_save(fig, out / "mauve.png"))
    return paths
