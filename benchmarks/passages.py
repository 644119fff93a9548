"""Benchmark: does each passage of a long document rewrite its own text? (issue 45 item 4)

TAB reporting-half documents at full length (gold spans, the default model and settings, epsilon
``--epsilon``), rewritten in passages as ``tokendp sanitize`` does (docs/sanitize.md, "Long
documents"). The documents are the ``--docs`` ones at evenly spaced ranks of length among those
of ``--min-chars`` to ``--max-chars`` characters (a public rule: lengths only). The tokens
released are split by passage (``run_sanitize``'s ``on_passage`` and ``on_token``), and each
passage's rewrite is held against every passage's source text (its tokens as the document has
them, decoded):

- aligned: the passage whose source shares most of the rewrite's word trigrams is its own
  (share of passages);
- own: the share of the rewrite's word trigrams found in its own passage's source (mean);
- per document, as ``benchmarks/doors.py`` measures a door: kept (the text outside the gold spans
  kept, in order), coverage, repeated sentences and repeated word 8-grams, against the original's.

Each document's result is appended to ``OUT/passages.jsonl`` as it finishes (a rerun skips
those done), and the table printed.

    PYTHONPATH=src python benchmarks/passages.py --docs 3 --out runs/passages --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doors import coverage, repeated_sentences  # noqa: E402
from loops import repeated_ngrams  # noqa: E402
from rewriter import kept  # noqa: E402

from tokendp.backends import load_backend  # noqa: E402
from tokendp.jobs.config import SanitizeConfig  # noqa: E402
from tokendp.jobs.sanitize import prepare_sanitize, run_sanitize  # noqa: E402
from tokendp.text.tab import load_tab  # noqa: E402

TAB = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tab"


def trigrams(text: str) -> Counter:
    words = text.split()
    return Counter(zip(words, words[1:], words[2:]))


def share_from(rewrite: str, source: str) -> float:
    """The share of ``rewrite``'s word trigrams that ``source`` holds."""
    ours, theirs = trigrams(rewrite), trigrams(source)
    return sum(min(c, theirs[g]) for g, c in ours.items()) / max(1, sum(ours.values()))


def alignment(rewrites: list[str], sources: list[str]) -> tuple[list[bool], list[float]]:
    """Per passage: whether its own source shares most of its rewrite (ties to its own), and how much."""
    aligned, own = [], []
    for k, rewrite in enumerate(rewrites):
        shares = [share_from(rewrite, s) for s in sources]
        own.append(shares[k])
        aligned.append(shares[k] >= max(shares))
    return aligned, own


def spread(ids: list[str], texts: dict[str, str], n: int) -> list[str]:
    """``n`` ids at evenly spaced ranks of length (shortest and longest included)."""
    by_length = sorted(ids, key=lambda d: (len(texts[d]), d))
    if n >= len(by_length):
        return by_length
    return [by_length[round(k * (len(by_length) - 1) / max(1, n - 1))] for k in range(n)]


def rewrite_in_passages(text: str, spans, backend, args) -> dict:
    """One document rewritten: the whole release and each passage's source and rewrite."""
    config = SanitizeConfig(epsilon=args.epsilon)
    prepared = prepare_sanitize([text], spans=[list(spans)], config=config, model=backend)
    (doc,) = prepared.documents
    tok = backend.tokenizer
    long = doc.long
    sources = [tok.decode(long.original[p.start:p.end]) for p in long.passages] if long else [text]
    released: list[list[int]] = [[]]

    def on_passage(_i: int, k: int, _n: int) -> None:
        while len(released) <= k:
            released.append([])

    def on_token(_i: int, token: int) -> None:
        released[-1].append(token)

    t0 = time.perf_counter()
    (result,) = run_sanitize(prepared, seed=args.seed, on_token=on_token, on_passage=on_passage)
    rewrites = [tok.decode(r, skip_special_tokens=True) for r in released]
    return {"text": result.text, "sources": sources, "rewrites": rewrites,
            "seconds": time.perf_counter() - t0, "max_new_tokens": result.report.max_new_tokens}


def measure(doc_id: str, original: str, gold, out: dict) -> dict:
    aligned, own = alignment(out["rewrites"], out["sources"])
    return {"id": doc_id, "chars": len(original), "passages": len(out["sources"]), "aligned": sum(aligned),
            "own": statistics.fmean(own), "kept": kept(original, list(gold), out["text"]),
            "coverage": coverage(original, out["text"]), "repeated_sentences": repeated_sentences(out["text"]),
            "repeated_8grams": repeated_ngrams(out["text"], 8), "original_8grams": repeated_ngrams(original, 8),
            "seconds": out["seconds"], "text": out["text"], "rewrites": out["rewrites"]}


def table(rows: list[dict]) -> str:
    lines = ["| document | characters | passages | aligned | own trigrams | kept | coverage | repeated sentences "
             "| repeated 8-grams (original) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['id']} | {r['chars']:,} | {r['passages']} | {r['aligned']}/{r['passages']} | "
                     f"{r['own']:.2f} | {r['kept']:.2f} | {r['coverage']:.2f} | {r['repeated_sentences']:.3f} | "
                     f"{r['repeated_8grams']:.3f} ({r['original_8grams']:.3f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=3)
    parser.add_argument("--min-chars", type=int, default=2000)
    parser.add_argument("--max-chars", type=int, default=8000)
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="rewriter")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data", type=Path, default=TAB)
    parser.add_argument("--out", type=Path, default=Path("runs/passages"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    tab = load_tab(args.data, "report")
    fits = [d for d, t in tab.texts.items() if args.min_chars <= len(t) <= args.max_chars]
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "passages.jsonl"
    done = {json.loads(line)["id"]: json.loads(line) for line in path.read_text().splitlines()} if path.exists() else {}
    backend = load_backend(args.model)
    rows = []
    for doc_id in spread(fits, tab.texts, args.docs):
        if doc_id not in done:
            out = rewrite_in_passages(tab.texts[doc_id], tab.gold[doc_id], backend, args)
            done[doc_id] = measure(doc_id, tab.texts[doc_id], tab.gold[doc_id], out)
            with path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(done[doc_id], ensure_ascii=False) + "\n")
            print(f"{doc_id}: {done[doc_id]['passages']} passages, {done[doc_id]['seconds']:.0f} s", flush=True)
        rows.append(done[doc_id])
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
