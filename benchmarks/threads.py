"""Benchmark: the bundled letter's bare forward floor, quiet and beside one busy process (issue 26).

The rows of ``make demo`` (examples/letter.txt with its spans, the rewriter's template, 7 rows)
decode ``--tokens`` tokens one pass per token with no mechanism, the floor of any DP-Fusion job.
Each setting runs in a fresh process, since OpenMP reads its wait policy when it starts:

* ``policy``: OpenMP's default wait (libgomp spins a while before it sleeps),
  ``OMP_WAIT_POLICY=PASSIVE`` (a thread that waits sleeps at once), or ``spin=N``
  (``GOMP_SPINCOUNT=N``: spin N rounds, then sleep);
* ``threads``: torch's intra-op threads;
* ``load``: quiet, or beside one CPU-bound process (a Python busy loop) that holds one core.

The figure of merit is busy / quiet for each setting, from the same run: a job that shares a
2-core machine with one busy neighbour should slow down about 2x at most (it loses one of its
two cores), not collapse because its threads wait for each other spinning.

Run: ``PYTHONPATH=src python benchmarks/threads.py`` (a few minutes on 2 cores, the model converted).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(tokens: int, threads: int, repeats: int) -> float:
    """Best-of-``repeats`` seconds for ``tokens`` bare decoding steps of the letter's rows."""
    import torch

    from tokendp.backends import RowSequence, load_backend
    from tokendp.generation import generate, make_generator
    from tokendp.mechanisms import MechanismStep
    from tokendp.text.contexts import build_contexts, placeholder_id, prompt_template
    from tokendp.text.spans import Span

    torch.set_num_threads(threads)
    backend = load_backend("rewriter")
    tok = backend.tokenizer
    text = (ROOT / "examples" / "letter.txt").read_text()
    spans = [Span.from_dict(s) for s in json.loads((ROOT / "examples" / "letter.spans.json").read_text())]
    ctx = build_contexts(text, spans, tok, template=prompt_template(tok, options=backend.options),
                         placeholder=placeholder_id(tok, options=backend.options))
    seq = RowSequence.from_ids(ctx.rows, public_prefix=ctx.public_prefix)

    def step(logits, docs, temperature):
        return MechanismStep(torch.log_softmax(logits[:, 0] / temperature, -1), {})  # (N, V)

    def run() -> float:
        start = time.perf_counter()
        generate(backend, [seq], step, max_new_tokens=tokens, generator=make_generator(0), eos_ids=[])
        return time.perf_counter() - start

    run()  # warm-up
    return min(run() for _ in range(repeats))


def setting(policy: str, threads: int, busy: bool, args) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("OMP_WAIT_POLICY", None)
    env.pop("GOMP_SPINCOUNT", None)
    if policy == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    elif policy.startswith("spin="):
        env["GOMP_SPINCOUNT"] = policy.split("=", 1)[1]
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        out = subprocess.run([sys.executable, __file__, "--child", "--tokens", str(args.tokens), "--threads",
                              str(threads), "--repeats", str(args.repeats)], env=env, check=True,
                             capture_output=True, text=True)
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--policies", nargs="*", default=["default", "passive"],
                        help="default, passive, or spin=N (GOMP_SPINCOUNT)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(measure(args.tokens, args.threads[0], args.repeats))
        return
    rows = []
    for policy in args.policies:
        for threads in args.threads:
            quiet, busy = (setting(policy, threads, b, args) for b in (False, True))
            rows.append({"policy": policy, "threads": threads, "quiet_s": round(quiet, 2), "busy_s": round(busy, 2),
                         "busy_over_quiet": round(busy / quiet, 2)})
            print(json.dumps(rows[-1]), flush=True)
    print("| wait policy | threads | quiet | beside one busy process | ratio |\n|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['policy']} | {r['threads']} | {r['quiet_s']:.2f} s | {r['busy_s']:.2f} s "
              f"| **{r['busy_over_quiet']:.2f}** |")


if __name__ == "__main__":
    main()
