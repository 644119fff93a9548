"""`tokendp eval exposure` and `tokendp eval finetune`: canary exposure of a model, and the
no DP / DP-SGD / ATDP comparison. Thin shells over :mod:`tokendp.eval.exposure` and
:mod:`tokendp.eval.finetune`."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from tokendp.cli._common import INPUT_DIR, INPUT_FILE, echo_json, library_errors, renamed, threads_option, use_threads
from tokendp.cli._console import console, quiet_libraries

_EXPOSURE = click.option("--exposure", "method", type=click.Choice(["exact", "sampled"]), default="sampled", show_default=True,
                         help="exact: rank against all 10^digits candidates (10^(digits-1) sequences, slow on a CPU); "
                              "sampled: estimate the rank from --samples candidates, with a 95% interval.")
_SAMPLES = click.option("--samples", type=int, default=2000, show_default=True, help="Candidates drawn for the sampled estimate.")


@click.command("exposure", short_help="Exposure of each planted canary (Carlini et al. 2019) in a fine-tuned model.")
@click.option("--model", "model_dir", required=True, help="A model directory (e.g. the --out of tokendp finetune) or a registered name.")
@click.option("--canaries", "canaries_file", type=INPUT_FILE, required=True,
              help="The canary file (canaries.json written by tokendp finetune --canaries N).")
@_EXPOSURE
@_SAMPLES
@threads_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@library_errors
def eval_exposure(model_dir, canaries_file, method, samples, threads, as_json) -> None:
    """Exposure of each canary (Carlini et al. 2019): log2 |R| - log2 rank; 0 to 19.93 for 6 digits."""
    console().info(f"loading model {model_dir}")
    quiet_libraries()
    use_threads(threads)
    from tokendp.eval.exposure import canary_exposures
    from tokendp.jobs.finetune.run import load_base
    from tokendp.text.canaries import read_canaries

    fmt, canaries = read_canaries(canaries_file)
    backend = load_base(model_dir)
    found = canary_exposures(backend.model, backend.tokenizer, fmt, canaries, method=method, samples=samples)
    if as_json:
        echo_json({"space_size": fmt.space_size, "canaries": [asdict(e) for e in found]})
        return
    for e in found:
        interval = "" if e.method == "exact" else f"  (95%: {e.low:.2f} to {e.high:.2f})"
        click.echo(f"{e.secret}  repeats {e.repeats}  exposure {e.exposure:.2f}{interval}")


@click.command("finetune", short_help="Compare no DP, DP-SGD and ATDP (each tier) at equal epsilon.")
@renamed("--base", "base")
@renamed("--max-tokens", "max_tokens")
@renamed("--batch-size", "batch_size")
@click.option("--data", "data_dir", type=INPUT_DIR, required=True,
              help="The WikiText-2 folder (train.txt, valid.txt), e.g. ../shared/data/wikitext-2.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Results folder (runs/NAME per run, results.md, results.json, exposure.png); rerun to resume.")
@click.option("--model", "base", default="tiny", show_default=True, help="Base model (a registered name or a directory).")
@click.option("--records", type=int, default=600, show_default=True, help="Training records taken from train.txt.")
@click.option("--valid", type=int, default=150, show_default=True, help="Validation records taken from valid.txt.")
@click.option("--max-length", "max_tokens", type=int, default=64, show_default=True, help="Most tokens per record (sentences are grouped up to it).")
@click.option("--epsilons", default="3,8", show_default=True, help="Comma-separated target epsilons (delta --delta).")
@click.option("--delta", type=float, default=1e-5, show_default=True, help="delta of every DP run.")
@click.option("--tiers", default="low-entity,high-contextual", show_default=True, help="Comma-separated ATDP tiers to run.")
@click.option("--epochs", type=int, default=2, show_default=True, help="Epochs of every run.")
@click.option("--expected-batch-size", "batch_size", type=int, default=32, show_default=True,
              help="Expected (Poisson) batch size of every run.")
@click.option("--lr", type=float, default=5e-4, show_default=True, help="AdamW learning rate of every run.")
@click.option("--lora-r", type=int, default=0, show_default=True, help="LoRA rank; 0 trains every weight.")
@click.option("--canaries", type=int, default=3, show_default=True, help="Canaries planted in every run's corpus.")
@click.option("--canary-repeats", type=int, default=8, show_default=True, help="Copies of each canary.")
@_EXPOSURE
@_SAMPLES
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of data order and canaries.")
@threads_option
@library_errors
def eval_finetune(data_dir, out, base, records, valid, max_tokens, epsilons, delta, tiers, epochs, batch_size, lr, lora_r,
                  canaries, canary_repeats, method, samples, seed, threads) -> None:
    """Compare no DP, DP-SGD and ATDP (each tier) at equal epsilon: perplexity, exposure, time."""
    from tokendp._optional import require
    from tokendp.cli._common import CLIError

    require("opacus", "train", "tokendp eval finetune", why="for DP-SGD")
    quiet_libraries()
    use_threads(threads)
    from tokendp.eval.finetune import run_comparison
    from tokendp.jobs.finetune import FinetuneConfig

    try:
        eps = tuple(float(e) for e in epsilons.split(","))
    except ValueError:
        raise CLIError("--epsilons must be comma-separated numbers, e.g. 3,8") from None
    config = FinetuneConfig(epochs=epochs, batch_size=batch_size, lr=lr, lora_r=lora_r, delta=delta, canaries=canaries,
                            canary_repeats=canary_repeats, seed=seed)
    run_comparison(data_dir, out, base=base, config=config, records=records, valid=valid, max_tokens=max_tokens, epsilons=eps,
                   tiers=tuple(t for t in tiers.split(",") if t), exposure=method, samples=samples,
                   on_run=lambda name, done: console().info(f"{name}: {'done' if done else 'training'}"))
    click.echo((out / "results.md").read_text(encoding="utf-8"), nl=False)
