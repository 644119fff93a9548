"""Benchmark: tokendp.divergence.mollify against per-group 20-step bisection on probabilities.

The baseline is the reference approach (one group at a time, 20 bisection steps, each forming
the mixture in probability space and both divergences with powers, a host sync per step), run
in the same process on the same inputs. Prints the median time per generated token of each and
their ratio; the issue requires <= 0.2 (goal 0.1).

    PYTHONPATH=src python benchmarks/mollify.py [--quick] [--threads N] [--alpha A] [--inputs close] [--clock cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tokendp.divergence import mollify
from tokendp.malloc import keep_freed_memory


def bisection_baseline(logp_priv: torch.Tensor, logp_pub: torch.Tensor, *, alpha: float, cap: float) -> list[float]:
    """The reference approach: per group, 20 bisection steps on probabilities (float32)."""
    p = logp_priv.exp()  # (m, V)
    q = logp_pub.exp()  # (V,)
    out = []
    for i in range(p.shape[0]):
        lo, hi = 0.0, 1.0
        for _ in range(20):
            mid = (lo + hi) / 2
            mix = mid * p[i] + (1 - mid) * q
            forward = torch.log(torch.sum(mix**alpha * q ** (1 - alpha))) / (alpha - 1)
            reverse = torch.log(torch.sum(q**alpha * mix ** (1 - alpha))) / (alpha - 1)
            if max(forward.item(), reverse.item()) <= cap:
                lo = mid
            else:
                hi = mid
        out.append(lo)
    return out


def inputs(m: int, vocab: int, seed: int, kind: str = "shifted") -> tuple[torch.Tensor, torch.Tensor]:
    """LM-like rows: a shared public distribution and private rows that shift mass to a few
    tokens ("shifted": every group searches), or rows close to the public one ("close": as
    outside a document's spans, where P itself meets the cap and lam = 1)."""
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(vocab, generator=gen) * 2.5
    pub = torch.log_softmax(base, -1)  # (V,)
    if kind == "close":
        return torch.log_softmax(base + 0.02 * torch.randn(m, vocab, generator=gen), -1), pub
    priv = base + 0.5 * torch.randn(m, vocab, generator=gen)  # (m, V)
    hot = torch.randint(0, vocab, (m, 3), generator=gen)
    priv.scatter_add_(1, hot, torch.full((m, 3), 12.0))
    return torch.log_softmax(priv, -1), pub


def median_ms(fn, repeats: int, clock=time.perf_counter) -> float:
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append((clock() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--alpha", type=float, default=2.0)
    parser.add_argument("--cap", type=float, default=0.02, help="alpha * beta")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--inputs", choices=("shifted", "close"), default="shifted",
                        help="shifted: every group searches; close: private rows near the public one (lam = 1)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: this thread's CPU time (steadier on a shared machine; with --threads 1)")
    args = parser.parse_args()
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the tokendp command does (tokendp.malloc); both sides of the ratio alike
    repeats = 3 if args.quick else 11
    priv, pub = inputs(args.groups, args.vocab, seed=0, kind=args.inputs)
    ours_fn = lambda: mollify(priv, pub, alpha=args.alpha, cap=args.cap)  # noqa: E731
    base_fn = lambda: bisection_baseline(priv, pub, alpha=args.alpha, cap=args.cap)  # noqa: E731
    ours_fn(), base_fn()  # warm up
    ours, base = [], []
    for _ in range(repeats):  # interleaved, so load changes hit both alike
        ours.append(median_ms(ours_fn, 1, clock))
        base.append(median_ms(base_fn, 1, clock))
    lam = ours_fn()
    ref = torch.tensor(base_fn())
    print(f"m={args.groups} V={args.vocab} alpha={args.alpha} cap={args.cap} inputs={args.inputs} float32 CPU "
          f"threads={args.threads} clock={args.clock}")
    print(f"mollify             median {statistics.median(ours):8.2f} ms/token")
    print(f"bisection baseline  median {statistics.median(base):8.2f} ms/token")
    print(f"ratio               {statistics.median(ours) / statistics.median(base):.3f}")
    print(f"max |lam - baseline lam| = {(lam.double() - ref.double()).abs().max().item():.2e} (baseline resolution 2^-20)")


if __name__ == "__main__":
    main()
