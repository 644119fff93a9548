"""Benchmark: one very long document end to end (issue 34: a 60,000-character document on the
default model, one certificate, memory bounded by the passage).

The document is TAB's reporting-half judgments joined in their order (a blank line between
them, their gold spans shifted) until it reaches ``--chars`` characters: real court text with
real spans, far longer than the rewriter's training passages. It is rewritten once with
``tokendp.sanitize`` (the default model and settings, ``--accounting``), and the figures
recorded: passages, T, tokens released, seconds, the process's peak resident memory before and
after the rewrite (the model's share is the first), and the report's certificate.

    PYTHONPATH=src python benchmarks/long_document.py --chars 60000 --accounting filter --out runs/long-60k.json
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch

from tokendp import sanitize
from tokendp.backends import load_backend
from tokendp.text.tab import load_tab

TAB = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tab"


def joined_document(chars: int, split: str = "report") -> tuple[str, list[dict], list[str]]:
    """TAB documents of ``split`` joined by blank lines until the text has at least ``chars``
    characters (whole documents only): the text, its spans and the document ids used."""
    tab = load_tab(TAB, split)
    parts, spans, ids, offset = [], [], [], 0
    for doc_id, text in tab.texts.items():
        if offset >= chars:
            break
        spans += [{"start": s.start + offset, "end": s.end + offset, "label": s.label} for s in tab.gold[doc_id]]
        parts.append(text)
        ids.append(doc_id)
        offset += len(text) + 2
    return "\n\n".join(parts), spans, ids


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", type=int, default=60_000)
    parser.add_argument("--model", default="rewriter")
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--accounting", choices=["fixed", "filter"], default="filter")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    text, spans, ids = joined_document(args.chars)
    backend = load_backend(args.model)
    loaded = peak_rss_mib()
    released = 0
    start = time.perf_counter()

    def progress(_doc: int, _token: int) -> None:
        nonlocal released
        released += 1
        if released % 500 == 0:
            print(f"{released} tokens, {time.perf_counter() - start:.0f} s", flush=True)

    result = sanitize(text, spans=spans, model=backend, epsilon=args.epsilon, accounting=args.accounting, seed=args.seed,
                      on_token=progress)
    seconds = time.perf_counter() - start
    report = result.report.to_dict()
    record = {"chars": len(text), "documents": ids, "spans": len(spans), "model": args.model,
              "accounting": args.accounting, "epsilon": args.epsilon, "seed": args.seed,
              "threads": torch.get_num_threads(), "passages": report["passages"],
              "max_new_tokens": report["max_new_tokens"], "tokens_generated": report["tokens_generated"],
              "released_chars": len(result.text), "seconds": seconds, "incomplete": report["incomplete"],
              "peak_rss_mib_model_loaded": loaded, "peak_rss_mib_after": peak_rss_mib(),
              "groups": [{k: g[k] for k in ("label", "n_spans", "n_tokens", "epsilon") if k in g}
                         for g in report["groups"]], "alpha": report["alpha"]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    print(json.dumps({k: v for k, v in record.items() if k not in ("documents", "groups")}, indent=1))


if __name__ == "__main__":
    main()
