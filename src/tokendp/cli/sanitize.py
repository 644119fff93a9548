"""``tokendp sanitize``: rewrite documents with DP-Fusion and print the privacy report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from tokendp.cli._common import CLIError, decoding_options, library_errors


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    records = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                raise CLIError(f"{path}, line {n}: not valid JSON") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
                raise CLIError(f"{path}, line {n}: expected an object with a \"text\" string "
                               "(and optionally \"id\" and \"spans\")")
            rec.setdefault("id", n)
            records.append(rec)
    if not records:
        raise CLIError(f"{path} holds no documents")
    return records


def _read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CLIError(f"cannot read {path}: {type(err).__name__}") from None


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def format_report(report: dict[str, Any]) -> str:
    """A small readable table of a sanitize report."""
    lines = [
        "-- privacy report " + "-" * 42,
        f"mechanism {report['mechanism']}   model {report['model']}",
        f"alpha {report['alpha']:g}   delta {report['delta']:g}   max_new_tokens (T) {report['max_new_tokens']}"
        f"   generated {report['tokens_generated']} ({report['stop_reason']})",
        f"{'group':<14}{'spans':>6}{'tokens':>8}{'beta':>12}{'epsilon':>10}",
    ]
    for g in report["groups"]:
        lines.append(f"{g['label']:<14}{g['n_spans']:>6}{g['n_tokens']:>8}{_fmt(g['beta']):>12}{_fmt(g['epsilon']):>10}")
    if not report["groups"]:
        lines.append("(no sensitive spans found)")
    lines.append(f"guarantee: {report['guarantee']}")
    diag = report.get("diagnostics") or {}
    if "mean_lambda" in diag:
        lam = ", ".join(f"{k} {v:.3g}" for k, v in diag["mean_lambda"].items())
        lines.append(f"diagnostics (not a guarantee): mean lambda {lam}")
    return "\n".join(lines)


@click.command("sanitize")
@click.argument("input_path", metavar="INPUT", type=str)
@click.option("--spans", "spans_path", type=click.Path(exists=True, dir_okay=False),
              help="SPANS.json: a list of {start, end, label} character offsets into INPUT.")
@click.option("--tagger", default="auto", show_default=True, help="Tagger used when no spans are given.")
@click.option("--model", default="rewriter", show_default=True,
              help="rewriter, smollm2, tiny (see `tokendp model list`), a model directory or a hub id.")
@click.option("--alpha", type=float, default=None,
              help="Renyi order of the bound (default: the best order for --epsilon; 2 with --beta).")
@click.option("--beta", type=float, default=None, help="Divergence cap per group (or give --epsilon).")
@click.option("--epsilon", type=float, default=None, help="Target epsilon per group (or give --beta).")
@click.option("--delta", type=float, default=1e-5, show_default=True)
@click.option("--groups", type=click.Choice(["by-label", "single"]), default="by-label", show_default=True)
@click.option("--max-new-tokens", type=int, default=None, help="T (default: 1.2x the document + 16).")
@click.option("--temperature", type=float, default=1.0, show_default=True)
@click.option("--seed", type=int, default=None, help="Seed for reproducible sampling (default: from the OS).")
@decoding_options
@click.option("--method", type=click.Choice(["dp-fusion", "original", "public"]), default="dp-fusion",
              show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True,
              help="Documents per batch (JSONL input).")
@click.option("--json", "as_json", is_flag=True, help="Print {\"text\", \"report\"} as JSON.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the output here instead of stdout.")
@library_errors
def sanitize(input_path: str, spans_path: str | None, tagger: str, model: str | None, alpha: float | None,
             beta: float | None, epsilon: float | None, delta: float, groups: str,
             max_new_tokens: int | None, temperature: float, seed: int | None,
             no_repeat_ngram_size: int, repetition_penalty: float, speculative: bool | None, draft_tokens: int, method: str,
             batch_size: int, as_json: bool, out_path: str | None) -> None:
    """Rewrite INPUT (.txt, .jsonl or - for stdin) with a per-group (epsilon, delta) guarantee.

    JSONL input holds one {"id", "text", "spans"?} per line; results go to --out (or stdout)
    as one {"id", "text", "report"} per line. With --seed, each document's rewrite depends only
    on the seed and its id, not on --batch-size or its neighbours.
    """
    from transformers.utils import logging as hf_logging

    from tokendp.sanitize import sanitize_batch

    hf_logging.disable_progress_bar()  # a CLI run prints the rewrite and the report, not load bars
    hf_logging.set_verbosity_error()
    params = dict(tagger=tagger, model=model, method=method, alpha=alpha, beta=beta, epsilon=epsilon,
                  delta=delta, groups=groups, max_new_tokens=max_new_tokens, temperature=temperature,
                  seed=seed, no_repeat_ngram_size=no_repeat_ngram_size, repetition_penalty=repetition_penalty,
                  speculative=speculative, draft_tokens=draft_tokens)
    if input_path.endswith(".jsonl"):
        if spans_path:
            raise CLIError("--spans applies to a single document; put \"spans\" in each JSONL line instead")
        _run_jsonl(_read_jsonl(input_path), params, batch_size, out_path)
        return
    text = _read_text(input_path)
    spans = None
    if spans_path:
        from tokendp.text.taggers import spans_from_json

        spans = spans_from_json(spans_path, text)
    result = sanitize_batch([text], spans=None if spans is None else [spans], **params)[0]
    if as_json:
        output = json.dumps(result.to_dict(), indent=2, ensure_ascii=False)
    else:
        output = f"{result.text.strip()}\n\n{format_report(result.report.to_dict())}"
    _emit(output, out_path)


def _run_jsonl(records: list[dict[str, Any]], params: dict[str, Any], batch_size: int,
               out_path: str | None) -> None:
    from tqdm import tqdm

    from tokendp.generation import document_seed
    from tokendp.sanitize import sanitize_batch
    from tokendp.text.taggers import spans_from_json

    lines = []
    with tqdm(total=len(records), file=sys.stderr, unit="doc", desc="sanitize") as bar:
        for start in range(0, len(records), batch_size):
            batch = records[start:start + batch_size]
            spans = [spans_from_json(r["spans"], r["text"]) if r.get("spans") is not None else None
                     for r in batch]
            seeds = None if params["seed"] is None else [document_seed(params["seed"], r["id"]) for r in batch]
            results = sanitize_batch([r["text"] for r in batch], spans=spans, **{**params, "seed": seeds})
            lines += [json.dumps({"id": r["id"], **res.to_dict()}, ensure_ascii=False)
                      for r, res in zip(batch, results)]
            bar.update(len(batch))
    _emit("\n".join(lines), out_path)


def _emit(output: str, out_path: str | None) -> None:
    if out_path is None:
        click.echo(output)
    else:
        Path(out_path).write_text(output + "\n", encoding="utf-8")
