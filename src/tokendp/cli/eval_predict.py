"""`tokendp eval predict`: held-out perplexity of PMixED beside the public model, the non-private
ensemble and fine-tuned adapters (a thin shell over :mod:`tokendp.eval.prediction`)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

from tokendp._optional import require
from tokendp.cli._common import INPUT_DIR, INPUT_FILE, floats, library_errors, renamed
from tokendp.cli._console import console
from tokendp.errors import InvalidParameterError

MD_COLUMNS = (("method", "method"), ("setting", "setting"), ("epsilon", "epsilon"), ("ppl", "perplexity"),
              ("alpha", "alpha"), ("beta", "beta"), ("sample_rate", "q"), ("mean_sampled", "mean size of S (diag.)"),
              ("mean_lambda", "mean lambda (diag.)"))
CSV_COLUMNS = ("method", "setting", "epsilon", "ppl", "tokens", "alpha", "beta", "sample_rate", "ensemble_size",
               "queries", "window", "delta", "mean_sampled", "mean_lambda")


def _adapter(spec: str):
    """NAME=DIR or NAME@EPSILON=DIR -> AdapterMethod."""
    from tokendp.eval.prediction import AdapterMethod

    label, sep, path = spec.partition("=")
    name, at, eps = label.partition("@")
    if not sep or not name.strip() or not path:
        raise InvalidParameterError(f"--adapter takes NAME=DIR or NAME@EPSILON=DIR, got {spec!r}")
    try:
        epsilon = float(eps) if at else None
    except ValueError:
        raise InvalidParameterError(f"--adapter {spec!r}: the epsilon after @ must be a number") from None
    if not (Path(path) / "adapter_config.json").is_file():
        raise InvalidParameterError(f"--adapter {name}: {path} has no adapter_config.json (PEFT's layout)")
    return AdapterMethod(name.strip(), path, epsilon)


@click.command("predict", short_help="Perplexity of the public model, the ensemble and PMixED.")
@renamed("--base", "base")
@click.option("--ensemble", "ensemble_dir", type=INPUT_DIR,
              required=True, help="Ensemble directory written by `tokendp ensemble train`.")
@click.option("--data", type=INPUT_FILE, required=True,
              help="Held-out text (UTF-8, read whole as one token stream), e.g. WikiText-2's test.txt.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output folder (results, the plot and the resume cache).")
@click.option("--methods", default="public,ensemble,pmixed", show_default=True,
              help="Comma-separated: public (base model), ensemble (non-private average), pmixed.")
@click.option("--epsilon", "epsilons", default="1,3,8", show_default=True,
              help="PMixED's epsilons per shard for the T queries.")
@click.option("--sample-rate", "sample_rates", default=None,
              help="PMixED's q, comma-separated [default: 2.4 / N, the paper's expected sample size N q].")
@click.option("--alpha", default="auto", show_default=True,
              help="Renyi order of PMixED, or auto: per epsilon the order that allows the largest mixing "
                   "weight (max beta / alpha; at delta 1e-5 epsilon 1 and 3 are out of reach at alpha 3).")
@click.option("--adapter", "adapters", multiple=True,
              help="Also score one LoRA adapter alone: NAME=DIR (non-private, e.g. a fine-tune on all shards) "
                   "or NAME@EPSILON=DIR (e.g. a DP-SGD fine-tune; for `tokendp finetune`'s OUT/adapter the epsilon "
                   "certified in OUT/finetune.json is used, per record). Repeatable; a NAME repeats at other epsilons.")
@click.option("--queries", type=int, default=1024, show_default=True, help="T: positions scored (and charged).")
@click.option("--window", type=int, default=128, show_default=True,
              help="Scored tokens per window; each position sees the earlier tokens of its window.")
@click.option("--delta", type=float, default=1e-5, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of PMixED's ensemble sampling.")
@click.option("--model", "base", default=None, help="Base model instead of the manifest's (name, directory or hub id).")
@click.option("--device", default=None, help="torch device [default: cuda if available, else cpu].")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None,
              help="Model dtype [default: float32 on cpu, bfloat16 on cuda]; the mechanism runs in float64.")
@click.option("--threads", type=int, default=1, show_default=True,
              help="Torch CPU threads (1 is fastest on a shared, busy CPU).")
@click.option("--no-plots", is_flag=True, help="Write results without the PNG plot (matplotlib not needed).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@library_errors
def eval_predict(ensemble_dir: Path, data: Path, out_dir: Path, methods: str, epsilons: str, sample_rates: str | None,
                 alpha: str, adapters: tuple[str, ...], queries: int, window: int, delta: float, seed: int,
                 base: str | None, device: str | None, dtype: str | None, threads: int, no_plots: bool,
                 as_json: bool) -> None:
    """Teacher-forced perplexity on held-out text of the base model, the non-private ensemble
    average, PMixED at each epsilon, and any adapters given, all at the same T positions.
    A killed run resumes from OUT's cache.
    """
    if not no_plots:  # checked before any work: a missing extra must not cost a whole evaluation
        require("matplotlib", "eval", "tokendp eval predict", why="for its plot (or pass --no-plots)")
    import torch

    from tokendp.eval.prediction import PredictEvalConfig, evaluate_prediction
    from tokendp.eval.report import markdown_table, plot_metric, write_tables

    if threads < 1:
        raise InvalidParameterError(f"--threads must be >= 1, got {threads}")
    try:
        order = None if alpha == "auto" else float(alpha)
    except ValueError:
        raise InvalidParameterError(f"--alpha takes a number > 1 or auto, got {alpha!r}") from None
    config = PredictEvalConfig(
        data=str(data), ensemble=str(ensemble_dir), base=base,
        methods=tuple(m.strip() for m in methods.split(",") if m.strip()),
        epsilons=floats(epsilons, "--epsilon") or (), sample_rates=floats(sample_rates, "--sample-rate"),
        alpha=order, queries=queries, window=window, delta=delta, seed=seed,
        adapters=tuple(_adapter(a) for a in adapters))
    torch.set_num_threads(threads)
    rows = evaluate_prediction(config, out_dir, device=device, dtype=dtype, progress=console().bars(as_json=as_json))
    command = "tokendp eval " + " ".join(shlex.quote(a) for a in sys.argv[sys.argv.index("predict"):]) \
        if "predict" in sys.argv else ""
    meta = rows[0]
    note = (f"T = {meta['queries']} positions of {data.name} in windows of {meta['window']} tokens, "
            f"N = {meta['ensemble_size']} members, delta = {meta['delta']:g}; this run took {meta['seconds_total']} s "
            "(windows in the cache are not recomputed). "
            "Perplexity: teacher-forced, pooled over the T positions. epsilon: PMixED's per shard for the T queries, "
            "an adapter's as its setting says (a `tokendp finetune` run's: per record, for the released model) "
            "(0: reads no private data; '-': no guarantee). The mean size of S and mean lambda are computed from the "
            "private ensemble: diagnostics, not part of the guarantee.")
    paths = write_tables(rows, out_dir, title="Prediction evaluation (PMixED)", note=note, csv_columns=CSV_COLUMNS,
                         table=markdown_table(rows, MD_COLUMNS), command=command)
    if not no_plots:
        paths.append(plot_metric(rows, "ppl", "perplexity", Path(out_dir) / "epsilon_vs_ppl.png"))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        click.echo(markdown_table(rows, MD_COLUMNS))
        click.echo("wrote " + ", ".join(str(p) for p in paths))
