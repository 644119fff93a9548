"""`tokendp synthesize`: DP synthetic texts from a JSONL or Parquet file of private references,
in this process or on a corpus engine (``--engine local|ray``, resumable; docs/engines.md).

A thin shell over :func:`tokendp.jobs.synthesize.synthesize` and
:func:`tokendp.engines.synthesis.synthesize_corpus`; every number comes from the library.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from tokendp.cli._common import (INPUT_FILE, CLIError, engine_options, library_errors, placement_options, ray_options,
                                 renamed, run_corpus, use_threads)
from tokendp.cli._console import console, quiet_libraries
from tokendp.startup import loading


def read_references(path: Path) -> list[str]:
    """The texts of a JSONL or Parquet file of references ``{id?, text}``, in order, checked as a
    corpus (:func:`tokendp.engines.corpus.scan_corpus`: messages carry line or row numbers, never text)."""
    from tokendp.engines.corpus import scan_corpus

    return [record.text for record in scan_corpus(path).records()]


@click.command("synthesize", short_help="Generate synthetic texts, (epsilon, delta)-DP per reference.")
@renamed("--batch-size", "references_per_text")
@renamed("--max-tokens", "max_new_tokens")
@click.argument("references", metavar="[REFERENCES]", type=INPUT_FILE, required=False)
@click.option("--references", "references_option", type=INPUT_FILE, default=None,
              help="The same as REFERENCES (the older spelling).")
@click.option("--epsilon", type=float, required=True, help="Epsilon per reference (>= 0; 0 gives public-model text).")
@click.option("--delta", type=float, required=True, help="Delta of the guarantee, in (0, 1), below 1/(number of references).")
@click.option("--references-per-text", type=int, required=True,
              help="B: references read by each synthetic text (disjoint batches of the references).")
@click.option("--max-new-tokens", type=int, required=True,
              help="T: tokens per text, fixed before generation; all T count, even if a text stops early.")
@click.option("--temperature", type=float, default=1.0, show_default=True,
              help="Sampling temperature tau (> 0); it enters epsilon, and each text's header gives it.")
@click.option("--top-k", type=int, default=None,
              help="k of InvisibleInk's Top-k+ candidate set [default: 100; the whole vocabulary for amin].")
@click.option("--method", type=click.Choice(["invisibleink", "amin"]), default="invisibleink", show_default=True,
              help="InvisibleInk, or the Amin et al. 2024 baseline (full-logit clipping).")
@click.option("--svt-epsilon", type=float, default=None,
              help="Turn on Amin et al.'s sparse-vector switch to the public model (--method amin): its pure-DP share "
                   "of --epsilon; the clip is calibrated for the rest.")
@click.option("--max-private-tokens", type=int, default=None,
              help="With the switch: c, the most tokens per text sampled from the references; then the public model "
                   "continues [default: max-new-tokens // 4, at least 1].")
@click.option("--switch-threshold", type=float, default=None,
              help="With the switch: its threshold on the statistic, in logit units [default: the clip C].")
@click.option("--num", type=int, default=None,
              help="Number of synthetic texts [default: floor(references / B), each reference used once].")
@click.option("--seed", type=int, default=None,
              help="Seed for reproducible sampling: text j samples from its own stream, seeded from the seed and j "
                   "[default: seeded from the OS].")
@click.option("--model", default=None,
              help="smollm2, rewriter, tiny (see `tokendp model list`), a model directory or a cached hub id "
                   "[default: smollm2, SmolLM2-135M-Instruct].")
@click.option("--domain", default=None,
              help="What kind of text the references are, with its article, e.g. \"a hospital discharge note\" "
                   "(required unless --prompt or the model has its own template). The private rows read \"Here is an example of DOMAIN: <reference> Write another "
                   "example of DOMAIN ...\", the public row \"Write an example of DOMAIN ...\" (no reference).")
@click.option("--prompt", default=None,
              help="Instead of that pair: a plain template with {document} for every row (the public row gets it "
                   "around an empty document, or the model's placeholder).")
@click.option("--max-reference-tokens", type=click.IntRange(min=1), default=256, show_default=True,
              help="Tokens of each reference the model reads (the rest is cut). Every row is laid out this long, so "
                   "that a reference's length cannot change how the other rows are computed.")
@placement_options
@click.option("--concurrency", type=click.IntRange(min=1), default=16, show_default=True,
              help="Synthetic texts generated together (each 1 + B rows); with --engine, the texts of a worker's "
                   "batch.")
@engine_options(default=None, engine_help=(
    "Run on a corpus engine, resumably: this process (local) or a Ray actor pool (ray; the ray extra). The batches "
    "of B references are fixed by this process before any worker starts; records {id, text, report} go to --out "
    "(FILE.jsonl, FILE.parquet or a directory; rerun to resume) or stdout (docs/engines.md) [default: no engine, "
    "the texts printed]."))
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON record per synthetic text (an engine always writes JSON records).")
@click.option("--out", "out_path", type=click.Path(path_type=Path), default=None,
              help="Write the output here instead of stdout; with --engine: FILE.jsonl, FILE.parquet or a directory, "
                   "and rerunning the same command resumes an interrupted run.")
@library_errors
def synthesize(references, references_option, epsilon, delta, references_per_text, max_new_tokens, temperature, top_k,
               method, svt_epsilon, max_private_tokens, switch_threshold, num, seed, model, domain, prompt,
               max_reference_tokens, device, dtype, concurrency, engine, address, workers, gpus_per_worker, threads, as_json, out_path) -> None:
    """Generate synthetic texts from REFERENCES (.jsonl or .parquet, one {"text", "id"?} per line
    or row), each text (epsilon, delta)-DP per reference (InvisibleInk or Amin et al.).

    Text j reads references jB .. jB + B - 1 (disjoint batches in input order), so the whole
    output is (epsilon, delta)-DP per reference. With --seed, a text depends only on the seed,
    j and its batch: --engine local, any number of Ray workers, and no engine give the same texts
    (docs/engines.md).
    """
    if (references is None) == (references_option is None):
        raise CLIError("give the references file once: REFERENCES (or --references)")
    path = references or references_option
    params = dict(epsilon=epsilon, delta=delta, batch_size=references_per_text, max_tokens=max_new_tokens,
                  temperature=temperature,
                  top_k=100 if top_k is None else top_k, method=method, svt_epsilon=svt_epsilon,
                  max_private_tokens=max_private_tokens, switch_threshold=switch_threshold, seed=seed, model=model,
                  domain=domain, prompt=prompt, max_reference_tokens=max_reference_tokens, device=device)
    if dtype is not None:
        params["dtype"] = dtype  # only when given: an interrupted run of an older command still resumes
    if engine is not None:
        _synthesize_corpus(path, params, num, out_path, engine, concurrency, threads,
                           ray_options(engine, address, workers, gpus_per_worker))
        return
    if any(v is not None for v in (address, workers, gpus_per_worker)):
        raise CLIError("the ray options apply with --engine ray")
    if out_path is not None and out_path.is_dir():
        raise CLIError(f"{out_path} is a directory; without --engine, --out is a file")
    _print(_run(path, params, num, concurrency, threads, as_json), as_json, out_path)


def _run(path: Path, params: dict, num: int | None, concurrency: int, threads: int | None, as_json: bool) -> list:
    """The texts, written in this process: a line before anything slow (importing torch, loading
    the model, SmolLM2's one-time conversion), then a bar of the tokens generated out of
    (texts x T) on stderr."""
    out = console()
    with out.step("loading model" + (f" {params['model']}" if params["model"] else "")), loading():
        quiet_libraries()
        use_threads(threads)
        from tokendp.jobs.synthesize import Synthesizer, reference_batches

        synthesizer = Synthesizer(concurrency=concurrency, **{k: v for k, v in params.items() if k != "seed"})
        batches = reference_batches(read_references(path), batch_size=synthesizer.batch_size, num=num)
        if batches:
            synthesizer.check_fits()
    total = len(batches) * synthesizer.max_tokens
    texts = f"{len(batches)} text{'' if len(batches) == 1 else 's'}"
    with out.tokens(f"generating {texts} of {synthesizer.max_tokens} tokens", total, desc="synthesize",
                    as_json=as_json) as on_token:
        return synthesizer(batches, seed=params["seed"], on_token=on_token)


def _synthesize_corpus(path: Path, params: dict, num: int | None, out_path: Path | None, engine: str,
                       concurrency: int, threads: int | None, ray: dict) -> None:
    """The texts on a corpus engine (:func:`run_corpus`: a first line at once, Ctrl-C exits 130),
    its bar counting texts where the console draws bars."""

    def start(note: Any) -> Any:
        from tokendp.engines.synthesis import synthesize_corpus

        quiet_libraries()
        return synthesize_corpus(path, params, num=num, out=out_path, engine=engine, batch_size=concurrency,
                                 threads=threads, progress=console().bars(), note=note, **ray)

    run_corpus("synthesize", path, out_path, start)


def _print(results: list, as_json: bool, out_path: Path | None) -> None:
    body = "".join(json.dumps(r.to_dict()) + "\n" if as_json else _readable(r) for r in results)
    if out_path is None:
        click.echo(body, nl=False)
    else:
        out_path.write_text(body, encoding="utf-8")


def _readable(result) -> str:
    head = (f"# {result.method}: epsilon {result.epsilon:.4g} per reference at delta {result.delta:g}, "
            f"clip {result.clip:.4g}, B {result.batch_size}, T {result.max_tokens}, "
            f"model {result.model}, temperature {result.temperature:g}, "
            f"{result.tokens_generated} tokens ({result.stop_reason})")
    if result.svt_epsilon is not None:
        head += (f"; switch: svt epsilon {result.svt_epsilon:g}, threshold {result.switch_threshold:.4g}, "
                 f"{result.private_tokens} of at most {result.max_private_tokens} tokens private (diagnostic)")
    return f"{head}\n{result.text}\n\n"
