"""Benchmark: speculative drafting rules replayed on recorded rewrites, priced by this machine's passes.

Exact speculative decoding releases the same tokens whatever the drafts (with one document and a
seed; docs/privacy.md, "Speculative decoding"), so a drafting rule can be judged without the
model: replay the released tokens of real rewrites through it, count the passes it would need
and the positions each pass verifies, and price each pass by what a pass of that width costs.

1. ``--record FILE``: rewrites ``make demo``'s letter (seeds 1-4) and ``--docs`` TAB excerpts
   (``--split``, seed 0) with the rewriter at epsilon 8 and records each public row, its
   placeholder ids and the released tokens (skipped when FILE exists).
2. Times one decoding pass of the letter's 7 rows at widths 1 to 17 (the last released token
   plus up to 16 guesses), interleaved, median of ``--repeats``, with the cache as long as
   mid-rewrite: the price of a width relative to width 1.
3. Replays every rule at every k of ``--draft-tokens`` and prints the cost per released token
   relative to one pass per token (the forward floor's), for the letter and for all records.

Rules: ``public`` (the shipped :class:`tokendp.drafts.PromptLookup`: the public row only) and
``public+own`` (the rule before issue 26, the baseline: where the public row has no match, the
released tokens themselves are searched, latest occurrence first).

  PYTHONPATH=src python benchmarks/drafts.py --record runs/drafts.json --docs 8 --split tune
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from tokendp.drafts import DocumentDrafts, PromptLookup, _follow  # noqa: E402
from tokendp.malloc import keep_freed_memory  # noqa: E402

WIDTHS = (1, 2, 3, 4, 5, 6, 7, 9, 13, 17)


class PublicAndOwn(DocumentDrafts):
    """The rule before issue 26: without a public match, search the released tokens."""

    def _lookup(self, released: Sequence[int], limit: int) -> list[int]:
        if limit < 1 or not released or _follow(self.public, released, self.lookup.ngram, self.cursor) is not None:
            return super()._lookup(released, limit)
        own = torch.tensor(list(released), dtype=torch.int64)  # (G,)
        found = _follow(own[:-1], released, self.lookup.ngram, len(released))
        return [] if found is None else own[found:found + limit].tolist()


RULES = {"public": DocumentDrafts, "public+own": PublicAndOwn}


def letter() -> tuple[str, list]:
    """``make demo``'s letter and its spans."""
    examples = ROOT / "examples"
    return (examples / "letter.txt").read_text(), json.loads((examples / "letter.spans.json").read_text())


def record(path: Path, docs: int, split: str) -> None:
    """Rewrite and record (public row, placeholder ids, released ids) per document."""
    from rewriter import excerpts

    from tokendp.backends import load_backend
    from tokendp.jobs.sanitize import sanitize_batch

    seen: dict[str, list[int]] = {}
    original = DocumentDrafts.__init__

    def spy(self, lookup, public):  # the drafter sees the public row and the placeholder ids
        original(self, lookup, public)
        seen.update(public=list(public), exclude=sorted(lookup.exclude))

    DocumentDrafts.__init__ = spy
    backend = load_backend("rewriter")
    text, spans = letter()
    jobs = [(f"letter-{s}", text, spans, s) for s in range(1, 5)]
    jobs += [(doc, t, s, 0) for doc, t, s in excerpts(docs, split=split)]
    out = []
    for name, text, spans, seed in jobs:
        released: list[int] = []
        sanitize_batch([text], spans=[spans], model=backend, epsilon=8, seed=seed, speculative=True,
                       on_token=lambda d, t: released.append(t))
        out.append({"name": name, **seen, "released": released})
        print(f"{name}: {len(released)} tokens", file=sys.stderr, flush=True)
    DocumentDrafts.__init__ = original
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))


def pass_costs(repeats: int) -> dict[int, float]:
    """Seconds of one pass at each width over seconds at width 1, the letter's rows."""
    from tokendp.fusion import FusionJob
    from tokendp.jobs.config import SanitizeConfig
    from tokendp.jobs.sanitize import prepare_sanitize

    text, spans = letter()
    prepared = prepare_sanitize([text], spans=[spans], model="rewriter", config=SanitizeConfig(epsilon=8))
    backend = prepared.backend
    state, _ = backend.prefill(FusionJob(prepared.method, prepared.delta, prepared.documents).sequences())
    backend.extend(state, torch.full((1, 80), 300))  # a cache as long as mid-rewrite
    times: dict[int, list[float]] = {w: [] for w in WIDTHS}
    for _ in range(repeats):
        for w in WIDTHS:
            start = time.perf_counter()
            backend.extend(state, torch.full((1, w), 300))
            times[w].append(time.perf_counter() - start)
            backend.rollback(state, torch.tensor([w]))
    one = statistics.median(times[1])
    return {w: statistics.median(t) / one for w, t in times.items()}


def replay(rec: dict, rule: type[DocumentDrafts], k: int, cost: dict[int, float]) -> float:
    """The summed price of the passes ``rule`` needs to release ``rec``'s tokens (the first
    comes from the prefill); each pass verifies the last token and the guesses, and releases
    the guesses up to the first miss plus one more token."""
    drafts = rule(PromptLookup(max_tokens=k, exclude=frozenset(rec["exclude"])), rec["public"])
    out, n, total = rec["released"], 1, 0.0
    while n < len(out):
        guess = drafts.propose(out[:n], len(out) - n)
        hits = 0
        while hits < len(guess) and n + hits < len(out) and out[n + hits] == guess[hits]:
            hits += 1
        n += hits + 1
        total += cost[1 + len(guess)]
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, required=True, help="the recording (made first when absent)")
    parser.add_argument("--docs", type=int, default=8)
    parser.add_argument("--split", default="tune", choices=("tune", "report"))
    parser.add_argument("--draft-tokens", default="4,6,8,12")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    keep_freed_memory()
    if not args.record.exists():
        record(args.record, args.docs, args.split)
    records = json.loads(args.record.read_text())
    measured = pass_costs(args.repeats)
    cost = {w: float(np.interp(w, list(measured), list(measured.values()))) for w in range(1, max(WIDTHS) + 1)}
    result = {"pass_cost": {w: round(c, 3) for w, c in measured.items()}, "cost_per_token": {}}
    for name, rule in RULES.items():
        for k in map(int, args.draft_tokens.split(",")):
            if k + 1 > max(WIDTHS):
                raise SystemExit(f"--draft-tokens {k}: at most {max(WIDTHS) - 1}")
            per = {"letter": [r for r in records if r["name"].startswith("letter")], "all": records}
            result["cost_per_token"][f"{name} k={k}"] = {
                part: round(sum(replay(r, rule, k, cost) for r in rs) / sum(len(r["released"]) for r in rs), 3)
                for part, rs in per.items()}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
