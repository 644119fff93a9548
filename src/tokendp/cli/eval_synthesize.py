"""`tokendp eval synthesize`: MAUVE of DP synthetic texts against held-out real texts."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tokendp._optional import require
from tokendp.cli._common import INPUT_FILE, CLIError, eval_command, library_errors, renamed
from tokendp.cli._console import console
from tokendp.cli.synthesize import read_references


def _epsilons(value: str, option: str) -> tuple[float, ...]:
    try:
        return tuple(sorted({float(v) for v in value.split(",") if v.strip()}))
    except ValueError:
        raise CLIError(f"{option} takes comma-separated numbers, got {value!r}") from None


@click.command("synthesize", short_help="Compare DP synthetic texts with real ones (MAUVE, on-topic share).")
@renamed("--batch-size", "batch_size")
@renamed("--max-tokens", "max_tokens")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="TAB data folder (texts.json): references are paragraphs of the tuning half, held-out texts "
                   "paragraphs of the reporting half. Or give --references and --held-out.")
@click.option("--references", "references_path", type=INPUT_FILE,
              default=None, help="JSONL file of private references, one {\"text\": ...} per line.")
@click.option("--held-out", "held_out_path", type=INPUT_FILE,
              default=None, help="JSONL file of real texts of the same kind that no setting reads.")
@click.option("--held-out-size", type=int, default=200, show_default=True, help="Use at most this many held-out texts.")
@click.option("--off-topic", "off_topic_path", type=INPUT_FILE,
              default=None, help="Plain text file of real text of another kind, one paragraph per line (e.g. "
                                 "WikiText-2's valid.txt): adds an 'off-topic' row, the floor.")
@click.option("--min-chars", type=int, default=200, show_default=True,
              help="With --data and --off-topic: shortest paragraph kept.")
@click.option("--max-chars", type=int, default=500, show_default=True,
              help="With --data and --off-topic: longest paragraph kept.")
@click.option("--epsilon", "epsilons", default="1,3,10", show_default=True,
              help="InvisibleInk's epsilons per reference (comma-separated, > 0).")
@click.option("--amin-epsilon", "amin_epsilons", default="10", show_default=True,
              help="Amin et al.'s epsilons (comma-separated; empty for none).")
@click.option("--num", type=int, default=16, show_default=True, help="Texts per setting.")
@click.option("--references-per-text", "batch_size", type=int, default=4, show_default=True, help="B: references read by each private text.")
@click.option("--max-new-tokens", "max_tokens", type=int, default=48, show_default=True,
              help="T: tokens per text; every text (real ones too) is cut to T tokens for the features.")
@click.option("--temperature", type=float, default=1.0, show_default=True)
@click.option("--top-k", type=int, default=100, show_default=True,
              help="k of InvisibleInk's Top-k+ (and of the public and non-private samplers).")
@click.option("--delta", type=float, default=1e-5, show_default=True)
@click.option("--domain", default=None,
              help="The kind of text, for the prompt pair [default with --data: \"a paragraph from a judgment of the "
                   "European Court of Human Rights\"; required with --references unless the model has its own "
                   "template].")
@click.option("--model", default="smollm2", show_default=True,
              help="Generator and featuriser: a model name, directory or cached hub id.")
@click.option("--buckets", type=int, default=5, show_default=True, help="MAUVE's number of clusters.")
@click.option("--mauve-seeds", type=int, default=5, show_default=True,
              help="k-means seeds MAUVE is averaged over (the table shows mean and standard deviation).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True, help="Torch CPU threads.")
@click.option("--device", default=None, help="torch device [default: cuda if available, else cpu].")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output folder (results, plot, and the cache a killed run resumes from).")
@click.option("--no-plots", is_flag=True, help="Skip mauve.png (then matplotlib is not needed).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@library_errors
def eval_synthesize(data_dir, references_path, held_out_path, held_out_size, off_topic_path, min_chars, max_chars, epsilons,
                    amin_epsilons, num, batch_size, max_tokens, temperature, top_k, delta, domain, model, buckets,
                    mauve_seeds, seed, threads, device, out_dir, no_plots, as_json) -> None:
    """Compare DP synthetic texts with real ones: MAUVE against held-out texts (features: the model's
    final hidden states, averaged over a text's first T tokens), on-topic share, empty texts and
    lengths, for InvisibleInk at each epsilon, Amin et al., the public model (epsilon 0),
    non-private sampling, real texts and (with --off-topic) real text of another kind. A killed
    run resumes from OUT's cache.
    """
    require("mauve", "eval", "tokendp eval synthesize", package="mauve-text")
    if not no_plots:
        require("matplotlib", "eval", "tokendp eval synthesize", why="for its plot (or pass --no-plots)")
    import torch

    from tokendp.eval.synthesis import TAB_DOMAIN, SynthEvalConfig, evaluate_synthesis, paragraphs, tab_paragraphs
    from tokendp.eval.synthesis_report import write_synthesis_results

    if (data_dir is None) == (references_path is None or held_out_path is None):
        raise CLIError("give either --data (a TAB folder) or both --references and --held-out")
    if data_dir is not None:
        refs = tab_paragraphs(data_dir, "tune", min_chars=min_chars, max_chars=max_chars)
        held = tab_paragraphs(data_dir, "report", min_chars=min_chars, max_chars=max_chars)
        domain = TAB_DOMAIN if domain is None else domain
    else:
        refs, held = read_references(references_path), read_references(held_out_path)
    off_topic = [] if off_topic_path is None else paragraphs(
        [off_topic_path.read_text(encoding="utf-8")], min_chars=min_chars, max_chars=max_chars)
    if threads < 1:
        raise CLIError(f"--threads must be >= 1, got {threads}")
    torch.set_num_threads(threads)
    config = SynthEvalConfig(model=model, epsilons=_epsilons(epsilons, "--epsilon"),
                             amin_epsilons=_epsilons(amin_epsilons, "--amin-epsilon"), num=num,
                             batch_size=batch_size, max_tokens=max_tokens, temperature=temperature, top_k=top_k,
                             delta=delta, domain=domain, seed=seed, buckets=buckets, mauve_seeds=mauve_seeds)
    rows = evaluate_synthesis(config, refs, held[:held_out_size], out_dir, off_topic=off_topic, device=device,
                              progress=console().bars(as_json=as_json))
    command = eval_command("synthesize")
    paths = write_synthesis_results(rows, out_dir, command=command, plots=not no_plots)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        click.echo((Path(out_dir) / "results.md").read_text(encoding="utf-8"), nl=False)
        click.echo("wrote " + ", ".join(str(p) for p in paths))
