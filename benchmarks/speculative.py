"""Benchmark: speculative DP-Fusion (prompt-lookup drafts, exact verification) against the one-token engine.

For each of ``--docs`` TAB reporting-half excerpts with their gold spans (groups by label),
``tokendp.sanitize_batch`` at ``--epsilon`` per group, seeded, runs once per mode, the modes
interleaved document by document so that load changes hit both alike:

* ``sequential``: ``speculative=False``, one forward pass per released token;
* ``k=K``: ``speculative=True, draft_tokens=K`` for each K of ``--draft-tokens``.

Reported per mode: released tokens per second (all documents), forward passes after the
prefill, tokens per pass, the acceptance rate (drafted tokens released / drafted tokens), and
the speed-up = sequential seconds / this mode's seconds, from the same run (wall clock, and
CPU time of this process, which a busy shared machine disturbs less). With one document
per batch and the same seed, each mode releases the same tokens up to floating-point ties
(the logits of a position come from a pass of another width); ``same_output`` counts them.

  PYTHONPATH=src python benchmarks/speculative.py --model rewriter --docs 4
  PYTHONPATH=src python benchmarks/speculative.py --model tiny --docs 4 --draft-tokens 2,4,8
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rewriter import report_excerpts  # noqa: E402  (the same excerpts as the rewriter's benchmark)

from tokendp.malloc import keep_freed_memory  # noqa: E402


class PassCounter:
    """Counts the backend's decoding passes and the positions they verify (wraps ``extend``)."""

    def __init__(self, backend) -> None:
        self.passes = self.positions = 0
        inner = backend.extend

        def extend(state, tokens):
            self.passes += 1
            self.positions += tokens.shape[1]
            return inner(state, tokens)

        backend.extend = extend

    def take(self) -> tuple[int, int]:
        out = (self.passes, self.positions)
        self.passes = self.positions = 0
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="rewriter", help="rewriter, smollm2, tiny or a model directory")
    parser.add_argument("--docs", type=int, default=4)
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--draft-tokens", default="4", help="comma-separated K values to compare")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="T (default: sanitize's, 1.2x + 16)")
    parser.add_argument("--min-chars", type=int, default=250)
    parser.add_argument("--max-chars", type=int, default=1100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the tokendp command does

    from tokendp.backends import load_backend
    from tokendp.sanitize import sanitize_batch

    backend = load_backend(args.model)
    counter = PassCounter(backend)
    excerpts = report_excerpts(args.docs, min_chars=args.min_chars, max_chars=args.max_chars)
    modes = {"sequential": None, **{f"k={k}": int(k) for k in args.draft_tokens.split(",")}}
    totals = {m: {"seconds": 0.0, "cpu_seconds": 0.0, "tokens": 0, "passes": 0, "positions": 0, "same_output": 0} for m in modes}

    released = []  # every token released, EOS included

    def run(text, spans, k):
        released.clear()
        return sanitize_batch([text], spans=[spans], model=backend, epsilon=args.epsilon, seed=args.seed,
                              max_new_tokens=args.max_new_tokens, speculative=k is not None,
                              draft_tokens=k or 1, on_token=lambda doc, tok: released.append(tok))[0]

    run(*excerpts[0][1:], None)  # warm-up (allocations, lazy inits)
    counter.take()
    for doc_id, text, spans in excerpts:
        reference = None
        for mode, k in modes.items():
            t0, c0 = time.perf_counter(), time.process_time()
            res = run(text, spans, k)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            passes, positions = counter.take()
            tot = totals[mode]
            tot["seconds"] += seconds
            tot["cpu_seconds"] += cpu
            tot["tokens"] += len(released)
            tot["passes"] += passes
            tot["positions"] += positions
            reference = res.text if reference is None else reference
            tot["same_output"] += res.text == reference
            print(f"{doc_id} {mode}: {len(released)} tokens, {passes} passes, {seconds:.1f} s",
                  file=sys.stderr, flush=True)
    base, base_cpu = totals["sequential"]["seconds"], totals["sequential"]["cpu_seconds"]
    result = {"model": backend.name, "docs": len(excerpts), "epsilon": args.epsilon, "threads": args.threads,
              "device": str(backend.device), "modes": {}}
    for mode, tot in totals.items():
        # Every pass after the prefill releases one token without a draft; the rest are drafts released.
        drafted = tot["positions"] - tot["passes"]
        accepted = tot["tokens"] - len(excerpts) - tot["passes"]  # the prefill's logits release one token per document
        result["modes"][mode] = {
            **tot, "tokens_per_second": tot["tokens"] / tot["seconds"],
            "tokens_per_pass": tot["tokens"] / (tot["passes"] + len(excerpts)),
            "acceptance": accepted / drafted if drafted else None, "speedup": base / tot["seconds"],
            "speedup_cpu": base_cpu / tot["cpu_seconds"]}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
