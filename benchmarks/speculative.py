"""Benchmark: speculative DP-Fusion (prompt-lookup drafts, exact verification) against the one-token engine.

For ``--docs`` TAB reporting-half excerpts (those of ``benchmarks/rewriter.py``) with their gold
spans (groups by label), ``tokendp.sanitize_batch`` at ``--epsilon`` per group, seeded, runs
once per mode, the modes interleaved batch by batch so that load changes hit all alike:

* ``sequential``: ``speculative=False``, one forward pass per released token;
* ``k=K``: ``speculative=True, draft_tokens=K`` for each K of ``--draft-tokens``.

Reported per mode: released tokens per second, forward passes after the prefill, tokens per
pass, the acceptance rate (drafted tokens released / drafted tokens), and the speed-up =
sequential seconds / this mode's seconds, from the same run (wall clock, and CPU time of this
process, which a busy shared machine disturbs less; ``decode_speedup_cpu`` leaves out the
prefill, which is the same in every mode). ``--batch B`` rewrites B documents per
call (``--batch 1``, the default, one): a pass then serves all B, tokens per pass counts all
of them, and the acceptance rate is not derived. With one document per call and the same
seed, every mode draws the same random numbers in the same order, so it releases the same
tokens unless rounding moves a cell boundary across a draw; ``same_output`` counts them.

  PYTHONPATH=src python benchmarks/speculative.py --model rewriter --docs 4 --draft-tokens 4,8
  PYTHONPATH=src python benchmarks/speculative.py --model tiny --docs 4 --batch 4
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
    """Counts the backend's decoding passes and the positions they verify (wraps ``extend``),
    and the CPU time of its prefills (wraps ``prefill``: the same in every mode)."""

    def __init__(self, backend) -> None:
        self.passes = self.positions = 0
        self.prefill_cpu = 0.0
        extend, prefill = backend.extend, backend.prefill

        def counted_extend(state, tokens):
            self.passes += 1
            self.positions += tokens.shape[1]
            return extend(state, tokens)

        def timed_prefill(*args, **kwargs):
            c0 = time.process_time()
            out = prefill(*args, **kwargs)
            self.prefill_cpu += time.process_time() - c0
            return out

        backend.extend, backend.prefill = counted_extend, timed_prefill

    def take(self) -> tuple[int, int, float]:
        out = (self.passes, self.positions, self.prefill_cpu)
        self.passes = self.positions = 0
        self.prefill_cpu = 0.0
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
    parser.add_argument("--batch", type=int, default=1, help="documents per sanitize_batch call")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the tokendp command does

    from tokendp.backends import load_backend
    from tokendp.jobs.sanitize import sanitize_batch

    backend = load_backend(args.model)
    counter = PassCounter(backend)
    excerpts = report_excerpts(args.docs, min_chars=args.min_chars, max_chars=args.max_chars)
    modes = {"sequential": None, **{f"k={k}": int(k) for k in args.draft_tokens.split(",")}}
    totals = {m: {"seconds": 0.0, "cpu_seconds": 0.0, "decode_cpu_seconds": 0.0, "tokens": 0, "passes": 0, "positions": 0, "same_output": 0} for m in modes}

    released = []  # every token released, EOS included

    def run(batch, k):
        released.clear()
        return sanitize_batch([t for _, t, _ in batch], spans=[s for _, _, s in batch], model=backend,
                              epsilon=args.epsilon, seed=args.seed, max_new_tokens=args.max_new_tokens,
                              speculative=k is not None, draft_tokens=k or 1,
                              on_token=lambda doc, tok: released.append(tok))

    batches = [excerpts[i:i + args.batch] for i in range(0, len(excerpts), args.batch)]
    run(batches[0][:1], None)  # warm-up (allocations, lazy inits)
    counter.take()
    for batch in batches:
        reference = None
        for mode, k in modes.items():
            t0, c0 = time.perf_counter(), time.process_time()
            res = run(batch, k)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            passes, positions, prefill_cpu = counter.take()
            tot = totals[mode]
            tot["seconds"] += seconds
            tot["cpu_seconds"] += cpu
            tot["decode_cpu_seconds"] += cpu - prefill_cpu
            tot["tokens"] += len(released)
            tot["passes"] += passes
            tot["positions"] += positions
            texts = [r.text for r in res]
            reference = texts if reference is None else reference
            tot["same_output"] += sum(a == b for a, b in zip(texts, reference))
            print(f"{','.join(d for d, _, _ in batch)} {mode}: {len(released)} tokens, {passes} passes, "
                  f"{seconds:.1f} s", file=sys.stderr, flush=True)
    base = totals["sequential"]
    result = {"model": backend.name, "docs": len(excerpts), "batch": args.batch, "epsilon": args.epsilon,
              "threads": args.threads, "device": str(backend.device), "modes": {}}
    for mode, tot in totals.items():
        rounds = tot["passes"] + len(batches)  # the prefill releases the first token of each document
        # With one document per batch, each round releases its accepted drafts and one more token.
        drafted = tot["positions"] - tot["passes"]
        accepted = tot["tokens"] - rounds if args.batch == 1 and drafted else None
        result["modes"][mode] = {
            **tot, "tokens_per_second": tot["tokens"] / tot["seconds"],
            "tokens_per_pass": tot["tokens"] / rounds,
            "acceptance": None if accepted is None else accepted / drafted,
            "speedup": base["seconds"] / tot["seconds"], "speedup_cpu": base["cpu_seconds"] / tot["cpu_seconds"],
            "decode_speedup_cpu": base["decode_cpu_seconds"] / tot["decode_cpu_seconds"]}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
