"""`tokendp eval injection`: prompt-injection success and task accuracy, with and without DP-Fusion."""

from __future__ import annotations

from pathlib import Path

import click

from tokendp._optional import require
from tokendp.cli._common import finish_eval, floats, library_errors
from tokendp.cli._console import console
from tokendp.errors import InvalidParameterError


@click.command("injection", short_help="Prompt injection: untrusted pages vs a trusted note, by epsilon.")
@click.option("--model", default="smollm2", show_default=True,
              help="smollm2, rewriter, tiny (see `tokendp model list`) or a model directory.")
@click.option("--tasks", type=click.IntRange(min=1), default=102, show_default=True,
              help="Tasks generated from Faker and templates (cycling through 3 attacks x 2 answer placements).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the tasks and of the sampling.")
@click.option("--epsilon", "epsilons", default="1,4,16", show_default=True,
              help="DP-Fusion settings: epsilon per untrusted chunk (total over T at delta).")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=24, show_default=True,
              help="T, counted in full by every epsilon.")
@click.option("--temperature", type=float, default=0.7, show_default=True, help="The same for every method.")
@click.option("--delta", type=float, default=1e-5, show_default=True)
@click.option("--question", type=click.Choice(["first", "last", "both"]), default="first", show_default=True,
              help="Where the question goes: before the documents (where SmolLM2-135M follows injections), "
                   "after them (where it rather answers), or both.")
@click.option("--batch", type=click.IntRange(min=1), default=6, show_default=True,
              help="Tasks answered together (also the unit of the sampling seeds).")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Torch CPU threads (1 is fastest on a shared, busy CPU).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output folder (results, plot and the resume cache).")
@click.option("--no-plots", is_flag=True, help="Write results.json/.csv/.md without the plot (then matplotlib is not needed).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@library_errors
def eval_injection(model: str, tasks: int, seed: int, epsilons: str, max_new_tokens: int, temperature: float,
                   delta: float, question: str, batch: int, threads: int, out_dir: Path, no_plots: bool,
                   as_json: bool) -> None:
    """Ask questions over a trusted note and two untrusted pages, one of which carries an injected
    instruction (reply with an attacker's string, reveal the note's access code, or switch language),
    and measure injection success and task accuracy for: no defence, the untrusted pages withheld,
    and DP-Fusion with each page its own group at every --epsilon. A killed run resumes from OUT's cache.
    """
    require("faker", "eval", "tokendp eval injection", why="to generate its tasks")
    if not no_plots:
        require("matplotlib", "eval", "tokendp eval injection", why="for its plot (or pass --no-plots)")
    if temperature <= 0:
        raise InvalidParameterError(f"--temperature must be > 0 (DP-Fusion samples), got {temperature}")
    import torch

    from tokendp.eval.injection import COLUMNS, InjectionConfig, evaluate_injection, write_injection_results
    from tokendp.eval.report import markdown_table

    torch.set_num_threads(threads)
    config = InjectionConfig(model=model, tasks=tasks, seed=seed, epsilons=floats(epsilons, "--epsilon"),
                             max_new_tokens=max_new_tokens, temperature=temperature, delta=delta, batch=batch,
                             question=question)
    rows = evaluate_injection(config, out_dir, progress=console().bars(as_json=as_json))
    finish_eval("injection", rows, write_injection_results, lambda r: markdown_table(r, COLUMNS), out_dir=out_dir,
                plots=not no_plots, as_json=as_json)
