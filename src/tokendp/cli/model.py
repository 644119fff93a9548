"""``tokendp model``: the models tokendp knows by name (list, info, build)."""

from __future__ import annotations

import click

from tokendp.cli._common import echo_json, library_errors
from tokendp.cli._console import quiet_libraries


@click.group("model", short_help="The models known by name: list, info, build.")
def model() -> None:
    """Models by name: rewriter (sanitize's default), smollm2, tiny (the embedded 4.5M model).

    Any --model option also takes a model directory or a hub id.
    """


@model.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@library_errors
def list_models(as_json: bool) -> None:
    """The registered names, what they are and whether they can load now."""
    from tokendp.models.registry import model_list

    rows = model_list()
    if as_json:
        echo_json(rows)
        return
    for row in rows:
        click.echo(f"{row['name']:<9} {row['summary']}")
        click.echo(f"{'':<9} {row['role']}; {row['status']}")


@model.command("build", short_help="Convert SmolLM2's GGUF (and merge the rewriter) into the cache.")
@click.argument("name", type=click.Choice(["smollm2", "rewriter"]))
@click.option("--force", is_flag=True, help="Rebuild even if a conversion is cached (or a broken one is).")
@library_errors
def build(name: str, force: bool) -> None:
    """Convert SmolLM2's GGUF into the cache ($TOKENDP_CACHE, default ~/.cache/tokendp).

    Both smollm2 and rewriter use this conversion. rewriter also merges its LoRA adapter into
    a cached model directory beside it (about 540 MB in float32 on a CPU, 270 MB in bfloat16
    on a GPU), so that later loads skip peft. Both happen on first use anyway.
    """
    from tokendp.models.cache import SMOLLM2, build_cache

    quiet_libraries()
    path = build_cache(SMOLLM2, force=force)
    click.echo(f"{name}: converted model at {path}")
    if name == "rewriter":
        from tokendp.backends.hf import load_named_model
        from tokendp.models.registry import merged_rewriter_status

        merged = merged_rewriter_status()
        if force or not (merged and merged["built"]):
            load_named_model("rewriter", force=force)
            merged = merged_rewriter_status()
        if merged and merged["built"]:
            click.echo(f"{name}: merged model at {merged['path']} ({merged['mb']} MB, {merged['dtype']})")
        else:
            click.echo(f"{name}: the merged model could not be cached (see the warning); it is merged at each load")


@model.command("info", short_help="Describe a model by name (default: rewriter).")
@click.argument("name", required=False, default="rewriter")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@library_errors
def info(name: str, as_json: bool) -> None:
    """Describe a model by name (default: rewriter, the model sanitize uses by default)."""
    from tokendp.models.registry import named_info

    data = named_info(name)
    if as_json:
        echo_json(data)
        return
    if name == "tiny":
        _echo_tiny(data)
        return
    b, s = data["base"], data["status"]
    click.echo(f"{name}: {data['summary']}")
    click.echo(f"  role:         {data['role']}")
    click.echo(f"  base:         {b['name']}, {b['architecture']}, {b['parameters'] / 1e6:.1f}M parameters, "
               f"{b['layers']} layers, d={b['hidden_size']}, heads {b['heads']}, FFN {b['ffn_size']}, "
               f"vocabulary {b['vocab_size']}, context {b['context']}; {b['license']}")
    click.echo(f"  source:       {b['source']}")
    state = ("not installed: " + s.get("problem", "")) if not s["installed"] else (
        f"converted in {s['cache']} ({s['converted_with']})" if s["converted"]
        else f"not converted yet ({s.get('problem') or 'converted on first use, or: tokendp model build ' + name})")
    click.echo(f"  status:       {state}")
    click.echo(f"  prompt:       {data['prompt']}")
    if name == "rewriter":
        a = data["adapter"]
        if not a["installed"]:
            click.echo(f"  adapter:      not shipped in this version ({a['path']})")
            return
        t = a["training"]
        click.echo(f"  adapter:      LoRA r={a['r']} alpha={a['alpha']} on {', '.join(a['targets'] or [])}, "
                   f"{a['weights_mb']} MB (fp16), merged into the weights once")
        click.echo(f"  merged:       {_merged_line(data.get('merged'))}")
        click.echo(f"  training:     step {t['step']}/{t['total_steps']}, {t['tokens_seen']} tokens, "
                   f"{t['train_minutes']} min on {t['hardware']}")
        for key, value in a["metrics"].items():
            click.echo(f"  {key}: {value}")


def _merged_line(m: dict | None) -> str:
    """Whether the merged rewriter is cached (for a plain load here), its size, and stale copies."""
    if m is None:
        return "merged at the first load, after the conversion, and cached beside it"
    if m["built"]:
        line = f"cached in {m['path']} ({m['mb']} MB, {m['dtype']} on {m['device']}); loads skip peft"
    else:
        line = (f"not cached yet ({m.get('problem') or 'built on first use, or: tokendp model build rewriter'}; "
                f"about {m['approx_mb']} MB in {m['dtype']}, in {m['path']})")
    if m["others"]:
        line += (f"; {len(m['others'])} other merged cache(s) beside it ({sum(o['mb'] for o in m['others']):.0f} MB: "
                 "other adapters, dtypes or versions; delete those no longer used)")
    return line


def _echo_tiny(data: dict) -> None:
    click.echo(f"tiny: tokendp default model ({data['path']})")
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

