"""Before/after comparison of two ``benchmarks/rewriter.py --out`` results on the same documents
and seeds (issue 37: ship a new rewriter only if it is better by more than the noise).

Every rewrite is stored in the results (run them with ``--examples`` at least ``--docs``); this
re-scores them per document with the benchmark's own metrics and gives, for each metric, the
before and after figures and a paired bootstrap over documents (2,000 resamples, fixed seed) of
the difference after - before: its 95% interval. A difference whose interval excludes 0 is more
than document-to-document and sampling noise at this number of documents.

  PYTHONPATH=src python benchmarks/rewriter_compare.py runs/bench/before-tab-s0.json runs/bench/after-tab-s0.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rewriter as bench  # noqa: E402  (benchmarks/rewriter.py, beside this file)

METRICS = ("kept", "types", "slot_label_share", "distinct_fillers", "fluency", "endings")


def documents(result: dict, key: str) -> tuple[list[str], list[list], list[str]]:
    """(originals, gold spans, rewrites) of ``result``'s method ``key``, in document order."""
    m = result["methods"][key]
    if len(m["examples"]) != len(result["docs"]):
        raise SystemExit(f"{key}: {len(m['examples'])} rewrites stored for {len(result['docs'])} documents; "
                         "rerun the benchmark with --examples >= --docs")
    if result.get("source") == "synthetic":
        docs = bench.held_out_documents(len(result["docs"]))
    else:
        docs = bench.excerpts(len(result["docs"]), split=result.get("split", "report"))
    assert [d[0] for d in docs] == result["docs"]
    return [d[1] for d in docs], [d[2] for d in docs], [e["rewrite"] for e in m["examples"]]


def per_document(result: dict, key: str, tagger) -> list[dict]:
    texts, spans, rewrites = documents(result, key)
    m = result["methods"][key]
    stops = m.get("stop_reasons_per_doc")
    if stops is None and len(m.get("stop_reasons", {})) == 1:  # results written before the per-document list
        stops = [next(iter(m["stop_reasons"]))] * len(texts)
    out = []
    for i, (t, s, r) in enumerate(zip(texts, spans, rewrites)):
        tags = list(tagger.tag(r))
        hits = bench.slot_label_hits(t, s, r, tags)
        distinct, pairs = bench.distinct_filler_pairs(t, s, r)
        out.append({"kept": bench.kept(t, s, r), "found": bench.type_counts([tags]),
                    "gold": Counter(x.label for x in s), "hits": sum(hits), "slots": len(hits),
                    "distinct": distinct, "pairs": pairs, "fluency": m["fluency_per_doc"][i],
                    "eos": None if stops is None else stops[i] == "eos"})
    return out


def pooled(docs: list[dict]) -> dict:
    found, gold = sum((d["found"] for d in docs), Counter()), sum((d["gold"] for d in docs), Counter())
    eos = [d["eos"] for d in docs if d["eos"] is not None]
    return {"kept": statistics.mean(d["kept"] for d in docs), "types": bench.types_score(found, gold),
            "slot_label_share": sum(d["hits"] for d in docs) / max(1, sum(d["slots"] for d in docs)),
            "distinct_fillers": sum(d["distinct"] for d in docs) / max(1, sum(d["pairs"] for d in docs)),
            "fluency": statistics.median(d["fluency"] for d in docs),
            "endings": statistics.mean(eos) if eos else float("nan")}


def compare(before: dict, after: dict, *, resamples: int = 2000, seed: int = 0) -> dict:
    from tokendp.text.taggers import get_tagger

    if before["docs"] != after["docs"]:
        raise SystemExit("the two results are not on the same documents")
    tagger = get_tagger("auto")
    (kb,), (ka,) = before["methods"].keys(), after["methods"].keys()
    b, a = per_document(before, kb, tagger), per_document(after, ka, tagger)
    rng = np.random.default_rng(seed)
    diffs = {k: [] for k in METRICS}
    for _ in range(resamples):
        idx = rng.integers(0, len(b), len(b))
        pb, pa = pooled([b[i] for i in idx]), pooled([a[i] for i in idx])
        for k in METRICS:
            diffs[k].append(pa[k] - pb[k])
    pb, pa = pooled(b), pooled(a)
    return {k: {"before": round(pb[k], 4), "after": round(pa[k], 4), "difference": round(pa[k] - pb[k], 4),
                "interval95": [round(float(np.nanpercentile(diffs[k], 2.5)), 4),
                               round(float(np.nanpercentile(diffs[k], 97.5)), 4)]}
            for k in METRICS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    result = compare(json.loads(Path(args.before).read_text()), json.loads(Path(args.after).read_text()))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
