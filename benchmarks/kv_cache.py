"""Benchmark: the growing key/value cache against transformers' DynamicLayer, same run, same rows.

``--rows`` rows of a context of ``--context`` tokens (a TAB judgment's tokens, repeated to that
length) are prefilled once per cache kind, then ``--steps`` tokens are decoded one pass per token
with no mechanism (bare forward passes); the two kinds alternate ``--repeats`` times and each keeps
its best. DynamicLayer appends with ``torch.cat`` (the whole cache copied each step);
GrowingLayer writes one position into a buffer with room (``tokendp.backends.cache``). The figure
is the ratio of milliseconds per step, at each context length.

    PYTHONPATH=src python benchmarks/kv_cache.py --rows 49 --context 500,1500,3000 --steps 16
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import DynamicCache

from tokendp.backends import RowSequence, load_backend
from tokendp.backends.cache import growing
from tokendp.text.tab import load_tab

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tab"


def per_step(backend, sequences, steps: int) -> float:
    """Seconds per decoding step after one prefill of ``sequences``."""
    state, _ = backend.prefill(sequences)
    tokens = torch.full((len(sequences),), 13)
    start = time.perf_counter()
    for _ in range(steps):
        backend.decode(state, tokens)
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="rewriter")
    parser.add_argument("--rows", type=int, default=49)
    parser.add_argument("--context", default="500,1500,3000")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    backend = load_backend(args.model)
    text = next(iter(load_tab(DATA, "report").texts.values()))
    ids = backend.tokenizer(text, add_special_tokens=False)["input_ids"]
    kinds = {"DynamicLayer": lambda: DynamicCache(config=backend.model.config),
             "GrowingLayer": lambda: growing(DynamicCache(config=backend.model.config))}
    results = []
    for context in (int(c) for c in args.context.split(",")):
        row = (ids * (context // len(ids) + 1))[:context]
        sequences = [RowSequence.from_ids([row])] * args.rows  # one object: prefilled once, copied
        best = {kind: float("inf") for kind in kinds}
        for _ in range(args.repeats):
            for kind, make in kinds.items():
                backend._new_cache = make
                best[kind] = min(best[kind], per_step(backend, sequences, args.steps))
        results.append({"context": context, "rows": args.rows,
                        **{f"{k}_ms_per_step": round(1000 * v, 1) for k, v in best.items()},
                        "ratio": round(best["DynamicLayer"] / best["GrowingLayer"], 2)})
        print(json.dumps(results[-1]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
