"""Benchmark: DP-Fusion's fixed accounting against the per-group Renyi filter (issue 34).

For each TAB document of a split, at its full length (or cut at ``--max-chars``): the
teacher-forced perplexity of the original document under DP-Fusion with the fixed accounting and
with the filter, at each target epsilon, from ONE forward pass over the document's rows
(``tokendp.eval.sanitization``'s scoring); T is sanitize's default for the document (1.2x its
tokens + 16), which the fixed accounting's certificate counts and the filter's does not. The
public rewrite's perplexity (epsilon 0) and the original's (no privacy) bound the range.

    PYTHONPATH=src python benchmarks/filter.py --split tune --limit 2 --max-chars 4000 --paces 0.25,0.5,1,2 --alphas 3 --epsilons 8 --out runs/filter-tune
    PYTHONPATH=src python benchmarks/filter.py --split report --limit 63 --epsilons 0.5,1,2,4,8,16 --out runs/filter-report
    PYTHONPATH=src python benchmarks/filter.py --split report --limit 12 --spread --epsilons 4,8,16 --filter-epsilons 2,4,8 --threads 1 --out runs/filter-spread

Resumable: each document's figures are written to ``OUT/docs/ID.json`` as it is done; a rerun
skips them. ``OUT/results.json`` pools the documents (perplexity = exp(total NLL / tokens)) and
``OUT/epsilon_vs_ppl.png`` plots perplexity against certified epsilon for both accountings;
``half_epsilon`` in the results sets the filter at epsilon/2 against the fixed accounting at
epsilon (issue 34's acceptance test).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from tokendp.accounting import dp_fusion_filter_alpha
from tokendp.backends import load_backend
from tokendp.eval.candidates import truncate_document
from tokendp.eval.methods import BoundMethod, Setting, document_rows
from tokendp.eval.sanitization import _perplexities
from tokendp.fusion import choose_alpha
from tokendp.params import DEFAULT_PACE
from tokendp.text.contexts import placeholders, prompt_template
from tokendp.text.tab import load_tab, spread_by_length

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tab"
DELTA = 1e-5


def settings(epsilons: list[float], paces: list[float], groups: int, tokens: int, delta: float,
             alphas: list[float], fixed: bool = True, max_lams: list[float | None] = (None,),
             filter_epsilons: list[float] | None = None) -> list[Setting]:
    """Public, original, and per epsilon the fixed accounting at the order it chooses for this
    document (unless not ``fixed``), and per epsilon of ``filter_epsilons`` (default: the same)
    the filter at each pace and each of ``alphas`` (None: the order the filter chooses for the
    target), all from public parameters."""
    out = [Setting("public", "-"), Setting("original", "-")]
    if fixed:
        out += [Setting("dp-fusion", f"eps={eps:g}", alpha=choose_alpha([(eps, max(groups, 1), tokens)], delta=delta),
                        target=eps) for eps in epsilons]
    for eps in epsilons if filter_epsilons is None else filter_epsilons:
        for a in alphas:
            alpha = dp_fusion_filter_alpha(epsilon=eps, delta=delta) if a is None else a
            out += [Setting("dp-fusion-filter", f"eps={eps:g},pace={p:g},alpha={alpha:g}"
                            + ("" if lam is None else f",max_lam={lam:g}"),
                            alpha=alpha, target=eps, pace=p, max_lam=lam)
                    for p in paces for lam in max_lams]
    return out


def score_document(backend, doc_id, text, spans, *, epsilons, paces, alphas, delta, fixed=True,
                   max_lams=(None,), filter_epsilons=None) -> dict:
    tok, opts = backend.tokenizer, backend.options
    rows = document_rows(text, spans, tok, template=prompt_template(tok, options=opts),
                         placeholder=placeholders(tok, options=opts))
    tokens = math.ceil(1.2 * len(rows.target)) + 16
    chosen = settings(epsilons, paces, len(rows.groups), tokens, delta, alphas, fixed, max_lams, filter_epsilons)
    bounds = [BoundMethod(s, [rows], vocab_size=backend.vocab_size, max_new_tokens=tokens, delta=delta)
              for s in chosen]
    start = time.perf_counter()
    scored = _perplexities(backend, bounds, 0)
    return {"id": doc_id, "chars": len(text), "tokens": len(rows.target), "groups": len(rows.groups), "T": tokens,
            "seconds": time.perf_counter() - start,
            "settings": [{"method": s.method, "name": s.name, "target": s.target, "pace": s.pace, "alpha": s.alpha,
                          "epsilon": b.epsilon(rows), "nll": nll, "n": n}
                         for s, b, (nll, n) in zip(chosen, bounds, scored)]}


def pool(docs: list[dict]) -> list[dict]:
    """Per setting: the pooled perplexity over the documents and the largest certified epsilon."""
    table: dict[tuple[str, str], dict] = {}
    for doc in docs:
        for s in doc["settings"]:
            row = table.setdefault((s["method"], s["name"]), {"method": s["method"], "name": s["name"],
                                                              "target": s["target"], "pace": s["pace"], "nll": 0.0,
                                                              "n": 0, "epsilon_max": 0.0, "documents": 0})
            row["nll"] += s["nll"]
            row["n"] += s["n"]
            row["documents"] += 1
            if s["epsilon"] is not None:
                row["epsilon_max"] = max(row["epsilon_max"], s["epsilon"])
    for row in table.values():
        row["ppl"] = math.exp(row["nll"] / row["n"])
    return list(table.values())


def half_epsilon(rows: list[dict]) -> list[dict]:
    """Issue 34's test, per fixed-accounting epsilon e: the filter's perplexity at e/2 (each pace
    and order measured) against the fixed accounting's at e; ``met`` when it is no higher."""
    fixed = {r["target"]: r["ppl"] for r in rows if r["method"] == "dp-fusion"}
    return [{"epsilon": e, "fixed": ppl, "filter": r["name"], "filter_ppl": r["ppl"], "met": r["ppl"] <= ppl}
            for e, ppl in sorted(fixed.items())
            for r in rows if r["method"] == "dp-fusion-filter" and r["target"] == e / 2]


def per_document(docs: list[dict]) -> list[dict]:
    """Issue 44's rule, per fixed-accounting epsilon e and filter setting at e/2: on how many
    documents the filter's perplexity is at or below the fixed accounting's."""
    out: dict[tuple[float, str], dict] = {}
    for doc in docs:
        fixed = {s["target"]: s["nll"] / s["n"] for s in doc["settings"] if s["method"] == "dp-fusion"}
        for s in doc["settings"]:
            if s["method"] == "dp-fusion-filter" and 2 * s["target"] in fixed:
                row = out.setdefault((2 * s["target"], s["name"]), {"epsilon": 2 * s["target"], "filter": s["name"],
                                                                    "at_or_below": 0, "documents": 0})
                row["documents"] += 1
                row["at_or_below"] += s["nll"] / s["n"] <= fixed[2 * s["target"]]
    return sorted(out.values(), key=lambda r: (r["epsilon"], r["filter"]))


def _curve(row: dict) -> str:
    """A row's curve: the fixed accounting, or the filter at its pace and, unless it is the one
    the filter chooses for the target, its order."""
    if row["method"] == "dp-fusion":
        return "fixed accounting"
    settings = dict(part.split("=") for part in row["name"].split(",")[1:])
    chosen = float(settings["alpha"]) == dp_fusion_filter_alpha(epsilon=row["target"], delta=DELTA)
    return (f"filter (pace {settings['pace']}" + ("" if chosen else f", alpha {settings['alpha']}")
            + (f", max lam {settings['max_lam']}" if "max_lam" in settings else "") + ")")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    curves: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r["method"] in ("dp-fusion", "dp-fusion-filter"):
            curves.setdefault(_curve(r), []).append((r["target"], r["ppl"]))
    for label, pts in curves.items():
        ax.plot(*zip(*sorted(pts)), "o-" if label.startswith("fixed") else "s--", label=label)
    for method, colour in (("public", "grey"), ("original", "black")):
        for r in rows:
            if r["method"] == method:
                ax.axhline(r["ppl"], color=colour, linestyle=":", label=f"{method} ({r['ppl']:.3f})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("certified epsilon per group")
    ax.set_ylabel("teacher-forced perplexity of the original")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--split", choices=["tune", "report"], default="tune")
    parser.add_argument("--limit", type=int, default=6)
    parser.add_argument("--max-chars", type=int, default=None, help="cut documents (default: full length)")
    parser.add_argument("--epsilons", default="2,8")
    parser.add_argument("--paces", default=str(DEFAULT_PACE))
    parser.add_argument("--alphas", default="auto",
                        help="the filter's orders, e.g. auto,2.5,3 (auto: dp_fusion_filter_alpha for the target)")
    parser.add_argument("--max-lams", default="rule",
                        help="the filter's weight ceilings, e.g. rule,1,0.5 (rule: dp_fusion_filter_max_lam; 1: none)")
    parser.add_argument("--no-fixed", action="store_true",
                        help="score the filter only (the fixed accounting's figures do not change with its settings)")
    parser.add_argument("--shortest-first", action="store_true",
                        help="take the split's documents from the shortest up (the fixed accounting's best case: "
                             "its T, hence its cost per token, grows with the length)")
    parser.add_argument("--spread", action="store_true",
                        help="take --limit documents at evenly spaced ranks of length, from the shortest to the longest")
    parser.add_argument("--filter-epsilons", default=None,
                        help="score the filter at these epsilons (default: --epsilons), e.g. half of each")
    parser.add_argument("--delta", type=float, default=DELTA)
    parser.add_argument("--model", default="rewriter")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    epsilons = [float(x) for x in args.epsilons.split(",")]
    paces = [float(x) for x in args.paces.split(",")]
    alphas = [None if x == "auto" else float(x) for x in args.alphas.split(",")]
    tab = load_tab(args.data, args.split)
    backend = load_backend(args.model)
    (args.out / "docs").mkdir(parents=True, exist_ok=True)
    done = []
    ids = sorted(tab.texts, key=lambda d: len(tab.texts[d])) if args.shortest_first else list(tab.texts)
    ids = spread_by_length(tab.texts, args.limit) if args.spread else ids[:args.limit]
    filter_epsilons = None if args.filter_epsilons is None else [float(x) for x in args.filter_epsilons.split(",")]
    for doc_id in ids:
        path = args.out / "docs" / f"{doc_id}.json"
        if not path.exists():
            text, spans = tab.texts[doc_id], tab.gold[doc_id]
            if args.max_chars:
                text, spans = truncate_document(text, spans, max_chars=args.max_chars)
            record = score_document(backend, doc_id, text, spans, epsilons=epsilons, paces=paces, alphas=alphas,
                                    delta=args.delta, fixed=not args.no_fixed,
                                    max_lams=[None if x == "rule" else float(x) for x in args.max_lams.split(",")],
                                    filter_epsilons=filter_epsilons)
            path.write_text(json.dumps(record, indent=1))
            print(f"{doc_id}: {record['tokens']} tokens, {record['groups']} groups, {record['seconds']:.0f} s",
                  flush=True)
        done.append(json.loads(path.read_text()))
    rows, half, each = pool(done), half_epsilon(pool(done)), per_document(done)
    (args.out / "results.json").write_text(json.dumps({"documents": len(done), "split": args.split,
                                                       "ids": [d.get("id") for d in done], "rows": rows,
                                                       "half_epsilon": half, "per_document": each}, indent=1))
    for r in rows:
        print(f"{r['method']:<18}{r['name']:<20}ppl {r['ppl']:.4f}   epsilon <= {r['epsilon_max']:.3g}")
    for h in half:
        print(f"fixed at {h['epsilon']:g}: {h['fixed']:.4f}; filter {h['filter']}: {h['filter_ppl']:.4f} "
              f"({'met' if h['met'] else 'not met'})")
    for e in each:
        print(f"fixed at {e['epsilon']:g} against {e['filter']}: the filter at or below on {e['at_or_below']} of "
              f"{e['documents']} documents")
    plot(rows, args.out / "epsilon_vs_ppl.png")


if __name__ == "__main__":
    main()
