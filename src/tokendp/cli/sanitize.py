"""``tokendp sanitize``: rewrite documents with DP-Fusion and print the privacy report."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from tokendp.cli._common import (INPUT_FILE, CLIError, accounting_options, decoding_options, diagnostics_option,
                                 emit_diagnostics, engine_options, library_errors, placement_options, ray_options,
                                 renamed, run_corpus, tagger_option, use_threads)
from tokendp.cli._console import console, quiet_libraries
from tokendp.models.registry import context_length
from tokendp.params import check_new_tokens_fit
from tokendp.startup import loading
from tokendp.text.documents import read_text_input
from tokendp.text.taggers import get_tagger, spans_from_json
from tokendp.jobs.config import SanitizeConfig
from tokendp.text.taggers.labels import CHOOSABLE


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _fmt_down(x: float | None) -> str:
    """``x`` to 4 significant digits, rounded down: a beta retyped from the report never
    certifies more than the report says."""
    if x is None:
        return "-"
    if x <= 0:
        return f"{x:g}"
    text = f"{x:.4g}"
    digits = 3 - math.floor(math.log10(x))  # decimals that keep 4 significant digits
    while float(text) > x:
        text = f"{math.floor(x * 10 ** digits) / 10 ** digits:.{max(digits, 0)}f}"
        digits += 1
    return text


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
    filtered = report.get("accounting") == "filter"
    lines = [
        "-- privacy report " + "-" * 42,
        plain_summary(report),
        f"mechanism {report['mechanism']}   model {report['model']}"
        + (f"   temperature {report['decoding']['temperature']:g}" if "temperature" in report.get("decoding", {}) else ""),
        ("" if report["alpha"] is None else f"alpha {report['alpha']:g}   ")
        + f"delta {report['delta']:g}   max_new_tokens (T) {report['max_new_tokens']}"
        f"   generated {report['tokens_generated']} ({report['stop_reason']})"
        + ("   accounting filter (beta: the per-step cap; budget: B at alpha)" if filtered else ""),
        f"{'group':<14}{'spans':>6}{'tokens':>8}{'beta':>12}{'epsilon':>10}" + (f"{'budget':>10}" if filtered else ""),
    ]
    for g in report["groups"]:
        lines.append(f"{g['label']:<14}{g['n_spans']:>6}{g['n_tokens']:>8}{_fmt_down(g['beta']):>12}"
                     f"{_fmt(g['epsilon']):>10}" + (f"{_fmt_down(g.get('budget')):>10}" if filtered else ""))
    if not report["groups"]:
        lines.append("(no sensitive spans found)")
    if report.get("private_labels") is not None:
        lines.append(f"protected labels (--labels): {', '.join(report['private_labels'])}")
    if report.get("kept_labels"):
        kept = ", ".join(f"{label} ({n} span{'s' if n != 1 else ''})" for label, n in report["kept_labels"].items())
        lines.append(f"kept as plain text, NOT protected: {kept}")
    if "spans_source" in report:
        lines.append(f"spans: {'given (--spans)' if report['spans_source'] == 'given' else report['spans_source']}")
    if report.get("incomplete"):
        lines.append(f"incomplete: {incomplete_note(report['tokens_generated'], None, report['stop_reason'])}")
    lines.append(f"guarantee: {report['guarantee']}")
    return "\n".join(lines)


@click.command("sanitize", short_help="Rewrite documents with DP-Fusion, DP per privacy group.")
@renamed("--batch-size", "concurrency")
@click.argument("input_path", metavar="INPUT", type=str)
@click.option("--spans", "spans_path", type=INPUT_FILE,
              help="SPANS.json: a list of {start, end, label} character offsets into INPUT.")
@tagger_option("Tagger used when no spans are given.")
@click.option("--labels", default=None, metavar="LABEL,...",
              help="The labels to protect, e.g. PERSON,CODE,DATETIME (default: every label not kept). With "
                   "--labels, every label in the input must be named here or in --keep, or the run is refused "
                   "before it starts. From " + ", ".join(CHOOSABLE) + " or your spans' own labels; DATETIME covers "
                   "DATE and DURATION, DEM covers OCCUPATION.")
@click.option("--keep", default=None, metavar="LABEL,...",
              help="Labels released as plain text, NOT protected (e.g. DURATION keeps \"six weeks\"); the report "
                   "counts their spans.")
@click.option("--model", default="rewriter", show_default=True,
              help="rewriter, smollm2, tiny (see `tokendp model list`), a model directory or a hub id.")
@click.option("--alpha", type=float, default=None,
              help="Renyi order of the bound [default: the best order for --epsilon, from public parameters only; "
                   "2 with --beta]. The report gives the order used.")
@click.option("--beta", type=float, default=None,
              help="Divergence cap per group. One of --epsilon or --beta is required (with --method dp-fusion).")
@click.option("--epsilon", type=float, default=None,
              help="Target epsilon per group. One of --epsilon or --beta is required (with --method dp-fusion).")
@accounting_options
@click.option("--passage-tokens", type=click.IntRange(min=16), default=320, show_default=True,
              help="A document of more tokens is rewritten passage by passage (cut at line breaks outside the spans, "
                   "each passage reading the previous one and its rewrite), with one certificate for the whole "
                   "document (docs/sanitize.md, \"Long documents\").")
@click.option("--no-passages", is_flag=True, help="Rewrite every document in one passage, which must fit the model.")
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
def sanitize(input_path: str, spans_path: str | None, tagger: str, labels: str | None, keep: str | None,
             model: str | None,
             alpha: float | None, beta: float | None, epsilon: float | None, accounting: str, pace: float,
             passage_tokens: int, no_passages: bool, delta: float, groups: str,
             max_new_tokens: int | None, temperature: float, seed: int | None,
             no_repeat_ngram_size: int, repetition_penalty: float, stop_at_repeated_line: bool, speculative: bool | None,
             draft_tokens: int, method: str,
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
    params = dict(tagger=tagger, labels=labels, keep=keep, model=model, method=method, alpha=alpha, beta=beta,
                  epsilon=epsilon, accounting=accounting, pace=pace,
                  passage_tokens=None if no_passages else passage_tokens, delta=delta, groups=groups,
                  max_new_tokens=max_new_tokens, temperature=temperature,
                  seed=seed, no_repeat_ngram_size=no_repeat_ngram_size, repetition_penalty=repetition_penalty,
                  stop_at_repeated_line=stop_at_repeated_line, speculative=speculative, draft_tokens=draft_tokens, diagnostics=diagnostics)
    config = SanitizeConfig.of(params)  # every parameter is checked here, before anything loads
    params.update({k: v for k, v in (("device", device), ("dtype", dtype)) if v is not None})  # resumes stay valid
    if input_path.endswith((".jsonl", ".parquet")):
        if spans_path:
            raise CLIError("--spans applies to a single document; put \"spans\" in each record instead")
        _sanitize_corpus(input_path, params, out_path, engine, concurrency, threads,
                         ray_options(engine, address, workers, gpus_per_worker), batching)
        return
    if engine != "local" or any(v is not None for v in (address, workers, gpus_per_worker)):
        raise CLIError("--engine and the ray options apply to a corpus (.jsonl or .parquet)")
    text = read_text_input(input_path)
    check_new_tokens_fit(max_new_tokens, context=context_length(model), text=text, passage_tokens=params["passage_tokens"])
    spans = None
    if spans_path:
        spans = spans_from_json(spans_path, text)
        config.label_choice.check([s.label for s in spans])  # before the model loads
    else:
        config.label_choice.check_names(())
        get_tagger(tagger)  # a missing tagger package fails here, in one line, before any note
    result = _sanitize_one(text, spans, config, params, threads=threads, as_json=as_json)
    if as_json:
        output = json.dumps(result.to_dict(), indent=2, ensure_ascii=False)
    else:
        output = f"{result.text.strip()}\n\n{format_report(result.report.to_dict())}"
    _emit(output, out_path)
    if result.diagnostics is not None:
        emit_diagnostics([json.dumps({"diagnostics": result.diagnostics}, ensure_ascii=False)])


def _sanitize_one(text: str, spans: list | None, config: SanitizeConfig, params: dict[str, Any], *,
                  threads: int | None, as_json: bool) -> Any:
    """One document: a line on stderr before anything slow (importing torch, loading the model,
    SmolLM2's one-time conversion with its own bar), then a bar of the tokens released out of T
    and how many passages a long document is rewritten in (public: planned from the public row)."""
    out = console()
    tagging = "" if spans is not None else f" and tagger {params['tagger']}"
    with out.step(f"loading model {params['model']}{tagging}"), loading():
        quiet_libraries()
        use_threads(threads)
        from tokendp.jobs.sanitize import prepare_sanitize, run_sanitize

        prepared = prepare_sanitize([text], spans=None if spans is None else [spans], config=config,
                                    tagger=params["tagger"], model=params["model"], device=params.get("device"),
                                    dtype=params.get("dtype"))
    limit, long = prepared.documents[0].max_new_tokens, prepared.documents[0].long
    passages = "" if long is None else f" in {len(long.passages)} passages"
    with out.tokens(f"generating up to {limit} tokens{passages}", limit, desc="sanitize",
                    as_json=as_json) as on_token:
        result = run_sanitize(prepared, seed=params["seed"], on_token=on_token, diagnostics=params["diagnostics"],
                              on_passage=on_token.on_passage)[0]
        on_token.settle(result.report.tokens_generated)
    if result.report.incomplete:
        out.warn(incomplete_note(result.report.tokens_generated, prepared.documents[0].context.document_tokens,
                                 result.report.stop_reason))
    return result


def incomplete_note(generated: int, document_tokens: int | None, stop_reason: str) -> str:
    """The warning for a rewrite that may not cover its document (public facts only)."""
    why = "was cut at T (max_new_tokens)" if stop_reason == "max_new_tokens" else "ended early"
    size = "" if document_tokens is None else f" for a document of {document_tokens}"
    return (f"the rewrite {why}: {generated} tokens{size}; it may not cover the whole document "
            "(docs/sanitize.md, \"Long documents\")")


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
