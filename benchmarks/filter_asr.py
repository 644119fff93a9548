"""The filter at epsilon/2 against the fixed accounting at epsilon: attack success at full length (issue 44).

Reads the cache of a ``tokendp eval sanitize`` run at full length (numbers only) and pairs each
fixed-accounting setting at epsilon with the filter at epsilon/2, on the documents both have done:

    tokendp eval sanitize --data ../shared/data/tab --candidates ../shared/data/dpfusion/candidate_set_100.json \\
        --split report --methods public,dp-fusion,dp-fusion-filter --epsilon 4,8,16 --filter-epsilon 2,4,8 \\
        --ids "$(PYTHONPATH=src python benchmarks/filter_asr.py --spread-ids 12)" \\
        --max-chars 0 --max-new-tokens auto --no-plots --out runs/filter-asr-full
    PYTHONPATH=src python benchmarks/filter_asr.py --out runs/filter-asr-full

For each pair: the games played (documents x attacked labels), the success rate of LOSS and of
Min-K% for each accounting (and "length": tokens released over the documents' tokens, pooled), their difference and its noise: two standard errors of a difference
of two rates over that many games if they were equal (``2 sqrt(2 p (1 - p) / n)``, p the two
rates' mean: a two-proportion z-test at about 5%, one-sided 2.3%); the rule counts a filter rate
"higher beyond the noise" when it exceeds the fixed accounting's by more than that. Pooled teacher-forced perplexity beside it, and
the public rewrite's rates (epsilon 0) as the floor.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from tokendp.text.tab import load_tab, spread_by_length

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tab"


def load_records(out: Path) -> dict[str, dict[str, dict]]:
    """setting key -> document -> record, from every run hash under ``out/cache``."""
    records: dict[str, dict[str, dict]] = {}
    for path in sorted((out / "cache").glob("*/*/*.json")):
        records.setdefault(path.parent.name, {})[path.stem] = json.loads(path.read_text())
    return records


def rates(records: list[dict]) -> dict:
    """Games, pooled success of LOSS and Min-K%, pooled perplexity over ``records``."""
    games = [g for r in records for g in r["attacks"].values()]
    n = len(games)
    return {"documents": len(records), "games": n,
            "loss": sum(g["loss"] for g in games) / n if n else None,
            "mink": sum(g["mink"] for g in games) / n if n else None,
            "ppl": math.exp(sum(r["nll"] for r in records) / sum(r["tokens"] for r in records)),
            "released_share": sum(r["released_tokens"] for r in records) / sum(r["tokens"] for r in records)}


def noise(p: float, q: float, n: int) -> float:
    """Two standard errors of the difference of two success rates over ``n`` games each, under the
    hypothesis that they are equal (the pooled rate, as a two-proportion z-test)."""
    pooled = (p + q) / 2
    return 2 * math.sqrt(2 * pooled * (1 - pooled) / n)


def pairs(records: dict[str, dict[str, dict]]) -> list[dict]:
    out = []
    for key in sorted(k for k in records if k.startswith("dp-fusion__eps-")):
        eps = float(key.split("eps-")[1])
        other = f"dp-fusion-filter__eps-{eps / 2:g}"
        if other not in records:
            continue
        docs = sorted(set(records[key]) & set(records[other]) & set(records.get("public__-", records[key])))
        fixed = rates([records[key][d] for d in docs])
        filt = rates([records[other][d] for d in docs])
        row = {"epsilon": eps, "documents": len(docs), "games": fixed["games"], "fixed": fixed, "filter": filt}
        if "public__-" in records:
            row["public"] = rates([records["public__-"][d] for d in docs])
        for attack in ("loss", "mink"):
            p, q = fixed[attack], filt[attack]
            row[f"{attack}_difference"] = q - p
            row[f"{attack}_noise"] = noise(p, q, fixed["games"])
            row[f"{attack}_higher_beyond_noise"] = q - p > row[f"{attack}_noise"]
        row["ppl_filter_at_or_below"] = filt["ppl"] <= fixed["ppl"]
        out.append(row)
    return sorted(out, key=lambda r: r["epsilon"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="the eval's output folder")
    parser.add_argument("--spread-ids", type=int, metavar="K",
                        help="print K reporting-half ids spread over lengths (for --ids) and exit")
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    if args.spread_ids:
        print(",".join(spread_by_length(load_tab(args.data, "report").texts, args.spread_ids)))
        return
    rows = pairs(load_records(args.out))
    (args.out / "filter_asr.json").write_text(json.dumps(rows, indent=2))
    print("| epsilon | documents | games | fixed: ppl / LOSS / Min-K% / length | filter at epsilon/2 | "
          "difference LOSS, Min-K% (noise) | public LOSS / Min-K% |")
    print("|---:|---:|---:|---|---|---|---|")
    for r in rows:
        f, g, p = r["fixed"], r["filter"], r.get("public")
        print(f"| {r['epsilon']:g} | {r['documents']} | {r['games']} | {f['ppl']:.4f} / {f['loss']:.2f} / "
              f"{f['mink']:.2f} / {f['released_share']:.2f} | {g['ppl']:.4f} / {g['loss']:.2f} / {g['mink']:.2f} / "
              f"{g['released_share']:.2f} | {r['loss_difference']:+.2f} ({r['loss_noise']:.2f}), "
              f"{r['mink_difference']:+.2f} ({r['mink_noise']:.2f}) | "
              + (f"{p['loss']:.2f} / {p['mink']:.2f} |" if p else "- |"))


if __name__ == "__main__":
    main()
