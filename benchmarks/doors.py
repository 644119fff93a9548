"""Every door of tokendp, read as a new user would (issue 45 item 1): what each writes.

On the default install (the default model of each door), for the held-out letters and reports
of ``benchmarks/held_out.py`` (gold spans given to every door, so the doors and not the tagger
are compared; questions whose answers lie outside every span) and for long documents at full
length (TAB's reporting half, odd-indexed, gold spans), the doors:

- ``cli``: ``tokendp sanitize FILE --spans SPANS.json --epsilon E --seed S --json``, one process
  per document;
- ``corpus``: ``tokendp sanitize corpus.jsonl --out out.jsonl`` over the same documents;
- ``vault-rewrite``: a served vault (``tokendp serve``, its default model, a tenant of lifetime
  epsilon ``--vault-budget``), the documents stored by the owner with their spans,
  ``GET /v1/documents/{id}/rewrite?epsilon=E`` by a reader;
- ``vault-ask``: ``POST /v1/ask`` on that vault, ``{"question", "documents": [id], "epsilon"}``;
- ``generate``: ``tokendp generate --prompt QUESTION --context FILE --spans SPANS.json``
  (its default model), and ``generate-public``: the same with ``--method public`` (every span
  hidden, no DP: the baseline an answer at epsilon E is held against);
- ``long``: ``tokendp sanitize`` on ``--long`` TAB reporting-half documents of at most
  ``--long-max-chars`` characters (the longest such), in passages as the default does;
- ``short-answer`` and ``short-answer-public`` (issue 45 item 3): ``tokendp.generate`` with a
  prompt that asks for a short answer (:data:`SHORT_ANSWER`) instead of the default instruction,
  at epsilon E and public.

Per door (the metrics of ``benchmarks/rewriter.py`` where they exist):

- types: entity types of the gold spans that the built-in tagger finds in the outputs, pooled
  (rewrites only);
- kept: the share of the text outside the gold spans that the output keeps, in order (mean);
- coverage: how far into the document the output follows it: the end of the last stretch of at
  least 12 characters of the original that the output keeps, over the original's length (mean);
- placeholder runs: outputs holding a run of 3 or more underscores, or a word said 3 or more
  times in a row ("Name Name Name");
- repeated sentences: the share of sentences (3 words or more) that occur more than once (mean);
- repeated 8-grams: the share of word 8-grams that occur more than once (mean; the originals'
  own rate is in the first row);
- holds (answers): the share of answers that contain the answer's key words (case aside).

Every output is appended to ``OUT/outputs.jsonl`` as it is made; a rerun skips what is there
(resumable). The table and one example per door go to stdout, and with ``--write FILE`` into
FILE's "Every door" section (between its ``<!-- doors -->`` marks).

  PYTHONPATH=src python benchmarks/doors.py --out runs/doors --threads 1 [--doors cli,vault-ask]
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from held_out import documents as held_out_documents  # noqa: E402
from loops import repeated_ngrams  # noqa: E402
from rewriter import kept, type_counts, types_score  # noqa: E402

from tokendp.text.taggers.labels import to_tab  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "../shared/data"
DOORS = ("cli", "corpus", "vault-rewrite", "vault-ask", "generate", "generate-public", "long", "short-answer",
         "short-answer-public")
ANSWERS = ("vault-ask", "generate", "generate-public", "short-answer", "short-answer-public")
# Issue 45 item 3's candidate prompt: ask for a short answer instead of the default instruction.
SHORT_ANSWER = "Answer the question in a few words, using only the documents below."
RUN = [sys.executable, "-m", "tokendp"]


# ---------------------------------------------------------------------------- documents
def short_documents() -> list[dict]:
    return [{"id": d.doc_id, "text": d.text, "spans": list(d.spans), "lf": d.lf_text, "gold": d.lf_spans,
             "questions": list(d.questions)} for d in held_out_documents()]


def long_documents(n: int, max_chars: int, data: Path) -> list[dict]:
    """The ``n`` longest TAB reporting-half documents of at most ``max_chars`` characters."""
    from tokendp.text.tab import load_tab

    tab = load_tab(data / "tab", "report")
    ids = sorted((d for d, t in tab.texts.items() if len(t) <= max_chars), key=lambda d: -len(tab.texts[d]))[:n]
    return [{"id": d, "text": tab.texts[d], "spans": tab.gold[d], "lf": tab.texts[d], "gold": tab.gold[d],
             "questions": []} for d in ids]


def spans_json(spans) -> list[dict]:
    return [{"start": s.start, "end": s.end, "label": s.label} for s in spans]


# ---------------------------------------------------------------------------- metrics
PLACEHOLDER_RUN = re.compile(r"_{3,}|\b(\w+)(?:[\s,;]+\1\b){2,}")


def placeholder_run(text: str) -> bool:
    return PLACEHOLDER_RUN.search(text) is not None


def repeated_sentences(text: str) -> float:
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if len(s.split()) >= 3]
    counts = Counter(sentences)
    return sum(c for c in counts.values() if c > 1) / len(sentences) if sentences else 0.0


def coverage(original: str, output: str) -> float:
    blocks = difflib.SequenceMatcher(None, original, output, autojunk=False).get_matching_blocks()
    ends = [a + size for a, _, size in blocks if size >= 12]
    return max(ends, default=0) / max(1, len(original))


def holds(answer: str, key: str) -> bool:
    return key.lower() in answer.lower()


# ---------------------------------------------------------------------------- doors
def _env(threads: int) -> dict:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": str(threads)}


def _run(args: list[str], threads: int, timeout: int = 7200) -> str:
    out = subprocess.run([*RUN, *args], capture_output=True, text=True, env=_env(threads), timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"tokendp {args[0]} exited with {out.returncode}: {out.stderr[-800:]}")
    return out.stdout


def _write_doc(tmp: Path, doc: dict) -> tuple[Path, Path]:
    text, spans = tmp / f"{doc['id']}.txt", tmp / f"{doc['id']}.spans.json"
    with open(text, "w", encoding="utf-8", newline="") as f:  # CRLF stays CRLF
        f.write(doc["text"])
    spans.write_text(json.dumps(spans_json(doc["spans"])), encoding="utf-8")
    return text, spans


def door_cli(docs, args, tmp: Path):
    for doc in docs:
        text, spans = _write_doc(tmp, doc)
        t0 = time.perf_counter()
        out = json.loads(_run(["sanitize", str(text), "--spans", str(spans), "--epsilon", str(args.epsilon),
                               "--seed", str(args.seed), "--json", "--threads", str(args.threads)], args.threads))
        yield doc, None, out["text"], out["report"].get("stop_reason"), time.perf_counter() - t0


def door_corpus(docs, args, tmp: Path):
    corpus, out_path = tmp / "corpus.jsonl", tmp / "corpus.out.jsonl"
    corpus.write_text("".join(json.dumps({"id": d["id"], "text": d["text"], "spans": spans_json(d["spans"])},
                                         ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    t0 = time.perf_counter()
    _run(["sanitize", str(corpus), "--out", str(out_path), "--epsilon", str(args.epsilon), "--seed", str(args.seed),
          "--threads", str(args.threads)], args.threads)
    seconds = (time.perf_counter() - t0) / len(docs)
    outs = {r["id"]: r for r in map(json.loads, out_path.read_text(encoding="utf-8").splitlines())}
    for doc in docs:
        yield doc, None, outs[doc["id"]]["text"], outs[doc["id"]]["report"].get("stop_reason"), seconds


class Vault:
    """A served vault (``tokendp serve`` on a fresh SQLite file) with an owner and a reader key."""

    def __init__(self, root: Path, args) -> None:
        from tokendp.service.db import open_db
        from tokendp.service.keys import create_key

        self.db, self.log = root / "vault.db", root / "serve.log"
        conn = open_db(self.db)
        try:
            self.owner = create_key(conn, "doors", budget=args.vault_budget, role="owner")[0]
            self.reader = create_key(conn, "doors", role="reader")[0]
        finally:
            conn.close()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([*RUN, "serve", "--host", "127.0.0.1", "--port", str(port), "--db",
                                          str(self.db), "--threads", str(args.threads), "--rate-limit", "1000"],
                                         stdout=log, stderr=subprocess.STDOUT, env=_env(args.threads))
        self._wait()

    def _wait(self) -> None:
        import httpx

        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tokendp serve exited: {self.log.read_text()[-1500:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).json().get("status") == "ok":
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(1)
        raise RuntimeError("tokendp serve did not become healthy in 10 minutes")

    def call(self, method: str, path: str, key: str, **kw):
        import httpx

        reply = httpx.request(method, self.url + path, headers={"Authorization": f"Bearer {key}"}, timeout=7200, **kw)
        if reply.status_code >= 300:
            raise RuntimeError(f"{method} {path}: {reply.status_code} {reply.text[:300]}")
        return reply.json()

    def store(self, docs) -> None:
        held = {d["id"] for d in self.call("GET", "/v1/documents", self.owner).get("documents", [])}
        for doc in docs:
            if doc["id"] not in held:
                self.call("POST", "/v1/documents", self.owner, json={"id": doc["id"], "title": doc["id"],
                                                                      "text": doc["text"],
                                                                      "spans": spans_json(doc["spans"])})

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def door_vault_rewrite(docs, args, vault: Vault):
    for doc in docs:
        t0 = time.perf_counter()
        out = vault.call("GET", f"/v1/documents/{doc['id']}/rewrite", vault.reader, params={"epsilon": args.epsilon})
        yield doc, None, out["text"], out["report"].get("stop_reason"), time.perf_counter() - t0


def door_vault_ask(docs, args, vault: Vault):
    for doc in docs:
        for question, _ in doc["questions"]:
            t0 = time.perf_counter()
            out = vault.call("POST", "/v1/ask", vault.reader, json={"question": question, "documents": [doc["id"]],
                                                                    "epsilon": args.epsilon,
                                                                    "max_new_tokens": args.answer_tokens})
            yield doc, question, out["text"], out["report"].get("stop_reason"), time.perf_counter() - t0


def door_generate(docs, args, tmp: Path, method: str = "dp-fusion"):
    for doc in docs:
        text, spans = _write_doc(tmp, doc)
        for question, _ in doc["questions"]:
            t0 = time.perf_counter()
            privacy = ["--epsilon", str(args.epsilon)] if method == "dp-fusion" else ["--method", method]
            out = json.loads(_run(["generate", "--prompt", question, "--context", str(text), "--spans", str(spans),
                                   *privacy, "--seed", str(args.seed), "--max-new-tokens", str(args.answer_tokens),
                                   "--json", "--threads", str(args.threads)], args.threads))
            yield doc, question, out["text"], out["report"].get("stop_reason"), time.perf_counter() - t0


def door_short_answer(docs, args, method: str = "dp-fusion"):
    """``tokendp.generate`` on ``tokendp generate``'s default model (smollm2) with
    :data:`SHORT_ANSWER` as the instruction."""
    import torch

    import tokendp
    from tokendp.backends import load_backend

    torch.set_num_threads(args.threads)
    model = load_backend("smollm2")
    for doc in docs:
        for question, _ in doc["questions"]:
            t0 = time.perf_counter()
            privacy = {"epsilon": args.epsilon} if method == "dp-fusion" else {"method": method}
            out = tokendp.generate(question, context=doc["text"], spans=doc["spans"], model=model,
                                   instruction=SHORT_ANSWER, max_new_tokens=args.answer_tokens, seed=args.seed,
                                   **privacy)
            yield doc, question, out.text, out.report.stop_reason, time.perf_counter() - t0


# ---------------------------------------------------------------------------- run
def load(path: Path) -> dict:
    done = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            done[(r["door"], r["doc"], r["question"])] = r
    return done


def run(args) -> dict:
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "outputs.jsonl"
    done = load(path)
    short, long = short_documents(), long_documents(args.long, args.long_max_chars, args.data)
    vault = None
    try:
        for door in args.doors:
            docs = long if door == "long" else short
            wanted = {(door, d["id"], q) for d in docs for q in ([q for q, _ in d["questions"]] if door in ANSWERS
                                                                 else [None])}
            if wanted <= set(done):
                continue
            todo = [d for d in docs if any((door, d["id"], q) not in done for q in
                                           ([q for q, _ in d["questions"]] if door in ANSWERS else [None]))]
            print(f"[{time.strftime('%H:%M:%S')}] {door}: {len(todo)} documents", file=sys.stderr, flush=True)
            with tempfile.TemporaryDirectory() as tmp:
                if door.startswith("vault"):
                    if vault is None:
                        vault = Vault(args.out, args)
                        vault.store(short)
                    outs = (door_vault_rewrite if door == "vault-rewrite" else door_vault_ask)(todo, args, vault)
                elif door in ("cli", "long"):
                    outs = door_cli(todo, args, Path(tmp))
                elif door == "corpus":
                    outs = door_corpus(todo, args, Path(tmp))
                elif door.startswith("short-answer"):
                    outs = door_short_answer(todo, args, "public" if door.endswith("public") else "dp-fusion")
                else:
                    outs = door_generate(todo, args, Path(tmp), "public" if door == "generate-public" else "dp-fusion")
                for doc, question, text, stop, seconds in outs:
                    if (door, doc["id"], question) in done:
                        continue
                    r = {"door": door, "doc": doc["id"], "question": question, "text": text, "stop_reason": stop,
                         "seconds": round(seconds, 1)}
                    done[(door, doc["id"], question)] = r
                    with path.open("a", encoding="utf-8") as f:
                        f.write(json.dumps(r, ensure_ascii=False) + "\n")
                    print(f"[{time.strftime('%H:%M:%S')}] {door} {doc['id']} {question or ''}: {stop}, "
                          f"{seconds:.0f} s", file=sys.stderr, flush=True)
    finally:
        if vault is not None:
            vault.stop()
    return done


def table(done: dict, args) -> str:
    from tokendp.text.taggers import get_tagger

    tagger = get_tagger("auto")
    short = {d["id"]: d for d in short_documents()}
    long = {d["id"]: d for d in long_documents(args.long, args.long_max_chars, args.data)}
    rows = ["| door | outputs | types | kept | coverage | placeholder runs | repeated sentences | repeated 8-grams "
            "| holds the fact | seconds each |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, docs in (("the originals (short)", short), ("the originals (long)", long)):
        if docs:
            rows.append(f"| {name} | {len(docs)} | 1.00 | 1.00 | 1.00 | 0 | "
                        f"{statistics.mean(repeated_sentences(d['lf']) for d in docs.values()):.3f} | "
                        f"{statistics.mean(repeated_ngrams(d['lf']) for d in docs.values()):.3f} | - | - |")
    examples = []
    for door in args.doors:
        outs = [r for r in done.values() if r["door"] == door]
        if not outs:
            continue
        docs = long if door == "long" else short
        outs = [r for r in outs if r["doc"] in docs]
        texts = [r["text"].replace("\r\n", "\n") for r in outs]
        runs = sum(map(placeholder_run, texts))
        rep_s = statistics.mean(map(repeated_sentences, texts))
        rep_8 = statistics.mean(repeated_ngrams(t) for t in texts)
        secs = statistics.mean(r["seconds"] for r in outs)
        if door in ANSWERS:
            keys = {(d["id"], q): a for d in docs.values() for q, a in d["questions"]}
            held = sum(holds(r["text"], keys[(r["doc"], r["question"])]) for r in outs)
            rows.append(f"| {door} | {len(outs)} | - | - | - | {runs} | {rep_s:.3f} | {rep_8:.3f} | "
                        f"{held}/{len(outs)} | {secs:.0f} |")
        else:
            gold = Counter(to_tab(s.label, unknown="MISC") for r in outs for s in docs[r["doc"]]["gold"])
            found = type_counts([list(tagger.tag(t)) for t in texts])
            k = statistics.mean(kept(docs[r["doc"]]["lf"], docs[r["doc"]]["gold"], t) for r, t in zip(outs, texts))
            cov = statistics.mean(coverage(docs[r["doc"]]["lf"], t) for r, t in zip(outs, texts))
            rows.append(f"| {door} | {len(outs)} | {types_score(found, gold):.2f} | {k:.2f} | {cov:.2f} | {runs} | "
                        f"{rep_s:.3f} | {rep_8:.3f} | - | {secs:.0f} |")
        first = outs[0]
        shown = first["text"].replace("\r\n", "\n")
        shown = shown if len(shown) <= 600 else shown[:600] + " [...]"
        what = f"{first['doc']}, \"{first['question']}\"" if first["question"] else first["doc"]
        examples.append(f"**{door}** ({what}):\n\n```text\n{shown}\n```")
    return "\n".join(rows) + "\n\n" + "\n\n".join(examples)


def write_section(path: Path, body: str) -> None:
    """Put ``body`` between the ``<!-- doors -->`` marks of ``path`` (added at the end if missing)."""
    text = path.read_text(encoding="utf-8")
    mark = "<!-- doors -->"
    if text.count(mark) != 2:
        text = text.rstrip("\n") + f"\n\n## Every door\n\n{mark}\n{mark}\n"
    head, _, rest = text.partition(mark)
    _, _, tail = rest.partition(mark)
    path.write_text(f"{head}{mark}\n{body}\n{mark}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doors", default=",".join(DOORS), help=f"comma-separated, from {', '.join(DOORS)}")
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--answer-tokens", type=int, default=48, help="T of an answer (vault-ask, generate)")
    parser.add_argument("--vault-budget", type=float, default=8.0,
                        help="the vault tenant's lifetime epsilon (every release charges its units; 8 fixes alpha 3, "
                             "where a release at epsilon 8 is reachable, docs/vault.md)")
    parser.add_argument("--long", type=int, default=1, help="TAB reporting-half documents at full length")
    parser.add_argument("--long-max-chars", type=int, default=2500)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=Path("runs/doors"))
    parser.add_argument("--write", type=Path, default=None, help="also put the table in this markdown file")
    parser.add_argument("--table-only", action="store_true", help="measure what OUT holds, run nothing")
    args = parser.parse_args(argv)
    args.doors = [d.strip() for d in args.doors.split(",") if d.strip()]
    unknown = set(args.doors) - set(DOORS)
    if unknown:
        raise SystemExit(f"unknown doors {sorted(unknown)}; choose from {', '.join(DOORS)}")
    done = load(args.out / "outputs.jsonl") if args.table_only else run(args)
    body = table(done, args)
    print(body)
    if args.write:
        write_section(args.write, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
