"""Benchmark: the local engine against Ray with 1 and 2 workers, in the same run (issue 18).

Setting: the first ``--docs`` TAB documents (all splits), cut to ``--chars`` characters with the
gold spans inside them, DP-Fusion at ``--epsilon`` with ``--seed``, ``--max-new-tokens`` T, in
batches of ``--batch-size``; every worker one torch thread (a Ray actor reserves one CPU). Ray
runs on a private local instance (loopback) started once, before the timings.

For each engine it prints the wall time of the whole run (for Ray including the actors'
start-up: a fresh process, imports, a model load), the tokens per second over that wall time,
the tokens per second of each worker over the time it spent in its batches, and the speed-up
over the local engine and over 1 Ray worker; then whether the records (texts and reports) are
identical across the runs, and across local batch sizes 1, ``--batch-size`` and 2x that (the
diagnostics, realised lambdas and divergences, written apart with ``diagnostics``, compared by
their largest relative difference: float32 rounding moves with a batch's padding).

Run: ``PYTHONPATH=src python benchmarks/engines.py`` (minutes on 2 CPU cores with the default
``--model tiny``; ``--model rewriter`` for SmolLM2-135M).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from tokendp.engines import sanitize_corpus

TAB = Path("../shared/data/tab")


def corpus(path: Path, docs: int, chars: int) -> Path:
    """JSONL records {id, text, spans} from TAB: texts cut at a space before ``chars``."""
    texts = json.loads((TAB / "texts.json").read_text(encoding="utf-8"))
    gold = json.loads((TAB / "gold_spans.json").read_text(encoding="utf-8"))
    with open(path, "w", encoding="utf-8") as fh:
        for doc_id in sorted(texts)[:docs]:
            text = texts[doc_id][:chars].rsplit(" ", 1)[0]
            spans = [{"start": s, "end": e, "label": lab} for s, e, lab in gold[doc_id] if e <= len(text)]
            fh.write(json.dumps({"id": doc_id, "text": text, "spans": spans}) + "\n")
    return path


def run(path: Path, out: Path, params: dict, **engine) -> tuple[float, dict, list[str], dict]:
    """(wall seconds, summary, output lines, diagnostics by id) of one run into a fresh ``out``."""
    start = time.perf_counter()
    result = sanitize_corpus(path, params, out=out, progress=False, **engine)
    wall = time.perf_counter() - start
    diagnostics = [json.loads(line) for line in result.diagnostics_path.read_text(encoding="utf-8").splitlines()]
    return (wall, result.summary.to_dict(), out.read_text(encoding="utf-8").splitlines(),
            {d["id"]: d["diagnostics"] for d in diagnostics})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=32)
    ap.add_argument("--chars", type=int, default=600)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--epsilon", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import ray

    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    tmp = Path(tempfile.mkdtemp(prefix="tokendp-engines-"))
    path = corpus(tmp / "corpus.jsonl", args.docs, args.chars)
    params = {"model": args.model, "epsilon": args.epsilon, "max_new_tokens": args.max_new_tokens, "seed": args.seed,
              "diagnostics": True}
    b = args.batch_size
    runs = {"local": run(path, tmp / "local.jsonl", params, batch_size=b, threads=1)}
    for workers in (1, 2):
        runs[f"ray x{workers}"] = run(path, tmp / f"ray{workers}.jsonl", params, engine="ray", workers=workers,
                                     batch_size=b, threads=1)
    batches = {size: run(path, tmp / f"local-b{size}.jsonl", params, batch_size=size, threads=1)[2:]
               for size in (1, 2 * b)}
    ray.shutdown()

    print(f"{args.docs} TAB documents (<= {args.chars} chars), model {args.model}, T = {args.max_new_tokens}, "
          f"epsilon {args.epsilon:g}, batches of {b}, 1 thread per worker\n")
    print("| engine | wall s | tokens | tokens/s (wall) | tokens/s per worker (busy) | vs local | vs ray x1 |")
    print("|---|---|---|---|---|---|---|")
    for name, (wall, summary, _, _) in runs.items():
        per = ", ".join(f"{w['tokens_per_second']:.0f}" for w in summary["workers"].values())
        print(f"| {name} | {wall:.1f} | {summary['tokens']} | {summary['tokens'] / wall:.1f} | {per} | "
              f"{runs['local'][0] / wall:.2f}x | {runs['ray x1'][0] / wall:.2f}x |")
    outputs = {name: (lines, diag) for name, (_, _, lines, diag) in runs.items()}
    outputs |= {f"local, batches of {size}": out for size, out in batches.items()}
    print(f"\nagainst the local engine's records (batches of {b}): texts identical, reports identical, "
          "largest relative difference of a diagnostic")
    for name, (lines, diag) in outputs.items():
        texts, reports, worst = compare(lines, runs["local"][2], diag, runs["local"][3])
        print(f"- {name}: {texts} / {len(lines)}, {reports} / {len(lines)}, {worst:.1e}")


def compare(lines: list[str], reference: list[str], diag: dict, ref_diag: dict) -> tuple[int, int, float]:
    """(texts equal, reports equal, largest relative difference of a diagnostic)."""
    texts = reports = 0
    worst = 0.0
    for line, ref in zip(lines, reference):
        a, r = json.loads(line), json.loads(ref)
        texts += a["text"] == r["text"]
        reports += a["report"] == r["report"]
        da, dr = diag[a["id"]], ref_diag[r["id"]]
        for key in da.keys() - {"note"}:
            for group, value in da[key].items():
                worst = max(worst, abs(value - dr[key][group]) / max(abs(dr[key][group]), 1e-12))
    return texts, reports, worst


if __name__ == "__main__":
    main()
