"""Benchmark: what ``tokendp generate`` costs for a short answer as a function of
``--max-untrusted-tokens`` (the public cap every untrusted chunk's row is laid out at).

The command as a user runs it: the default model (SmolLM2-135M-Instruct), ``examples/letter.txt``
with its spans as trusted context, two untrusted "retrieved pages" (WikiText-2 test paragraphs,
about 1,500 characters, 330 to 360 tokens each, so that no cap from 512 up cuts them), a
40-token answer (``--max-new-tokens 40``), epsilon 8, seed 0. Each cap runs in its own
process (``python -m tokendp generate``), caps interleaved, ``--repeats`` rounds; reported per
cap: the process's wall seconds (best and median), CPU seconds (best: steadier than the wall
clock on a shared machine) and peak resident memory (``ru_maxrss``).

Run: ``PYTHONPATH=src python benchmarks/untrusted_cap.py [--caps 256 512 1024] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIKITEXT = ROOT.parent / "shared" / "data" / "wikitext-2" / "test.txt"

# Runs the command, then prints its peak memory (KiB on Linux) as the last line of stderr.
_MEASURED = """
import resource, sys
from tokendp.cli import main
try:
    main(sys.argv[1:], prog_name="tokendp", standalone_mode=False)
finally:
    use = resource.getrusage(resource.RUSAGE_SELF)
    print("maxrss_kib", use.ru_maxrss, use.ru_utime + use.ru_stime, file=sys.stderr)
"""


def pages(n: int = 2, chars: int = 1500) -> list[str]:
    """``n`` paragraphs of WikiText-2's test split of at least ``chars`` characters, cut at a
    sentence end near ``chars``."""
    out = []
    for line in WIKITEXT.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("=") or len(line) < chars:
            continue
        cut = line.find(". ", chars - 100)
        out.append(line[: cut + 1] if cut > 0 else line[:chars])
        if len(out) == n:
            return out
    raise SystemExit("not enough long paragraphs in WikiText-2's test split")


def run(cap: int, files: list[Path], threads: int | None) -> tuple[float, float, float]:
    """Wall seconds, peak RSS (GB) and CPU seconds of one ``tokendp generate`` at this cap."""
    args = ["generate", "--prompt", "When was the patient admitted, and what does the first page say?",
            "--context", str(ROOT / "examples" / "letter.txt"), "--spans", str(ROOT / "examples" / "letter.spans.json"),
            *[a for f in files for a in ("--untrusted", str(f))], "--epsilon", "8", "--seed", "0",
            "--max-new-tokens", "40", "--max-untrusted-tokens", str(cap), "--json", "-q"]
    if threads is not None:
        args += ["--threads", str(threads)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", _MEASURED, *args], capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"cap {cap} failed: {res.stderr[-2000:]}")
    _, kib, cpu = res.stderr.strip().splitlines()[-1].split()
    rss = int(kib) / 1024 ** 2
    report = json.loads(res.stdout)["report"]
    assert report["max_untrusted_tokens"] == cap and report["tokens_generated"] <= 40
    return wall, rss, float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--caps", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, text in enumerate(pages()):
            files.append(Path(tmp) / f"page{i + 1}.txt")
            files[-1].write_text(text, encoding="utf-8")
        from transformers import AutoTokenizer

        from tokendp.models.registry import base_model_dir

        tok = AutoTokenizer.from_pretrained(base_model_dir())
        sizes = [len(tok(f.read_text(encoding="utf-8"))["input_ids"]) for f in files]
        print(f"pages: {[len(f.read_text(encoding='utf-8')) for f in files]} characters, {sizes} tokens", flush=True)
        runs: dict[int, list[tuple[float, float, float]]] = {cap: [] for cap in opts.caps}
        for r in range(opts.repeats):
            for cap in opts.caps:
                runs[cap].append(run(cap, files, opts.threads))
                wall, rss, cpu = runs[cap][-1]
                print(f"round {r + 1} cap {cap}: {wall:.1f} s wall, {cpu:.1f} s CPU, {rss:.2f} GB", flush=True)
    print("\n| --max-untrusted-tokens | wall s, best | wall s, median | CPU s, best | peak RSS GB, max |")
    print("|---:|---:|---:|---:|---:|")
    for cap, got in runs.items():
        walls = [w for w, _, _ in got]
        print(f"| {cap} | {min(walls):.1f} | {statistics.median(walls):.1f} | {min(c for _, _, c in got):.1f} "
              f"| {max(m for _, m, _ in got):.2f} |")


if __name__ == "__main__":
    main()
