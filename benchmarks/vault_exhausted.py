"""Benchmark: does a vault release take longer when a unit's budget is spent? (issue 46, item 4)

A reader who can time releases must learn nothing from the time about whether a person's budget
is spent (docs/privacy.md, "The vault: one lifetime filter per unit"). This plans one rewrite of
a stored document through the vault's own planner (:func:`tokendp.service.vault.release.plan_rewrite`)
and runs it, alternately, with every unit FRESH (each reservation B_rel) and EXHAUSTED
(each reservation 0), same document, same seeds, same T, and reports the time per generated
token of each and their ratio (exhausted / fresh; the target is within 1.05); and the same
ratio for the mechanism's step alone, replayed on one release's recorded steps (``step_ratio``),
which the forward passes do not dilute.

    PYTHONPATH=src python benchmarks/vault_exhausted.py --model tiny --rounds 6 --tokens 48
    PYTHONPATH=src python benchmarks/vault_exhausted.py --model rewriter --rounds 4 --tokens 64 --out runs/vault-exhausted.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from tokendp.backends import load_backend
from tokendp.jobs.sanitize import run_sanitize_spending
from tokendp.service.keys import Caller, Tenant
from tokendp.service.vault.release import RewriteParams, RewriteRequest, plan_rewrite
from tokendp.service.vault.store import Settings, StoredDocument

LETTER = ("Dear Dr Helen Marsh,\n\nI saw your patient Mr Tomas Lindqvist (born 4 March 1961) in the clinic in Leeds on "
          "2 June 2024. He reported recurrent chest pain on exertion for three months. His brother, Erik Lindqvist, "
          "had a myocardial infarction at 52. I have arranged an exercise test at St James's Hospital and will see "
          "him again in six weeks.\n\nYours sincerely,\nDr Anna Berg\n")
SPANS = [("Helen Marsh", "PERSON", "dr-marsh"), ("Tomas Lindqvist", "PERSON", "patient-7"),
         ("4 March 1961", "DATE", "patient-7"), ("Leeds", "LOC", None), ("2 June 2024", "DATE", "patient-7"),
         ("Erik Lindqvist", "PERSON", "relative-3"), ("St James's Hospital", "ORG", None), ("Anna Berg", "PERSON", None)]


def document() -> StoredDocument:
    spans = []
    for text, label, subject in SPANS:
        start = LETTER.index(text)
        spans.append({"start": start, "end": start + len(text), "label": label, **({"subject": subject} if subject else {})})
    return StoredDocument("letter", "v1", "", LETTER, tuple(spans), None, "confirmed")


def run_once(backend, tokens: int, epsilon: float, exhausted: bool, seed: int) -> tuple[float, int]:
    """Plan and run one release; (seconds generating, tokens generated)."""
    tenant = Tenant("clinic", 8.0, 1e-5)
    settings = Settings(alpha=3.0, budget=3.1983085199570143)  # the vault's at a lifetime epsilon of 8
    release = plan_rewrite(RewriteRequest(Caller(tenant, "reader", "h", "p"), document(), RewriteParams(epsilon, tokens)),
                           backend, settings, max_tokens=tokens)
    reserved = {u: 0.0 if exhausted else release.release_budget for u in release.units}
    release.use(reserved)
    started = time.perf_counter()
    (result,), _ = run_sanitize_spending(release.job, seed=[seed])
    return time.perf_counter() - started, result.report.tokens_generated


def step_ratio(backend, tokens: int, epsilon: float, repeats: int) -> dict:
    """The mechanism's step alone, which the forward passes dilute and the machine's load blurs:
    the steps of one fresh release are recorded, then replayed alternately as they were (every
    unit fresh) and with every unit spent (remaining 0, and the weight ceilings the code under
    test gives a unit reserved 0). Seconds per step of each, summed over the steps."""
    from tokendp.fusion import FusionJob
    from tokendp.mechanisms import DPFusionFilter

    recorded, real = [], DPFusionFilter.step

    def spy(self, logits, **kwargs):
        recorded.append((logits.clone(), {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}))
        return real(self, logits, **kwargs)

    DPFusionFilter.step = spy
    try:
        run_once(backend, tokens, epsilon, False, 1)
    finally:
        DPFusionFilter.step = real
    tenant, settings = Tenant("clinic", 8.0, 1e-5), Settings(alpha=3.0, budget=3.1983085199570143)
    release = plan_rewrite(RewriteRequest(Caller(tenant, "reader", "h", "p"), document(), RewriteParams(epsilon, tokens)),
                           backend, settings, max_tokens=tokens)
    release.use({u: 0.0 for u in release.units})
    m = len(release.units)
    ceilings = FusionJob(release.job.method, release.job.delta, release.job.documents,
                         accounting=release.job.accounting).lam_t[:1, :m]  # (1, m): a unit reserved 0
    mech = DPFusionFilter(alpha=settings.alpha)
    seconds = {"fresh": 0.0, "exhausted": 0.0}
    for r in range(repeats):
        for kind in (("fresh", "exhausted") if r % 2 == 0 else ("exhausted", "fresh")):
            started = time.perf_counter()
            for logits, kwargs in recorded:
                if kind == "exhausted":
                    kwargs = {**kwargs, "remaining": torch.zeros_like(kwargs["remaining"]), "max_lam": ceilings}
                mech.step(logits, **kwargs)
            seconds[kind] += time.perf_counter() - started
    steps = len(recorded) * repeats
    return {"steps": len(recorded), "fresh_s_per_step": seconds["fresh"] / steps,
            "exhausted_s_per_step": seconds["exhausted"] / steps, "step_ratio": seconds["exhausted"] / seconds["fresh"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--tokens", type=int, default=48, help="T of each release")
    parser.add_argument("--epsilon", type=float, default=6.0, help="each unit's epsilon for one release")
    parser.add_argument("--rounds", type=int, default=6, help="fresh/exhausted pairs, alternating, after a warm-up")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--step-repeats", type=int, default=10, help="replays of the recorded steps, each kind")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    backend = load_backend(args.model)
    run_once(backend, args.tokens, args.epsilon, False, 0)  # warm-up: caches, allocations
    per_token = {"fresh": [], "exhausted": []}
    for r in range(args.rounds):
        order = ("fresh", "exhausted") if r % 2 == 0 else ("exhausted", "fresh")
        for kind in order:
            seconds, generated = run_once(backend, args.tokens, args.epsilon, kind == "exhausted", 1 + r)
            per_token[kind].append(seconds / max(generated, 1))
    fresh, spent = statistics.median(per_token["fresh"]), statistics.median(per_token["exhausted"])
    out = {"model": args.model, "tokens": args.tokens, "epsilon": args.epsilon, "rounds": args.rounds,
           "threads": args.threads, "fresh_s_per_token": fresh, "exhausted_s_per_token": spent,
           "ratio": spent / fresh, **step_ratio(backend, args.tokens, args.epsilon, args.step_repeats),
           "per_token": per_token}
    print(json.dumps({k: v for k, v in out.items() if k != "per_token"}, indent=2))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
