"""`tokendp ensemble train`: PMixED's ensemble, one LoRA adapter per disjoint shard of a corpus.

A thin shell over :func:`tokendp.ensemble.train.train_ensemble`.
"""

from __future__ import annotations

from pathlib import Path

import click

from tokendp.cli._common import INPUT_FILE, library_errors, renamed, threads_option, use_threads
from tokendp.cli._console import console, quiet_libraries


@click.group("ensemble", short_help="Train PMixED ensembles: LoRA adapters on disjoint shards.")
def ensemble() -> None:
    """Ensembles for `tokendp predict` (PMixED): LoRA adapters trained on disjoint shards."""


@ensemble.command("train", short_help="Train one LoRA adapter per disjoint shard of a corpus (resumable).")
@renamed("--base", "model")
@click.option("--data", type=INPUT_FILE, required=True,
              help="Private corpus: JSONL (.jsonl), one record per line with a text field; or a text file, "
                   "one record per non-blank line.")
@click.option("--shards", type=int, required=True, help="N: disjoint shards, one adapter (ensemble member) each.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Ensemble directory (manifest.json + shard-000/ ...); rerun the same command to resume.")
@click.option("--model", default="tiny", show_default=True,
              help="Base model: tiny (the embedded model), smollm2 (see `tokendp model list`), a directory or a "
                   "cached hub id; `tokendp predict` reads it from the manifest.")
@click.option("--group-by", default=None,
              help="Keep all records with the same value of this field in one shard (e.g. user_id); what the guarantee then covers: docs/predict.md.")
@click.option("--text-field", default="text", show_default=True, help="Field of each record that holds its text.")
@click.option("--steps", type=int, default=100, show_default=True, help="Optimiser steps per shard.")
@click.option("--batch-size", type=int, default=8, show_default=True,
              help="Texts per optimiser step, drawn from the shard (plain training: the guarantee comes from PMixED "
                   "at prediction, not from this batch).")
@click.option("--max-length", type=int, default=256, show_default=True, help="Tokens kept per text.")
@click.option("--lora-r", type=int, default=4, show_default=True, help="LoRA rank.")
@click.option("--lora-alpha", type=float, default=32.0, show_default=True, help="LoRA alpha (scaling alpha / r).")
@click.option("--lr", type=float, default=2e-4, show_default=True, help="AdamW learning rate (weight decay 0.01).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the shard split and of training.")
@click.option("--device", default=None, help="torch device [default: cuda if available, else cpu].")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None,
              help="dtype of the frozen base model; the LoRA weights train in float32 "
                   "[default: float32 on cpu, bfloat16 on cuda].")
@threads_option
@library_errors
def train(data, shards, out, model, group_by, text_field, steps, batch_size, max_length, lora_r, lora_alpha, lr,
          seed, device, dtype, threads) -> None:
    """Split the corpus into N disjoint shards and train one LoRA adapter per shard (resumable)."""
    from tokendp._optional import require

    require("peft", "ensemble", "tokendp ensemble train", why="to train LoRA adapters")
    use_threads(threads)

    from tokendp.ensemble.train import TrainConfig, train_ensemble

    config = TrainConfig(steps=steps, lora_r=lora_r, lora_alpha=lora_alpha, lr=lr, batch_size=batch_size,
                         max_length=max_length)
    from tokendp.training import ProgressBar

    # Shown in a log file too (an unattended run): updates every 30 s there, not on every step.
    with ProgressBar("ensemble", disable=console().quiet) as bar:
        quiet_libraries()  # transformers' own loading and saving bars: the CLI draws one bar
        manifest = train_ensemble(data, shards=shards, out=out, base=model, seed=seed, group_by=group_by,
                                  text_field=text_field, config=config, device=device, dtype=dtype, on_progress=bar)
    click.echo(f"{manifest.ensemble_size} adapters in {out} (records per shard: "
               f"{', '.join(str(s.records) for s in manifest.shards)}); answer prompts with "
               f"`tokendp predict --ensemble {out} ...`")
