"""Benchmark: the DP-Fusion step over many positions at once (eval's teacher forcing, a batch of
documents), searched in cache-sized slices of positions against one batch and against one
position at a time, in the same run.

On a CPU the mollifier search's passes over (positions, m, K, V) stream from memory once the
batch outgrows the cache; ``tokendp.divergence`` therefore searches slices of at most
``_SLICE_BYTES`` of float64 ratios. This measures the three ways on the same logits (a public
row and m private rows per position, shifted by noise of ``--spread``), interleaved, best of
``--repeats``, and prints seconds per position and the ratios.

    PYTHONPATH=src python benchmarks/mollify_positions.py [--positions 32] [--alphas 2,3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

import tokendp.divergence as divergence
from tokendp.mechanisms import DPFusion


def logits_for(positions: int, groups: int, vocab: int, spread: float, seed: int = 0) -> torch.Tensor:
    """(positions, 1 + m, V): a public row and m private rows that differ from it by noise."""
    gen = torch.Generator().manual_seed(seed)
    public = torch.randn(positions, 1, vocab, generator=gen) * 3
    return torch.cat([public, public + spread * torch.randn(positions, groups, vocab, generator=gen)], dim=1)


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def measure(logits: torch.Tensor, alpha: float, beta: float, repeats: int) -> dict[str, float]:
    """Best seconds per position of each way, interleaved."""
    positions, groups = logits.shape[0], logits.shape[1] - 1
    betas = torch.full((positions, groups), beta)
    step = DPFusion(alpha).step
    sliced = divergence._SLICE_BYTES

    def batch() -> None:
        step(logits, betas=betas)

    def loop() -> None:
        for p in range(positions):
            step(logits[p:p + 1], betas=betas[p:p + 1])

    ways = {"sliced": (sliced, batch), "one batch": (math.inf, batch), "one position at a time": (sliced, loop)}
    best = {name: math.inf for name in ways}
    for _ in range(repeats):
        for name, (slice_bytes, run) in ways.items():
            divergence._SLICE_BYTES = slice_bytes
            try:
                best[name] = min(best[name], timed(run) / positions)
            finally:
                divergence._SLICE_BYTES = sliced
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--positions", type=int, default=32, help="positions per call (eval's POSITIONS is 32)")
    parser.add_argument("--groups", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=49_152, help="SmolLM2's vocabulary")
    parser.add_argument("--spread", type=float, default=1.0, help="noise between the private and public logits")
    parser.add_argument("--alphas", default="2,3")
    parser.add_argument("--beta", type=float, default=0.02)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logits = logits_for(args.positions, args.groups, args.vocab, args.spread)
    rows = []
    for alpha in (float(a) for a in args.alphas.split(",")):
        best = measure(logits, alpha, args.beta, args.repeats)
        row = {"alpha": alpha, **{f"{k} s/position": round(v, 4) for k, v in best.items()},
               "one batch / sliced": round(best["one batch"] / best["sliced"], 2),
               "one at a time / sliced": round(best["one position at a time"] / best["sliced"], 2)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:
        settings = {k: v for k, v in vars(args).items() if k != "out"}
        Path(args.out).write_text(json.dumps({"settings": settings, "torch": torch.__version__, "rows": rows},
                                             indent=2) + "\n")


if __name__ == "__main__":
    main()
