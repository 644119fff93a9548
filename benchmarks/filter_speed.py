"""Benchmark: the time per released token of DP-Fusion under the per-group Renyi filter against
the fixed accounting, in the same run (issue 34: the filter may cost at most 5% more).

Both accountings rewrite the same documents with ``tokendp.sanitize`` on the same model, seed,
epsilon and threads, alternating (fixed, filter, fixed, filter, ...) so that the machine's drift
falls on both alike; each accounting's figure is its best seconds per released token over
``--repeats`` runs. Documents: the bundled letter, and a long TAB document (by default the
longest of the reporting half, cut at ``--long-chars``; it runs passage by passage when it is
longer than the passage size). The rewrites differ (the filter mixes differently), so the token
counts differ too: the ratio is per released token.

    PYTHONPATH=src python benchmarks/filter_speed.py --threads 2 --out runs/filter-speed.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from tokendp import sanitize
from tokendp.backends import load_backend
from tokendp.eval.candidates import truncate_document
from tokendp.text.tab import load_tab

ROOT = Path(__file__).resolve().parents[1]
TAB = ROOT.parent / "shared" / "data" / "tab"


def documents(long_chars: int) -> list[tuple[str, str, list[dict]]]:
    """(name, text, spans): the bundled letter and the reporting half's longest TAB document."""
    letter = (ROOT / "examples" / "letter.txt").read_text(encoding="utf-8")
    spans = json.loads((ROOT / "examples" / "letter.spans.json").read_text(encoding="utf-8"))
    tab = load_tab(TAB, "report")
    doc_id = max(tab.texts, key=lambda d: len(tab.texts[d]))
    text, gold = truncate_document(tab.texts[doc_id], tab.gold[doc_id], max_chars=long_chars)
    return [("letter", letter, spans), (f"tab {doc_id} ({len(text)} chars)", text,
                                        [{"start": s.start, "end": s.end, "label": s.label} for s in gold])]


def per_token(backend, text: str, spans: list[dict], *, accounting: str, epsilon: float, seed: int) -> tuple[float, int]:
    """Seconds per released token of one rewrite, and the tokens released."""
    start = time.perf_counter()
    result = sanitize(text, spans=spans, model=backend, epsilon=epsilon, accounting=accounting, seed=seed)
    seconds = time.perf_counter() - start
    tokens = max(1, result.report.tokens_generated)
    return seconds / tokens, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="rewriter")
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--long-chars", type=int, default=4000, help="cut the long document at this many characters")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    backend = load_backend(args.model)
    rows = []
    for name, text, spans in documents(args.long_chars):
        best = {"fixed": float("inf"), "filter": float("inf")}
        tokens = {"fixed": [], "filter": []}
        for r in range(args.repeats):
            for accounting in ("fixed", "filter"):
                t, n = per_token(backend, text, spans, accounting=accounting, epsilon=args.epsilon, seed=args.seed + r)
                best[accounting] = min(best[accounting], t)
                tokens[accounting].append(n)
                print(f"{name}: {accounting} {n} tokens, {1000 * t:.1f} ms per token", flush=True)
        ratio = best["filter"] / best["fixed"]
        rows.append({"document": name, "ms_per_token": {k: 1000 * v for k, v in best.items()}, "tokens": tokens,
                     "filter_over_fixed": ratio})
        print(f"{name}: filter / fixed = {ratio:.3f} per released token", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"model": args.model, "epsilon": args.epsilon, "threads": torch.get_num_threads(),
                                        "repeats": args.repeats, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
