"""`tokendp finetune`: fine-tune a causal LM on a private corpus without DP, with DP-SGD or ATDP.

A thin shell over :func:`tokendp.jobs.finetune.finetune`.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from tokendp.cli._common import INPUT_FILE, echo_json, library_errors, renamed, threads_option, use_threads
from tokendp.cli._console import console, quiet_libraries
from tokendp.text.sensitivity import TIERS


@click.command("finetune", short_help="Fine-tune with DP-SGD or ATDP, (epsilon, delta)-DP per record.")
@renamed("--base", "model")
@renamed("--batch-size", "expected_batch_size")
@click.option("--data", type=INPUT_FILE, required=True,
              help="Private corpus: JSONL, one record per line with a text field. Each record is one privacy unit and one "
                   "training sequence (never split: a record longer than --max-length is an error, or cut with --truncate).")
@click.option("--method", type=click.Choice(["none", "dpsgd", "atdp"]), default="atdp", show_default=True,
              help="none: plain fine-tuning (no guarantee); dpsgd: DP-SGD; atdp: DP-SGD with per-token loss weights "
                   "(1 sensitive, --weight otherwise) and a rising, jittered, resetting noise multiplier.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Output directory: the merged model (use it as --model DIR), finetune.json (the report) and canaries.json. "
                   "Rerun the same command to resume.")
@click.option("--model", default="tiny", show_default=True,
              help="Base model: a registered name (tiny, smollm2, rewriter) or a model directory. It must not have seen "
                   "the corpus. The report gives it.")
@click.option("--epsilon", type=float, help="Target epsilon per record; the noise multiplier sigma_0 is calibrated to meet it.")
@click.option("--delta", type=float, default=1e-5, show_default=True, help="delta of the guarantee (keep it below 1/records).")
@click.option("--noise-multiplier", type=float, help="sigma_0 instead of --epsilon; the epsilon it gives is reported.")
@click.option("--accountant", type=click.Choice(["pld", "rdp"]), default="pld", show_default=True,
              help="How epsilon is computed, for the calibration of sigma_0 and the certificate alike: pld (privacy loss "
                   "distribution, Google dp-accounting; near-exact, as Opacus's PRV accountant) or rdp (Renyi DP at integer "
                   "orders, as Opacus's RDPAccountant; looser).")
@click.option("--tier", type=click.Choice(TIERS), default="high-entity", show_default=True,
              help="ATDP's detector tier: low-entity (names, codes, numbers), high-entity (all entities), low-contextual "
                   "(+ proper nouns, verbs near entities), high-contextual (+ those verbs' nouns).")
@click.option("--weight", type=float, help="ATDP's loss weight of non-sensitive tokens, in (0, 1] [default: 0.2].")
@click.option("--sensitive-weight-target", type=float,
              help="r: give sensitive tokens this share of the weight; w = a(1-r)/(r(1-a)) with --sensitive-fraction a.")
@click.option("--sensitive-fraction", type=float,
              help="a: the fraction of sensitive tokens, from PUBLIC text (never measured on the private corpus).")
@click.option("--gamma", type=float, default=0.1, show_default=True, help="ATDP: relative rise of the noise multiplier per epoch.")
@click.option("--jitter", type=float, default=0.05, show_default=True, help="ATDP: relative jitter of each epoch's rise, in [0, 1).")
@click.option("--ceiling", type=float, default=1.5, show_default=True,
              help="ATDP: reset the multiplier to sigma_0 when it would exceed ceiling * sigma_0.")
@click.option("--epochs", type=int, default=None, help="Passes over the corpus (each of N/batch steps) [default: 3].")
@click.option("--steps", type=int, default=None,
              help="Instead of --epochs: this many steps in all (one pass; DP samples every step's batch afresh).")
@click.option("--expected-batch-size", type=int, default=16, show_default=True,
              help="Expected batch size b: DP-SGD samples each record with probability q = b/N (Poisson), "
                   "so the privacy cost depends on it.")
@click.option("--lr", type=float, default=1e-3, show_default=True, help="AdamW learning rate.")
@click.option("--clip-norm", type=float, default=1.0, show_default=True, help="C: each record's gradient is clipped to this norm.")
@click.option("--max-length", type=int, default=256, show_default=True, help="Context: the most tokens a record may have.")
@click.option("--truncate", is_flag=True,
              help="Cut a record longer than --max-length to its first tokens (it stays one record) instead of refusing it.")
@click.option("--lora-r", type=int, default=8, show_default=True, help="LoRA rank (peft, all linear layers); 0 trains every weight.")
@click.option("--lora-alpha", type=float, default=16.0, show_default=True, help="LoRA alpha (scaling alpha / r).")
@click.option("--canaries", type=int, default=0, show_default=True,
              help="Plant this many random 6-digit canaries as extra records (for `tokendp eval exposure`).")
@click.option("--canary-repeats", type=int, default=1, show_default=True, help="Copies of each canary (each copy is a record).")
@click.option("--grad-sample-mode", type=click.Choice(["hooks", "functorch"]), default="hooks", show_default=True,
              help="How Opacus computes per-sample gradients (see benchmarks/finetune.py for their speed).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the data order, canaries and LoRA initialisation.")
@click.option("--noise-seed", type=int, default=None,
              help="Seed of the privacy noise and the schedule's jitter [default: from the OS; set only to reproduce a test].")
@click.option("--text-field", default="text", show_default=True, help="Field of each record that holds its text.")
@click.option("--device", default=None, help="torch device [default: cuda if available, else cpu].")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=200, show_default=True,
              help="Steps between checkpoints (a rerun of the same command resumes from the last).")
@threads_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@library_errors
def finetune(data, method, out, model, epsilon, delta, noise_multiplier, accountant, tier, weight, sensitive_weight_target,
             sensitive_fraction, gamma, jitter, ceiling, epochs, steps, expected_batch_size, lr, clip_norm, max_length, truncate, lora_r,
             lora_alpha, canaries, canary_repeats, grad_sample_mode, seed, noise_seed, text_field, device,
             checkpoint_every, threads, as_json) -> None:
    """Fine-tune a causal LM on a private corpus, (epsilon, delta)-DP per record with dpsgd or atdp.

    The guarantee is per record (sample-level): a person with k records is covered only by group
    privacy, about k * epsilon. Proof and what it covers: docs/privacy.md, "DP-SGD and ATDP";
    usage and measurements: docs/finetune.md.
    """
    from tokendp._optional import require
    from tokendp.cli._common import CLIError

    if method != "none":
        require("opacus", "train", f"tokendp finetune --method {method}", why="for per-sample gradients and noise")
    if lora_r:
        require("peft", "train", "tokendp finetune", why="for LoRA (or pass --lora-r 0)")
    if sensitive_weight_target is not None or sensitive_fraction is not None:
        if weight is not None or sensitive_weight_target is None or sensitive_fraction is None:
            raise CLIError("give --weight, or both --sensitive-weight-target and --sensitive-fraction")
        from tokendp.jobs.finetune.data import paper_weight

        weight = paper_weight(target=sensitive_weight_target, fraction=sensitive_fraction)
    from tokendp.jobs.finetune import FinetuneConfig
    from tokendp.jobs.finetune import finetune as run

    use_threads(threads)
    config = FinetuneConfig(method=method, epochs=epochs, steps=steps, batch_size=expected_batch_size, lr=lr, max_length=max_length,
                            truncate=truncate, lora_r=lora_r, lora_alpha=lora_alpha, epsilon=epsilon, delta=delta, noise_multiplier=noise_multiplier,
                            accountant=accountant,
                            clip_norm=clip_norm, tier=tier, weight=0.2 if weight is None else weight, gamma=gamma, jitter=jitter,
                            ceiling=ceiling, canaries=canaries, canary_repeats=canary_repeats, seed=seed, noise_seed=noise_seed,
                            grad_sample_mode=grad_sample_mode, text_field=text_field, checkpoint_every=checkpoint_every)
    start = time.monotonic()
    from tokendp.training import ProgressBar

    with ProgressBar(method, disable=not console().bars(as_json=as_json)) as bar:
        quiet_libraries()  # transformers' own loading and saving bars: the CLI draws one bar
        report = run(data, out=out, model=model, config=config, device=device, on_progress=bar, on_phase=bar.describe)
    if as_json:
        echo_json(report)
        return
    privacy = report["privacy"]
    guarantee = ("no guarantee (method none)" if privacy is None else
                 f"({privacy['epsilon']:.4g}, {privacy['delta']:g})-DP per record ({privacy['accountant']} accountant), "
                 f"sigma_0 {privacy['noise_multiplier']:.4g}")
    click.echo(f"{report['steps']} steps of {report['base']} in {time.monotonic() - start:.0f} s; {guarantee}; "
               f"model in {out} "
               f"(use --model {out}); report in {out}/finetune.json")
