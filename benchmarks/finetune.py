"""Benchmark: seconds per training step of ATDP and DP-SGD against non-private training of the
same model and batch, with Opacus's per-sample gradients by hooks and by functorch.

Setting: the embedded ``tiny`` model (4.5M parameters, every weight trained, tied embeddings),
``--batch`` records of ``--tokens`` tokens, AdamW, float32 on CPU. Each mode runs ``--steps``
steps after one warm-up step, interleaved over ``--repeats`` rounds; the best round counts.
A step is the trainer's own (:class:`tokendp.jobs.finetune.train.Trainer`): forward, backward, and for
the DP modes per-sample gradients, clipping, noise, the ledger charge. ATDP differs from DP-SGD
only in its loss weights and its sigma, which cost nothing, so ``atdp`` and ``dpsgd`` share the
per-sample-gradient mode. Ghost clipping is not measured: Opacus 1.6 refuses tied parameters
with it (``NotImplementedError: Parameter tying is not supported with Ghost Clipping``).

Reported: seconds per step and the ratio to the non-private step, all from one run.

Run: ``PYTHONPATH=src python benchmarks/finetune.py`` (a few minutes on 2 busy CPU cores).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from tokendp.jobs.finetune.data import Record
from tokendp.jobs.finetune.run import load_base
from tokendp.jobs.finetune.train import Plan, Trainer


def _trainer(mode: str, records: list[Record], batch: int, steps: int) -> Trainer:
    backend = load_base("tiny")
    model = backend.model.requires_grad_(True)
    private = mode != "none"
    plan = Plan(private=private, epochs=1, steps_per_epoch=steps + 1, batch_size=batch, sampling_rate=batch / len(records),
                sigmas=(1.0,) * (steps + 1) if private else (), clip_norm=1.0, lr=1e-4, epsilon_budget=1e9 if private else None,
                delta=1e-5 if private else None)
    return Trainer(model, records, plan, pad_id=0, workdir=Path(tempfile.mkdtemp()), data_generator=torch.Generator().manual_seed(0),
                   noise_generator=torch.Generator().manual_seed(1) if private else None,
                   grad_sample_mode="functorch" if mode == "dpsgd-functorch" else "hooks", checkpoint_every=10**9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    records = [Record(tuple(torch.randint(10, 8000, (args.tokens,), generator=gen).tolist()), (1.0,) * args.tokens)
               for _ in range(args.batch * 4)]
    modes = ("none", "dpsgd-hooks", "dpsgd-functorch")
    best = {m: float("inf") for m in modes}
    for _ in range(args.repeats):
        for mode in modes:
            trainer = _trainer(mode, records, args.batch, args.steps)
            batch = list(range(args.batch))
            trainer.model.train()
            trainer._one_step(batch)  # warm-up
            start = time.perf_counter()
            for step in range(args.steps):
                trainer.step = step + 1
                trainer._one_step(batch)
            best[mode] = min(best[mode], (time.perf_counter() - start) / args.steps)
    result = {"setting": vars(args), "seconds_per_step": best,
              "ratio_to_none": {m: best[m] / best["none"] for m in modes}}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
