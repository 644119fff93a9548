"""`tokendp synthesize`: DP synthetic texts from a JSONL file of private references.

A thin shell over :func:`tokendp.synthesize.synthesize`; every number comes from the library.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from tokendp.cli._common import CLIError, library_errors
from tokendp.text.documents import jsonl_records


def read_references(path: Path) -> list[str]:
    """The "text" field of every non-blank line of a JSONL file (messages carry line numbers only)."""
    refs = []
    for where, record in jsonl_records(path):
        if not isinstance(record.get("text"), str):
            raise CLIError(f"{where} has no string field \"text\"; write one {{\"text\": ...}} per line")
        refs.append(record["text"])
    return refs


@click.command("synthesize")
@click.option("--references", "references_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              required=True, help="JSONL file of private references, one {\"text\": ...} per line.")
@click.option("--epsilon", type=float, required=True, help="Epsilon per reference (>= 0; 0 gives public-model text).")
@click.option("--delta", type=float, required=True, help="Delta of the guarantee, in (0, 1), below 1/(number of references).")
@click.option("--batch-size", type=int, required=True, help="B: references read by each synthetic text (disjoint batches).")
@click.option("--max-tokens", type=int, required=True,
              help="T: tokens per text, fixed before generation; all T count, even if a text stops early.")
@click.option("--temperature", type=float, default=1.0, show_default=True, help="Sampling temperature tau (> 0).")
@click.option("--top-k", type=int, default=None,
              help="k of InvisibleInk's Top-k+ candidate set [default: 100; the whole vocabulary for amin].")
@click.option("--method", type=click.Choice(["invisibleink", "amin"]), default="invisibleink", show_default=True,
              help="InvisibleInk, or the Amin et al. 2024 baseline (full-logit clipping).")
@click.option("--svt-epsilon", type=float, default=None,
              help="Turn on Amin et al.'s sparse-vector switch to the public model (--method amin): its pure-DP share "
                   "of --epsilon; the clip is calibrated for the rest.")
@click.option("--max-private-tokens", type=int, default=None,
              help="With the switch: c, the most tokens per text sampled from the references; then the public model "
                   "continues [default: max-tokens // 4, at least 1].")
@click.option("--switch-threshold", type=float, default=None,
              help="With the switch: its threshold on the statistic, in logit units [default: the clip C].")
@click.option("--num", type=int, default=None,
              help="Number of synthetic texts [default: floor(references / batch size), each reference used once].")
@click.option("--seed", type=int, default=None, help="Seed for reproducible sampling [default: seeded from the OS].")
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
@click.option("--device", default=None, help="torch device [default: cuda if available, else cpu].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON record per synthetic text.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the output to this file instead of stdout.")
@library_errors
def synthesize(references_path, epsilon, delta, batch_size, max_tokens, temperature, top_k, method, svt_epsilon,
               max_private_tokens, switch_threshold, num, seed, model, domain, prompt, device, as_json, out_path) -> None:
    """Generate synthetic texts, each (epsilon, delta)-DP per reference (InvisibleInk or Amin et al.)."""
    from tqdm import tqdm

    from tokendp.synthesize import partition, synthesize as run

    refs = read_references(references_path)
    texts = len(partition(len(refs), batch_size=batch_size, num=num)) if batch_size > 0 else 0
    with tqdm(total=texts * max_tokens, unit="tok", desc="synthesize", disable=None, leave=False) as bar:
        results = run(refs, epsilon=epsilon, delta=delta, batch_size=batch_size, max_tokens=max_tokens,
                      temperature=temperature, top_k=100 if top_k is None else top_k, method=method, num=num, seed=seed, model=model,
                      domain=domain, prompt=prompt, device=device, on_token=lambda doc, tok: bar.update(1), svt_epsilon=svt_epsilon,
                      max_private_tokens=max_private_tokens, switch_threshold=switch_threshold)
    if as_json:
        body = "".join(json.dumps(r.to_dict()) + "\n" for r in results)
    else:
        body = "".join(_readable(r) for r in results)
    if out_path is None:
        click.echo(body, nl=False)
    else:
        out_path.write_text(body, encoding="utf-8")


def _readable(result) -> str:
    head = (f"# {result.method}: epsilon {result.epsilon:.4g} per reference at delta {result.delta:g}, "
            f"clip {result.clip:.4g}, B {result.batch_size}, T {result.max_tokens}, "
            f"{result.tokens_generated} tokens ({result.stop_reason})")
    if result.svt_epsilon is not None:
        head += (f"; switch: svt epsilon {result.svt_epsilon:g}, threshold {result.switch_threshold:.4g}, "
                 f"{result.private_tokens} of at most {result.max_private_tokens} tokens private (diagnostic)")
    return f"{head}\n{result.text}\n\n"
