"""`tokendp eval sanitize`: perplexity, attack success and epsilon of every method on TAB."""

from __future__ import annotations

from pathlib import Path

import click

from tokendp._optional import require
from tokendp.cli._common import finish_eval, floats, library_errors
from tokendp.cli._console import console
from tokendp.errors import InvalidParameterError


def _new_tokens(ctx: click.Context, param: click.Parameter, value: str) -> int | None:
    if value == "auto":
        return None
    try:
        tokens = int(value)
    except ValueError:
        tokens = 0
    if tokens < 1:
        raise click.BadParameter(f"takes an integer >= 1 or 'auto', got {value!r}")
    return tokens


@click.command("sanitize", short_help="Compare sanitization methods: perplexity, token recovery, epsilon.")
@click.option("--data", "data_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="TAB data folder (texts.json, gold_spans.json).")
@click.option("--candidates", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Attack candidate set (JSON: entity type -> strings), e.g. candidate_set_100.json.")
@click.option("--split", type=click.Choice(["report", "tune", "all"]), default="report", show_default=True)
@click.option("--methods", default="original,public,scrub,dp-decoding,dp-prompt,dp-fusion", show_default=True,
              help="Comma-separated methods to compare.")
@click.option("--epsilon", "epsilons", default="10,50", show_default=True,
              help="Target epsilons (total at delta over max new tokens) the private methods are calibrated to.")
@click.option("--filter-epsilon", "filter_epsilons", default=None,
              help="Target epsilons of dp-fusion-filter, when not --epsilon's (e.g. half of them: the filter "
                   "at epsilon/2 against the fixed accounting at epsilon).")
@click.option("--paper-settings", is_flag=True,
              help="Also run the papers' settings (DP-Decoding lambda 0.9; DP-Prompt w 50, tau 1.75; "
                   "DP-Fusion alpha*beta 0.01 and 0.1), labelled with the epsilon they certify.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Evaluate only the first N documents of the split (with --spread: N spread over lengths).")
@click.option("--spread", is_flag=True,
              help="Take --limit documents at evenly spaced ranks of length, shortest to longest, instead of "
                   "the first ones (a rule that reads only the documents' lengths).")
@click.option("--ids", default=None, help="Comma-separated document ids of the split to evaluate, in this order.")
@click.option("--max-chars", type=click.IntRange(min=0), default=1200, show_default=True,
              help="Truncate each document at a span-safe boundary at most this long; 0: whole documents.")
@click.option("--max-new-tokens", default="400", show_default=True, callback=_new_tokens,
              help="T: tokens generated per release, counted in full by every epsilon. 'auto': each "
                   "document's own, sanitize's default (1.2x its tokens + 16), generated alone and "
                   "every setting calibrated to it, as `tokendp sanitize` would certify it.")
@click.option("--delta", type=float, default=1e-5, show_default=True)
@click.option("--min-k", type=float, default=0.2, show_default=True, help="k of the Min-K% attack.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--match-lengths", is_flag=True,
              help="Draw each attack candidate's strings among those with the true form's token count. "
                   "Span lengths are public (one placeholder per token); this measures what a method "
                   "leaks about span content rather than layout.")
@click.option("--batch-docs", type=int, default=20, show_default=True,
              help="Documents generated together (also the unit of the sampling seeds).")
@click.option("--threads", type=int, default=1, show_default=True,
              help="Torch CPU threads. 1 is fastest on a shared, busy CPU (threads spin waiting for each "
                   "other); raise it on an idle machine.")
@click.option("--model", default="rewriter", show_default=True, help="rewriter, smollm2, tiny or a model directory.")
@click.option("--device", default=None, help="torch device [default: cuda if available, else cpu].")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None,
              help="Model weights' dtype [default: float32 on CPU, bfloat16 on GPU].")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output folder (results, plots and the resume cache).")
@click.option("--no-plots", is_flag=True,
              help="Write results.json/.csv/.md without the PNG plots (then matplotlib is not needed).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@library_errors
def eval_sanitize(data_dir: Path, candidates: Path, split: str, methods: str, epsilons: str,
                  filter_epsilons: str | None, paper_settings: bool,
                  limit: int | None, spread: bool, ids: str | None, max_chars: int, max_new_tokens: int | None,
                  delta: float, min_k: float, seed: int,
                  match_lengths: bool, batch_docs: int, threads: int, model: str | None, device: str | None,
                  dtype: str | None, out_dir: Path, no_plots: bool,
                  as_json: bool) -> None:
    """Compare sanitization methods: teacher-forced perplexity of the original document, LOSS and
    Min-K% success in the 5-candidate token-recovery game (PERSON, CODE, DATETIME), and the
    certified epsilon. A killed run resumes from OUT's cache.
    """
    if not no_plots:  # checked before any work: a missing extra must not cost a whole evaluation
        require("matplotlib", "eval", "tokendp eval sanitize", why="for its plots (or pass --no-plots)")
    import torch

    from tokendp.eval.report import markdown_table, write_results
    from tokendp.eval.sanitization import EvalConfig, evaluate_sanitization
    config = EvalConfig(data_dir=str(data_dir), candidates=str(candidates), model=model,
                        methods=tuple(m.strip() for m in methods.split(",") if m.strip()),
                        epsilons=floats(epsilons, "--epsilon"),
                        filter_epsilons=floats(filter_epsilons, "--filter-epsilon"),
                        paper_settings=paper_settings, split=split, limit=limit,
                        ids=None if ids is None else tuple(i.strip() for i in ids.split(",") if i.strip()),
                        spread=spread, max_chars=max_chars or None, max_new_tokens=max_new_tokens, delta=delta,
                        min_k=min_k, seed=seed, batch_docs=batch_docs, match_lengths=match_lengths, device=device,
                        dtype=dtype)
    if threads < 1:
        raise InvalidParameterError(f"--threads must be >= 1, got {threads}")
    torch.set_num_threads(threads)
    rows = evaluate_sanitization(config, out_dir, progress=console().bars(as_json=as_json))
    finish_eval("sanitize", rows, write_results, markdown_table, out_dir=out_dir, plots=not no_plots, as_json=as_json)
