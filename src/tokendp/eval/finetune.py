"""``tokendp eval finetune``: no DP, DP-SGD and ATDP side by side on WikiText-2 with canaries.

Records: detokenised WikiText-2 sentences grouped up to ``max_tokens`` tokens (each group one
record), the first ``records`` of train.txt plus the canaries (``repeats`` copies each); the
validation set is the first ``valid`` records of valid.txt built the same way. Each run trains
into ``OUT/runs/NAME`` (skipped when done, resumed when interrupted) and is scored by
validation perplexity (teacher forcing, pooled over tokens), canary exposure
(:mod:`tokendp.eval.exposure`), training time and certified epsilon. ``results.json``,
``results.md`` and ``exposure.png`` go to OUT.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from tokendp.jobs.finetune import FinetuneConfig, finetune
from tokendp.jobs.finetune.run import CANARY_FILE, REPORT_FILE, load_base
from tokendp.text.canaries import read_canaries

EVAL_FILE = "eval.json"


def wikitext_records(path: str | Path, tokenizer: Any, *, limit: int, max_tokens: int) -> list[str]:
    """Up to ``limit`` records of consecutive sentences, each at most ``max_tokens`` tokens
    (special tokens included); a longer single sentence is skipped."""
    from tokendp.models.training.wikitext import paragraphs, sentences

    def size(text: str) -> int:
        return len(tokenizer(text)["input_ids"])

    out: list[str] = []
    for paragraph in paragraphs(path, unk=lambda: "<unk>"):
        current = ""
        for sentence in sentences(paragraph):
            joined = f"{current} {sentence}".strip()
            if size(joined) <= max_tokens:
                current = joined
                continue
            if current:
                out.append(current)
            current = sentence if size(sentence) <= max_tokens else ""
            if len(out) >= limit:
                return out
        if current:
            out.append(current)
        if len(out) >= limit:
            return out
    return out


@torch.inference_mode()
def validation_perplexity(model: Any, tokenizer: Any, texts: Sequence[str], *, batch: int = 32) -> float:
    """exp(total NLL / tokens predicted) over ``texts``, each scored on its own."""
    from tokendp.jobs.finetune.data import build_records, pad_batch

    records = build_records(texts, tokenizer, max_length=10**9)
    nll, count = 0.0, 0
    for start in range(0, len(records), batch):
        b = pad_batch(records[start:start + batch], 0)  # the pad id is masked out
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits  # (B, L, V)
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2).float(), b["input_ids"][:, 1:], reduction="none")
        keep = b["attention_mask"][:, 1:].float()  # (B, L-1)
        nll += float((ce * keep).sum())
        count += int(keep.sum())
    return math.exp(nll / count)


def score_model(directory: Path | str, valid: Sequence[str], canaries_file: Path, *, exposure: str, samples: int) -> dict[str, Any]:
    """Validation perplexity and canary exposures of the model saved in ``directory`` (or a
    registered name)."""
    from tokendp.eval.exposure import canary_exposures

    backend = load_base(str(directory))
    fmt, canaries = read_canaries(canaries_file)
    found = canary_exposures(backend.model, backend.tokenizer, fmt, canaries, method=exposure, samples=samples)
    return {"perplexity": validation_perplexity(backend.model, backend.tokenizer, valid),
            "exposure": [asdict(e) for e in found],
            "mean_exposure": sum(e.exposure for e in found) / len(found)}


def plan_runs(*, epsilons: Sequence[float], tiers: Sequence[str], base: FinetuneConfig) -> list[tuple[str, FinetuneConfig]]:
    """(name, config) of every run: none, then DP-SGD and ATDP at each tier, at each epsilon."""
    runs = [("none", replace(base, method="none"))]
    for eps in epsilons:
        runs.append((f"dpsgd-eps{eps:g}", replace(base, method="dpsgd", epsilon=eps)))
        runs += [(f"atdp-{tier}-eps{eps:g}", replace(base, method="atdp", epsilon=eps, tier=tier)) for tier in tiers]
    return runs


def run_comparison(data: str | Path, out: str | Path, *, base: str = "tiny", config: FinetuneConfig, records: int = 1000,
                   valid: int = 200, max_tokens: int = 64, epsilons: Sequence[float] = (3.0, 8.0),
                   tiers: Sequence[str] = ("low-entity", "high-contextual"), exposure: str = "sampled", samples: int = 2000,
                   on_run: Callable[[str, bool], None] | None = None) -> list[dict[str, Any]]:
    """Train and score every run (see the module docstring); returns one row per run."""
    data, root = Path(data), Path(out)
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = load_base(base).tokenizer
    train = wikitext_records(data / "train.txt", tokenizer, limit=records, max_tokens=max_tokens)
    held_out = wikitext_records(data / "valid.txt", tokenizer, limit=valid, max_tokens=max_tokens)
    rows = [_base_row(root, base, config, held_out, exposure=exposure, samples=samples)]
    for name, cfg in plan_runs(epsilons=epsilons, tiers=tiers, base=replace(config, max_length=max_tokens + 16)):
        run_dir = root / "runs" / name
        scored = run_dir / EVAL_FILE
        if on_run is not None:
            on_run(name, scored.is_file())
        if not scored.is_file():
            if not (run_dir / REPORT_FILE).is_file():  # trained already: only score it (again)
                finetune(texts=train, out=run_dir, model=base, config=cfg)
            report = json.loads((run_dir / REPORT_FILE).read_text(encoding="utf-8"))
            result = {"report": report, **score_model(run_dir, held_out, run_dir / CANARY_FILE, exposure=exposure, samples=samples)}
            scored.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        result = json.loads(scored.read_text(encoding="utf-8"))
        report = json.loads((run_dir / REPORT_FILE).read_text(encoding="utf-8"))
        rows.append({"run": name, "method": cfg.method, "tier": cfg.tier if cfg.method == "atdp" else None,
                     "epsilon": (report["privacy"] or {}).get("epsilon"), "delta": (report["privacy"] or {}).get("delta"),
                     "perplexity": result["perplexity"], "mean_exposure": result["mean_exposure"],
                     "exposure": result["exposure"], "train_seconds": report["train_seconds"], "steps": report["steps"],
                     "sigma_per_epoch": (report["privacy"] or {}).get("sigma_per_epoch")})
    write_results(rows, root, setting={"base": base, "records": len(train), "valid": len(held_out), "max_tokens": max_tokens,
                                       "exposure": exposure, "samples": samples, "config": asdict(config)})
    return rows


def _base_row(root: Path, base: str, config: FinetuneConfig, held_out: Sequence[str], *, exposure: str,
              samples: int) -> dict[str, Any]:
    """The base model before any fine-tuning, scored on the same canaries (every run plants the
    same ones: they depend on the seed only)."""
    from tokendp.text.canaries import CanaryFormat, make_canaries, write_canaries

    scored = root / "runs" / "base" / EVAL_FILE
    if not scored.is_file():
        scored.parent.mkdir(parents=True, exist_ok=True)
        fmt = CanaryFormat(digits=config.canary_digits)
        canaries = write_canaries(scored.parent / CANARY_FILE, make_canaries(config.canaries, repeats=config.canary_repeats,
                                                                             seed=config.seed, fmt=fmt), fmt)
        result = score_model(base, held_out, canaries, exposure=exposure, samples=samples)
        scored.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    result = json.loads(scored.read_text(encoding="utf-8"))
    return {"run": "base (not fine-tuned)", "method": "base", "tier": None, "epsilon": None, "delta": None,
            "perplexity": result["perplexity"], "mean_exposure": result["mean_exposure"], "exposure": result["exposure"],
            "train_seconds": 0.0, "steps": 0, "sigma_per_epoch": None}


def write_results(rows: list[dict[str, Any]], out: Path, *, setting: dict[str, Any]) -> None:
    """results.json, a markdown table (results.md) and, with matplotlib, exposure.png."""
    (out / "results.json").write_text(json.dumps({"setting": setting, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    lines = ["| run | epsilon | val. perplexity | mean exposure | exposure per canary (low-high) | train s |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        eps = "-" if r["epsilon"] is None else f"{r['epsilon']:.2f}"
        per = ", ".join(f"{e['exposure']:.2f} ({e['low']:.1f}-{e['high']:.1f})" for e in r["exposure"])
        lines.append(f"| {r['run']} | {eps} | {r['perplexity']:.2f} | {r['mean_exposure']:.2f} | {per} | {r['train_seconds']:.0f} |")
    (out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        import matplotlib
    except ImportError:
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    markers = {"base": "s", "none": "*", "dpsgd": "o", "atdp": "^"}
    for r in rows:
        ax.scatter(r["perplexity"], r["mean_exposure"], s=40, marker=markers.get(r["method"], "o"), label=r["run"])
    ax.set_xscale("log")
    ax.set_xlabel("validation perplexity (log scale; lower is better)")
    ax.set_ylabel("mean canary exposure (lower is more private)")
    ax.set_title(f"{setting['base']} on a WikiText-2 subset, canaries of 6 digits")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(out / "exposure.png", dpi=120)
    plt.close(fig)
