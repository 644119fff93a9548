"""``tokendp model``: describe the embedded default model."""

from __future__ import annotations

import click

from tokendp.cli._common import echo_json, library_errors
from tokendp.models import model_info


@click.group("model")
def model() -> None:
    """The embedded default model (used whenever --model is not given)."""


@model.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@library_errors
def info(as_json: bool) -> None:
    """Describe the default model: architecture, size, training and metrics."""
    data = model_info()
    if as_json:
        echo_json(data)
        return
    click.echo(f"tokendp default model ({data['path']})")
    click.echo(f"  architecture: {data['architecture']}, {data['layers']} layers, "
               f"d={data['hidden_size']}, {data['heads']} heads, FFN {data['ffn_size']}")
    if data["parameters"]:
        click.echo(f"  parameters:   {data['parameters'] / 1e6:.2f}M "
                   f"({data['weights_dtype']}, {data['weights_mb']} MB)")
    click.echo(f"  vocabulary:   {data['vocab_size']} (byte-level BPE)")
    click.echo(f"  context:      {data['context']} positions "
               f"(trained on sequences up to {data['trained_context']} tokens)")
    click.echo(f"  task:         {data['task']}")
    t = data["training"]
    click.echo(f"  training:     {t['objective']}")
    click.echo(f"                data: {t['data']}")
    click.echo(f"                step {t['step']}/{t['total_steps']}, {t['tokens_seen']} tokens, "
               f"{t['train_minutes']} min on {t['hardware']}")
    for name, value in data["metrics"].items():
        click.echo(f"  {name}: {value}")
