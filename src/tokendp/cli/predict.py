"""`tokendp predict`: answer prompts with PMixED over an ensemble of LoRA adapters.

A thin shell over :func:`tokendp.jobs.predict.predict`; every number comes from the library.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from tokendp.cli._common import (INPUT_DIR, INPUT_FILE, BadInputError, CLIError, diagnostics_option, echo_json,
                                 emit_diagnostics, library_errors, placement_options, renamed, threads_option, use_threads)
from tokendp.cli._exit import BudgetExhaustedError
from tokendp.cli._console import console, quiet_libraries
from tokendp.text.documents import jsonl_records


def read_prompts(path: Path) -> list[str]:
    """The "prompt" (or "text") field of every non-blank line of a JSONL file (messages carry line numbers only)."""
    prompts = []
    for where, record in jsonl_records(path):
        text = record.get("prompt", record.get("text"))
        if not isinstance(text, str):
            raise BadInputError(f"{where} has no string field \"prompt\" (or \"text\")")
        prompts.append(text)
    if not prompts:
        raise BadInputError(f"{path} holds no prompts; write one {{\"prompt\": ...}} per line")
    return prompts


@click.command("predict", short_help="Answer prompts with PMixED, (epsilon, delta)-DP per shard.")
@renamed("--base", "model")
@renamed("--ensemble-sample-rate", "sample_rate")
@click.option("--ensemble", "ensemble_dir", type=INPUT_DIR, required=True,
              help="Ensemble directory written by `tokendp ensemble train` (manifest.json + one adapter per shard).")
@click.option("--prompt", default=None, help="One prompt to continue.")
@click.option("--prompts", "prompts_path", type=INPUT_FILE, default=None,
              help="JSONL file of prompts, one {\"prompt\": ...} per line.")
@click.option("--epsilon", type=float, default=None,
              help="Epsilon per shard for all T tokens (beta is calibrated). One of --epsilon or --beta is required.")
@click.option("--beta", type=float, default=None,
              help="Divergence cap per member instead of --epsilon. One of --epsilon or --beta is required.")
@click.option("--delta", type=float, required=True, help="Delta of the guarantee, in (0, 1).")
@click.option("--queries", type=int, required=True,
              help="T: total tokens predicted over all prompts, fixed up front; generation stops when they are spent.")
@click.option("--sample-rate", type=float, default=1.0, show_default=True,
              help="q: probability that each member joins a token's sample (Poisson).")
@click.option("--alpha", type=float, default=None,
              help="Renyi order of the mollifier and the accounting [default: with --epsilon the best order, chosen "
                   "from public parameters only (epsilon, delta, N, q, T); 3 with --beta]. The report gives it.")
@click.option("--max-new-tokens", type=int, default=None, help="Most tokens per prompt [default: what is left of T].")
@click.option("--temperature", type=float, default=1.0, show_default=True,
              help="Sampling temperature (> 0). Public: it does not change epsilon; the report gives it.")
@click.option("--seed", type=int, default=None, help="Seed for reproducible sampling [default: seeded from the OS].")
@click.option("--model", default=None,
              help="Base model: a registered name, a directory or a cached hub id [default: the manifest's, the one "
                   "the adapters were trained on].")
@placement_options
@threads_option
@click.option("--json", "as_json", is_flag=True, help="Print {\"answers\", \"report\", \"stopped\"} as JSON.")
@diagnostics_option("the mean size of the sampled set and the mean lambda")
@library_errors
def predict(ensemble_dir, prompt, prompts_path, epsilon, beta, delta, queries, sample_rate, alpha, max_new_tokens,
            temperature, seed, model, device, dtype, threads, as_json, diagnostics) -> None:
    """Continue prompts with PMixED: (epsilon, delta)-DP per shard of the ensemble's private corpus.

    One of --epsilon or --beta is required. When the budget of T tokens runs out before every
    prompt is answered, the answers so far are printed and the command exits with code 5.
    """
    from tokendp._optional import require

    require("peft", "ensemble", "tokendp predict", why="to read LoRA adapters")
    if (prompt is None) == (prompts_path is None):
        raise CLIError("give exactly one of --prompt TEXT or --prompts FILE.jsonl")
    if (epsilon is None) == (beta is None):
        raise CLIError("give exactly one of --epsilon (per shard) or --beta")
    prompts = [prompt] if prompt is not None else read_prompts(prompts_path)
    out = console()
    message = f"loading ensemble {ensemble_dir}, then predicting up to {queries} tokens"
    with out.tokens(message, queries, desc="predict", as_json=as_json) as on_token:
        quiet_libraries()
        use_threads(threads)
        from tokendp.jobs.predict import predict as run

        result = run(prompts, ensemble=ensemble_dir, queries=queries, delta=delta, epsilon=epsilon, beta=beta,
                     alpha=alpha, sample_rate=sample_rate, temperature=temperature, max_new_tokens=max_new_tokens,
                     seed=seed, model=model, device=device, dtype=dtype, diagnostics=diagnostics,
                     on_token=on_token)
    if as_json:
        echo_json(result.to_dict())
    else:
        rep = result.report
        click.echo(f"# pmixed: epsilon {rep.epsilon:.4g} per shard at delta {rep.delta:g} for T = {rep.queries} tokens; "
                   f"N {rep.ensemble_size}, q {rep.sample_rate:g}, alpha {rep.alpha:g}, beta {rep.beta:.4g}, "
                   f"model {rep.model}, temperature {rep.temperature:g}; "
                   f"{rep.tokens_released} tokens released")
        for answer in result.answers:
            click.echo(f"\n## prompt {answer.index} ({len(answer.token_ids)} tokens, {answer.stop_reason})\n{answer.text}")
    if result.diagnostics is not None:
        emit_diagnostics([json.dumps({"diagnostics": result.diagnostics})])
    if result.stopped:
        raise BudgetExhaustedError(result.stopped)
