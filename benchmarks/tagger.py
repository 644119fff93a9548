"""Benchmark: time to tag a 5,000-character document after the taggers are loaded.

Acceptance (issue 4): under 1 second for ``auto`` on this CPU. Times are the median of
``--repeats`` runs; each is also given as a ratio to the ``patterns`` tagger measured in
the same run, so numbers from different machines can be compared.

    PYTHONPATH=src python benchmarks/tagger.py [--data ../shared/data/tab]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from tokendp.text.taggers import get_tagger

SAMPLE = (
    "The case originated in an application (no. 12345/06) against the Republic of Poland lodged "
    "with the Court by a Polish national, Mr Jan Kowalski, on 3 March 2006. The applicant was "
    "represented by Ms A. Nowak, a lawyer practising in Kraków. On 14 May 2001 the Warsaw Regional "
    "Court ordered him to pay PLN 25,000. He was aged 45 and lived in a 63 sq. m flat in Gdańsk. "
)


def document(data: str | None, length: int = 5000) -> str:
    """``length`` characters: the start of the first TAB tuning-half document, or a sample."""
    if data:
        texts = json.loads((Path(data) / "texts.json").read_text(encoding="utf-8"))
        text = "\n\n".join(texts[d] for d in sorted(texts)[0::2])
    else:
        text = SAMPLE * (length // len(SAMPLE) + 1)
    return text[:length]


def median_seconds(tagger, text: str, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        tagger.tag(text)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="TAB folder: use a real ECHR text instead of the sample")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    text = document(args.data)
    results = {}
    for name in ("patterns", "model", "auto"):
        start = time.perf_counter()
        tagger = get_tagger(name)
        load = time.perf_counter() - start
        tagger.tag(text)  # warm-up
        results[name] = (load, median_seconds(tagger, text, args.repeats))
    base = results["patterns"][1]
    print(f"document: {len(text)} characters; median of {args.repeats} runs")
    for name, (load, tag) in results.items():
        print(f"{name:<9} load {load:6.3f} s   tag {tag:6.3f} s   ({tag / base:5.1f}x patterns)"
              f"   {'OK' if tag < 1.0 else 'SLOWER THAN 1 s'}")


if __name__ == "__main__":
    main()
