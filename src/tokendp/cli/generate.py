"""``tokendp generate``: answer a prompt from trusted context and untrusted chunks, with DP-Fusion per group."""

from __future__ import annotations

import json
from typing import Any

import click

from tokendp.cli._common import (INPUT_FILE, CLIError, accounting_options, decoding_options, diagnostics_option, emit_diagnostics,
                                 library_errors, placement_options, tagger_option, threads_option, use_threads)
from tokendp.cli._console import console, quiet_libraries
from tokendp.cli.sanitize import _emit, format_report
from tokendp.startup import loading
from tokendp.text.prompts import MAX_UNTRUSTED_TOKENS


def format_generate_report(report: dict[str, Any]) -> str:
    """sanitize's report table, with one line per untrusted chunk after the span groups."""
    chunks = [{"label": u["name"], "n_spans": "-", "n_tokens": "-", "beta": u["beta"], "epsilon": u["epsilon"]}
              for u in report["untrusted"]]
    text = format_report({**report, "groups": [*report["groups"], *chunks]})
    if chunks:
        text += (f"\nuntrusted chunks: each is read by its own row only, up to {report['max_untrusted_tokens']} tokens "
                 f"(--max-untrusted-tokens; the rest is cut); every other row reads {report['stand_in']!r}")
    return text


@click.command("generate", short_help="Answer a prompt from private and untrusted context (DP-Fusion).")
@click.option("--prompt", required=True, help="The question or task (public: it is not protected).")
@click.option("--context", "contexts", multiple=True, type=click.Path(dir_okay=False),
              help="A trusted document (UTF-8 text); repeat for several. Its spans are protected, one group per label.")
@click.option("--spans", "spans_paths", multiple=True, type=INPUT_FILE,
              help="SPANS.json of a --context ({start, end, label} character offsets); give one per --context, "
                   "in the same order, or none to run --tagger.")
@tagger_option("Tagger for --context documents without --spans.")
@click.option("--untrusted", "untrusted", multiple=True, type=click.Path(dir_okay=False),
              help="An untrusted chunk (retrieved page, tool output; UTF-8 text); repeat for several. Each is its own "
                   "group: only its row reads it, every other row reads --stand-in.")
@click.option("--model", default="smollm2", show_default=True,
              help="smollm2, rewriter, tiny (see `tokendp model list`), a model directory or a hub id.")
@click.option("--epsilon", type=float, default=None,
              help="Target epsilon per group and per untrusted chunk. One of --epsilon or --beta is required "
                   "(with --method dp-fusion).")
@click.option("--beta", type=float, default=None,
              help="Divergence cap per group. One of --epsilon or --beta is required (with --method dp-fusion).")
@click.option("--alpha", type=float, default=None,
              help="Renyi order of the bound [default: the best order for --epsilon, from public parameters only; "
                   "2 with --beta]. The report gives the order used.")
@accounting_options
@click.option("--delta", type=float, default=1e-5, show_default=True,
              help="Delta of the (epsilon, delta) guarantee, in (0, 1); keep it below 1/(number of people).")
@click.option("--groups", type=click.Choice(["by-label", "single"]), default="by-label", show_default=True,
              help="Span groups of the --context documents (untrusted chunks are always one group each).")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=128, show_default=True,
              help="T, fixed up front and counted in full by every epsilon.")
@click.option("--temperature", type=float, default=0.7, show_default=True,
              help="Sampling temperature (> 0; 0, greedy, only with --method original or public). Below the 1.0 of "
                   "synthesize and predict for sharper answers; public: it does not change epsilon; the report "
                   "gives it.")
@click.option("--seed", type=int, default=None, help="Seed for reproducible sampling (default: from the OS).")
@click.option("--stand-in", default="[document withheld]", show_default=True,
              help="What every row but its own reads in place of an untrusted chunk.")
@click.option("--max-untrusted-tokens", type=click.IntRange(min=1), default=None,
              help="Tokens of each --untrusted chunk the model reads (the rest is cut, silently). Every row is laid "
                   "out this long, so that a chunk's length cannot change how the other rows are computed; it must "
                   f"hold the --stand-in [default: {MAX_UNTRUSTED_TOKENS}, about 2,000 characters, or what the "
                   "model's context leaves beside the public row and --max-new-tokens]. Longer chunks: raise it, e.g. "
                   "--max-untrusted-tokens 1024 (public, like T; time and memory grow with it: docs/generate.md).")
@click.option("--question", type=click.Choice(["last", "first", "both"]), default="last", show_default=True,
              help="Where the prompt goes: after the documents, before them (then shared by every row), or both.")
@click.option("--method", type=click.Choice(["dp-fusion", "original", "public"]), default="dp-fusion",
              show_default=True, help="original: read everything (no guarantee); public: spans hidden and "
                                      "untrusted chunks withheld (epsilon 0).")
@decoding_options
@placement_options
@threads_option
@click.option("--json", "as_json", is_flag=True, help="Print {\"text\", \"report\"} as JSON.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the output here instead of stdout.")
@diagnostics_option("the mean lambda and realised divergence per group and per untrusted chunk")
@library_errors
def generate(prompt: str, contexts: tuple[str, ...], spans_paths: tuple[str, ...], tagger: str,
             untrusted: tuple[str, ...], model: str, epsilon: float | None, beta: float | None, alpha: float | None,
             accounting: str, pace: float, delta: float, groups: str, max_new_tokens: int, temperature: float, seed: int | None, stand_in: str,
             max_untrusted_tokens: int | None, question: str, method: str, no_repeat_ngram_size: int, repetition_penalty: float,
             stop_at_repeated_line: bool, speculative: bool | None, draft_tokens: int, device: str | None, dtype: str | None,
             threads: int | None, as_json: bool,
             out_path: str | None, diagnostics: bool) -> None:
    """Answer --prompt from --context documents (their spans protected, one group per label) and
    --untrusted chunks (one group each), with an (epsilon, delta) guarantee per group.

    For an untrusted chunk the guarantee reads: whatever the chunk says, the probability of any
    answer is at most e^epsilon times its probability with the chunk withheld, plus delta. It
    does not cover the prompt or the text of the --context documents outside their spans.

    One of --epsilon or --beta is required (with --method dp-fusion). --accounting filter
    covers span groups and needs --epsilon; it refuses --untrusted chunks.
    """
    if spans_paths and len(spans_paths) != len(contexts):
        raise CLIError(f"got {len(spans_paths)} --spans for {len(contexts)} --context; give one per --context, "
                       "in the same order (or none, to run --tagger)")
    from tokendp.text.documents import read_text_file
    from tokendp.text.taggers import get_tagger, spans_from_json

    from tokendp.jobs.config import check_reachable
    from tokendp.params import check_accounting, check_params, check_untrusted_accounting

    check_params(method, alpha, delta, temperature, beta, epsilon)  # before anything is read or loaded
    check_accounting(accounting, pace, method, beta)
    check_reachable(method, accounting, alpha, delta, epsilon)
    check_untrusted_accounting(accounting, method, len(untrusted))
    texts = [read_text_file(p) for p in contexts]
    chunks = [read_text_file(p) for p in untrusted]
    spans = [spans_from_json(p, t) for p, t in zip(spans_paths, texts)] if spans_paths else None
    tagging = f" and tagger {tagger}" if texts and spans is None else ""
    if tagging:
        get_tagger(tagger)  # a missing tagger package fails here, in one line, before any note
    out = console()
    with out.step(f"loading model {model}{tagging}"), loading():
        quiet_libraries()
        use_threads(threads)
        from tokendp.jobs.generate import prepare_generate, run_generate

        prepared = prepare_generate(
            [prompt], context=[texts or None], spans=[spans], untrusted=[chunks or None], tagger=tagger, model=model,
            method=method, alpha=alpha, beta=beta, epsilon=epsilon, delta=delta, groups=groups,
            max_new_tokens=max_new_tokens, temperature=temperature, stand_in=stand_in,
            max_untrusted_tokens=max_untrusted_tokens, question=question, no_repeat_ngram_size=no_repeat_ngram_size,
            repetition_penalty=repetition_penalty, stop_at_repeated_line=stop_at_repeated_line, speculative=speculative,
            draft_tokens=draft_tokens, device=device, dtype=dtype, accounting=accounting, pace=pace)
    with out.tokens(f"generating up to {max_new_tokens} tokens", max_new_tokens, desc="generate",
                    as_json=as_json) as on_token:
        result = run_generate(prepared, seed=seed, on_token=on_token, diagnostics=diagnostics)[0]
    if as_json:
        output = json.dumps(result.to_dict(), indent=2, ensure_ascii=False)
    else:
        output = f"{result.text.strip()}\n\n{format_generate_report(result.report.to_dict())}"
    _emit(output, out_path)
    if result.diagnostics is not None:
        emit_diagnostics([json.dumps({"diagnostics": result.diagnostics}, ensure_ascii=False)])
