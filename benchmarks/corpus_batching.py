"""Benchmark: static against continuous batching of a corpus, documents per minute against the
batch size, in the same run (issue 27, item 3).

Setting: ``--docs`` TAB documents (sorted ids), each cut at a space before a length drawn from
``--min-chars`` to ``--max-chars`` (a fixed draw from ``--seed``, so the corpus has documents of
very different lengths), with the gold spans inside the cut; DP-Fusion at ``--epsilon`` with
``--seed``, T the default (1.2x the document's tokens + 16, so T differs per document as well),
on the local engine with one torch thread (``--threads``). For every batch size of
``--batch-sizes`` it runs the corpus with ``batching="static"`` (batches of that many documents,
each decoded until its last document finishes) and ``"continuous"`` (that many documents decoding
at once, a finished one's slot refilled at once), in interleaved order, and prints per run:

* documents per minute over the wall time and over the process's CPU time (a loaded machine
  moves the wall clock; with one thread the CPU time moves less), and continuous / static of
  both at each batch size;
* the mean number of documents per decoding step (how full the batch stays) and the steps;
* whether every record (text and report) equals the static batch-size-1 run's, i.e. the document
  decoded alone with its seed.

Run: ``PYTHONPATH=src python benchmarks/corpus_batching.py`` (a few minutes on one core with the
default ``--model tiny``); ``--json`` writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import torch

from tokendp import fusion
from tokendp.engines import sanitize_corpus

TAB = Path(__file__).resolve().parents[2] / "shared" / "data" / "tab"


def corpus(path: Path, docs: int, lo: int, hi: int, seed: int, tab: Path) -> Path:
    """JSONL records {id, text, spans} from TAB, each text cut at a space before a random length."""
    texts = json.loads((tab / "texts.json").read_text(encoding="utf-8"))
    gold = json.loads((tab / "gold_spans.json").read_text(encoding="utf-8"))
    draw = random.Random(seed)
    with open(path, "w", encoding="utf-8") as fh:
        for doc_id in sorted(texts)[:docs]:
            text = texts[doc_id][:draw.randint(lo, hi)].rsplit(" ", 1)[0]
            spans = [{"start": s, "end": e, "label": lab} for s, e, lab in gold[doc_id] if e <= len(text)]
            fh.write(json.dumps({"id": doc_id, "text": text, "spans": spans}) + "\n")
    return path


class StepCounter:
    """Counts the documents of every decoding step (the mechanism's leading axis)."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self._step = fusion.FusionJob.step

    def __enter__(self) -> StepCounter:
        counter, step = self, self._step

        def counted(job, logits, docs, temperature):
            counter.sizes.append(int(logits.shape[0]))
            return step(job, logits, docs, temperature)

        fusion.FusionJob.step = counted
        return self

    def __exit__(self, *exc) -> None:
        fusion.FusionJob.step = self._step


def run(path: Path, params: dict, batch_size: int, batching: str, threads: int) -> dict:
    """One run of the corpus in memory: its timings, step sizes and records by id."""
    with StepCounter() as steps:
        wall, cpu = time.perf_counter(), time.process_time()
        result = sanitize_corpus(path, params, batch_size=batch_size, threads=threads, progress=False,
                                 batching=batching)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    records = {r["id"]: (r["text"], r["report"]) for r in map(json.loads, result.lines)}
    n = len(records)
    return {"batching": batching, "batch_size": batch_size, "documents": n, "tokens": result.summary.tokens,
            "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "docs_per_min_wall": round(60 * n / wall, 1),
            "docs_per_min_cpu": round(60 * n / cpu, 1), "steps": len(steps.sizes),
            "mean_docs_per_step": round(sum(steps.sizes) / max(len(steps.sizes), 1), 2), "records": records}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--min-chars", type=int, default=80)
    ap.add_argument("--max-chars", type=int, default=900)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--epsilon", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-sizes", default="1,4,8,16,32")
    ap.add_argument("--tab", type=Path, default=TAB)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    tmp = Path(tempfile.mkdtemp(prefix="tokendp-batching-"))
    path = corpus(tmp / "corpus.jsonl", args.docs, args.min_chars, args.max_chars, args.seed, args.tab)
    params = {"model": args.model, "epsilon": args.epsilon, "seed": args.seed}
    sanitize_corpus(path, {**params, "max_new_tokens": 2}, batch_size=4, threads=args.threads, progress=False)  # warm
    sizes = [int(b) for b in args.batch_sizes.split(",")]
    runs = []
    for b in sizes:
        for batching in ("static", "continuous"):
            runs.append(run(path, params, b, batching, args.threads))
            r = runs[-1]
            print(f"batch {b:>3} {batching:<10}: {r['docs_per_min_wall']:>7.1f} docs/min (wall), "
                  f"{r['docs_per_min_cpu']:>7.1f} (CPU), {r['steps']} steps, {r['mean_docs_per_step']} docs/step",
                  flush=True)
    if 1 not in sizes:  # the reference: each document alone
        runs.append(run(path, params, 1, "static", args.threads))
    alone = next(r for r in runs if r["batch_size"] == 1 and r["batching"] == "static")["records"]
    print(f"\n{args.docs} documents, {runs[0]['tokens']} tokens; model {args.model}, "
          f"{args.threads} thread(s)")
    print(f"{'batch':>5} {'static/min':>11} {'contin./min':>12} {'ratio wall':>11} {'ratio CPU':>10} "
          f"{'docs/step s':>12} {'docs/step c':>12} {'= alone':>8}")
    table = []
    for b in sizes:
        s, c = (next(r for r in runs if r["batch_size"] == b and r["batching"] == k) for k in ("static", "continuous"))
        same = sum(c["records"][k] == alone[k] for k in alone), sum(s["records"][k] == alone[k] for k in alone)
        row = {"batch_size": b, "static": {k: v for k, v in s.items() if k != "records"},
               "continuous": {k: v for k, v in c.items() if k != "records"},
               "ratio_wall": round(c["docs_per_min_wall"] / s["docs_per_min_wall"], 2),
               "ratio_cpu": round(c["docs_per_min_cpu"] / s["docs_per_min_cpu"], 2),
               "continuous_equal_alone": same[0], "static_equal_alone": same[1]}
        table.append(row)
        print(f"{b:>5} {s['docs_per_min_cpu']:>11.1f} {c['docs_per_min_cpu']:>12.1f} {row['ratio_wall']:>11.2f} "
              f"{row['ratio_cpu']:>10.2f} {s['mean_docs_per_step']:>12} {c['mean_docs_per_step']:>12} "
              f"{same[0]:>4}/{len(alone)}")
    print("(docs/min columns: over CPU time; '= alone': continuous records equal to static batch 1's)")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": table}, indent=2))


if __name__ == "__main__":
    main()
