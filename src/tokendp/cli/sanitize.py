"""``tokendp sanitize``: rewrite documents with DP-Fusion and print the privacy report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from tokendp.cli._common import (INPUT_FILE, BadInputError, CLIError, decoding_options, diagnostics_option,
                                 emit_diagnostics, engine_options, library_errors, placement_options, ray_options,
                                 renamed, run_corpus, tagger_option, use_threads)
from tokendp.cli._console import console, quiet_libraries
from tokendp.startup import loading
from tokendp.text.taggers import get_tagger, spans_from_json
from tokendp.text.taggers.labels import CHOOSABLE, choose_labels


def _read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise BadInputError(f"cannot read {path}: {type(err).__name__}") from None


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def plain_summary(report: dict[str, Any]) -> str:
    """One sentence for readers who do not speak (epsilon, delta) (docs/concepts.md)."""
    if report["mechanism"] == "original":
        return "In plain words: nothing is protected; the model read the whole document."
    if report["mechanism"] == "public":
        return ("In plain words: the output never saw the hidden spans; only where they are, their lengths and labels, "
                "and the text outside them (docs/concepts.md).")
    return ("In plain words: for each group below, the output shifts the odds of any guess about that group's hidden text "
            "by at most a factor e^epsilon (bar a chance delta); where spans are, their lengths and labels, the text "
            "outside them and anything the tagger missed are not hidden (docs/concepts.md).")


def format_report(report: dict[str, Any]) -> str:
    """A small readable table of a sanitize report, under one plain-language line."""
    lines = [
        "-- privacy report " + "-" * 42,
        plain_summary(report),
        f"mechanism {report['mechanism']}   model {report['model']}"
        + (f"   temperature {report['decoding']['temperature']:g}" if "temperature" in report.get("decoding", {}) else ""),
        f"alpha {report['alpha']:g}   delta {report['delta']:g}   max_new_tokens (T) {report['max_new_tokens']}"
        f"   generated {report['tokens_generated']} ({report['stop_reason']})",
        f"{'group':<14}{'spans':>6}{'tokens':>8}{'beta':>12}{'epsilon':>10}",
    ]
    for g in report["groups"]:
        lines.append(f"{g['label']:<14}{g['n_spans']:>6}{g['n_tokens']:>8}{_fmt(g['beta']):>12}{_fmt(g['epsilon']):>10}")
    if not report["groups"]:
        lines.append("(no sensitive spans found)")
    if report.get("private_labels") is not None:
        lines.append(f"private labels: {', '.join(report['private_labels'])}; spans of other labels were kept "
                     "as plain text and are not protected")
    lines.append(f"guarantee: {report['guarantee']}")
    return "\n".join(lines)


@click.command("sanitize", short_help="Rewrite documents with DP-Fusion, DP per privacy group.")
@renamed("--batch-size", "concurrency")
@click.argument("input_path", metavar="INPUT", type=str)
@click.option("--spans", "spans_path", type=INPUT_FILE,
              help="SPANS.json: a list of {start, end, label} character offsets into INPUT.")
@tagger_option("Tagger used when no spans are given.")
@click.option("--labels", default=None, metavar="LABEL,...",
              help="The private labels, e.g. PERSON,CODE,LOC (default: all). Spans of the other labels are kept "
                   "as plain text, NOT protected. Choose from " + ", ".join(CHOOSABLE) + "; DATETIME names DATE "
                   "and DURATION, DEM names OCCUPATION; your own labels (--spans) are always private.")
@click.option("--model", default="rewriter", show_default=True,
              help="rewriter, smollm2, tiny (see `tokendp model list`), a model directory or a hub id.")
@click.option("--alpha", type=float, default=None,
              help="Renyi order of the bound [default: the best order for --epsilon, from public parameters only; "
                   "2 with --beta]. The report gives the order used.")
@click.option("--beta", type=float, default=None,
              help="Divergence cap per group. One of --epsilon or --beta is required (with --method dp-fusion).")
@click.option("--epsilon", type=float, default=None,
              help="Target epsilon per group. One of --epsilon or --beta is required (with --method dp-fusion).")
@click.option("--delta", type=float, default=1e-5, show_default=True,
              help="Delta of the (epsilon, delta) guarantee, in (0, 1); keep it below 1/(number of people).")
@click.option("--groups", type=click.Choice(["by-label", "single"]), default="by-label", show_default=True,
              help="Privacy groups: one per span label, or all spans in one group.")
@click.option("--max-new-tokens", type=int, default=None, help="T (default: 1.2x the document + 16).")
@click.option("--temperature", type=float, default=0.7, show_default=True,
              help="Sampling temperature (> 0; 0, greedy, only with --method original or public). Public: it does "
                   "not change epsilon; the report gives it. The default was chosen on TAB's tuning half "
                   "(docs/sanitize.md).")
@click.option("--seed", type=int, default=None, help="Seed for reproducible sampling (default: from the OS).")
@decoding_options
@click.option("--method", type=click.Choice(["dp-fusion", "original", "public"]), default="dp-fusion",
              show_default=True, help="original: read everything (no guarantee); public: spans hidden (epsilon 0).")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True,
              help="Documents of a corpus decoded together (throughput only: with --seed the output does not "
                   "depend on it).")
@click.option("--batching", type=click.Choice(["auto", "static", "continuous"]), default="auto", show_default=True,
              help="How a corpus fills its --concurrency slots (local engine): static batches, each decoded until "
                   "its last document ends; continuous, a finished document's slot refilled at once; auto, "
                   "continuous on a GPU and static on a CPU, where it was measured no faster (docs/engines.md).")
@placement_options
@engine_options(default="local",
                engine_help="Where a corpus runs: this process, or a Ray actor pool (the ray extra; docs/engines.md).")
@click.option("--json", "as_json", is_flag=True, help="Print {\"text\", \"report\"} as JSON.")
@click.option("--out", "out_path", type=click.Path(writable=True), default=None,
              help="Write the output here instead of stdout. For a corpus: OUT.jsonl, OUT.parquet or a directory; "
                   "rerunning the same command resumes an interrupted run.")
@diagnostics_option("the mean lambda and realised divergence per group", corpus=True)
@library_errors
def sanitize(input_path: str, spans_path: str | None, tagger: str, labels: str | None, model: str | None,
             alpha: float | None,
             beta: float | None, epsilon: float | None, delta: float, groups: str,
             max_new_tokens: int | None, temperature: float, seed: int | None,
             no_repeat_ngram_size: int, repetition_penalty: float, speculative: bool | None, draft_tokens: int, method: str,
             concurrency: int, batching: str, device: str | None, dtype: str | None, engine: str, address: str | None, workers: int | None,
             gpus_per_worker: float | None, threads: int | None, as_json: bool,
             out_path: str | None, diagnostics: bool) -> None:
    """Rewrite INPUT (.txt, - for stdin, or a corpus: .jsonl or .parquet) with a per-group
    (epsilon, delta) guarantee.

    A corpus holds one {"id", "text", "spans"?} per line or row; results go to --out (or
    stdout) as one {"id", "text", "report"} per document, in input order. With --seed, each
    document's rewrite depends only on the seed and its id, not on --concurrency, its neighbours,
    the engine or the workers.

    One of --epsilon or --beta is required (with --method dp-fusion).
    """
    choose_labels(labels)  # an unknown label fails here, before any model loads
    params = dict(tagger=tagger, labels=labels, model=model, method=method, alpha=alpha, beta=beta, epsilon=epsilon,
                  delta=delta, groups=groups, max_new_tokens=max_new_tokens, temperature=temperature,
                  seed=seed, no_repeat_ngram_size=no_repeat_ngram_size, repetition_penalty=repetition_penalty,
                  speculative=speculative, draft_tokens=draft_tokens, diagnostics=diagnostics)
    params.update({k: v for k, v in (("device", device), ("dtype", dtype)) if v is not None})  # resumes stay valid
    if input_path.endswith((".jsonl", ".parquet")):
        if spans_path:
            raise CLIError("--spans applies to a single document; put \"spans\" in each record instead")
        _sanitize_corpus(input_path, params, out_path, engine, concurrency, threads,
                         ray_options(engine, address, workers, gpus_per_worker), batching)
        return
    if engine != "local" or any(v is not None for v in (address, workers, gpus_per_worker)):
        raise CLIError("--engine and the ray options apply to a corpus (.jsonl or .parquet)")
    text = _read_text(input_path)
    spans = None
    if spans_path:
        spans = spans_from_json(spans_path, text)
    else:
        get_tagger(tagger)  # a missing tagger package fails here, in one line, before any note
    result = _sanitize_one(text, spans, params, threads=threads, as_json=as_json)
    if as_json:
        output = json.dumps(result.to_dict(), indent=2, ensure_ascii=False)
    else:
        output = f"{result.text.strip()}\n\n{format_report(result.report.to_dict())}"
    _emit(output, out_path)
    if result.diagnostics is not None:
        emit_diagnostics([json.dumps({"diagnostics": result.diagnostics}, ensure_ascii=False)])


def _sanitize_one(text: str, spans: list | None, params: dict[str, Any], *, threads: int | None, as_json: bool) -> Any:
    """One document: a line on stderr before anything slow (importing torch, loading the model,
    SmolLM2's one-time conversion with its own bar), then a bar of the tokens released out of T."""
    out = console()
    prepare = {k: v for k, v in params.items() if k not in ("seed", "diagnostics")}
    tagging = "" if spans is not None else f" and tagger {params['tagger']}"
    with out.step(f"loading model {params['model']}{tagging}"), loading():
        quiet_libraries()
        use_threads(threads)
        from tokendp.jobs.sanitize import prepare_sanitize, run_sanitize

        prepared = prepare_sanitize([text], spans=None if spans is None else [spans], **prepare)
    limit = prepared.documents[0].max_new_tokens
    with out.tokens(f"generating up to {limit} tokens", limit, desc="sanitize", as_json=as_json) as on_token:
        return run_sanitize(prepared, seed=params["seed"], on_token=on_token, diagnostics=params["diagnostics"])[0]


def _sanitize_corpus(input_path: str, params: dict[str, Any], out_path: str | None, engine: str, batch_size: int,
                     threads: int | None, ray: dict[str, Any], batching: str = "auto") -> None:
    """A corpus on an engine (:func:`run_corpus`: a first line at once, Ctrl-C exits 130), its bar
    counting documents where the console draws bars."""

    def start(note: Any) -> Any:
        from tokendp.engines.runner import sanitize_corpus

        quiet_libraries()
        return sanitize_corpus(input_path, params, out=out_path, engine=engine, batch_size=batch_size, threads=threads,
                               progress=console().bars(), batching=batching if engine == "local" else "static",
                               note=note, **ray)

    run_corpus("sanitize", input_path, out_path, start)


def _emit(output: str, out_path: str | None) -> None:
    if out_path is None:
        click.echo(output)
    else:
        Path(out_path).write_text(output + "\n", encoding="utf-8")
