"""Benchmark of a rewriter (issue 13's metrics, issue 28's slot labels) on TAB excerpts with gold spans.

For each of ``--docs`` documents of ``--split`` (``report``, the default: odd-indexed sorted doc
ids, never used for training; ``tune``: even-indexed, for choosing settings such as the
temperature; the rewriter's training paragraphs come from this half, so its absolute figures are
optimistic there), one excerpt of ``--min-chars`` to ``--max-chars`` characters per document (the
middle paragraph in that range), these rewrites:

- ``public``: greedy (temperature 0) rewrite of the public context (every gold-span token
  hidden), i.e. ``tokendp.sanitize_batch(..., method="public", temperature=0)``;
- ``dp-fusion``: DP-Fusion at ``--epsilon`` per group (groups by label), once per temperature
  of ``--temperatures`` (default: ``tokendp.sanitize``'s default temperature), seeded: document
  i gets seed ``--seed`` + i at every temperature, so the temperatures differ only in the
  temperature.

Metrics per method (labels compared at TAB's level: the tagger's DATE and DURATION count as
DATETIME, OCCUPATION as DEM, through ``tokendp.text.taggers.labels.to_tab``):

- kept: characters of the text outside the gold spans that the rewrite keeps, in order
  (difflib SequenceMatcher matching blocks, autojunk=False) / characters outside spans; mean
  over documents;
- types: sum over labels L of min(spans the built-in tagger finds with label L in the rewrite,
  gold spans with label L) / gold spans, pooled over documents;
- slot_label_share: the share of gold spans (slots) whose filler the built-in tagger labels with
  the slot's own label, pooled over documents. The filler of a slot: the public text is the
  original with each span (overlapping spans merged) cut to one slot character; difflib
  (SequenceMatcher, autojunk=False) aligns it to the rewrite, and the filler is the rewrite text
  of the non-equal opcode that holds the slot character, i.e. what the rewrite puts between the
  kept text on either side (empty when the rewrite drops the slot; adjacent slots whose
  separator the rewrite changed share one filler). The tagger runs on the whole rewrite; the
  filler's label is the TAB label whose tagger spans cover most of the filler's characters
  (a tie counts for each tied label), none when no tagger span overlaps it;
- distinct_fillers: over the pairs of gold spans of one document with the same label and
  different text, the share whose fillers differ (stripped of spaces and end punctuation):
  issue 28's "one name fills every PERSON slot", which greedy and low-temperature decoding risk;
- fluency: median over documents of perplexity(rewrite) / perplexity(original) under an
  independent judge (``--judge``, see below);
- leaks: gold span strings longer than 3 characters that appear in a rewrite but not in the
  public text (the document with its spans cut out); counted for every method, and for
  ``public`` it must be 0;
- repeated_trigrams (diagnostic): mean share of word trigrams of a rewrite that occur more than
  once. A character n-gram judge scores a loop that repeats a phrase as fluent; this shows it.

Judges: ``ngram`` (default): a character 7-gram model with interpolated Witten-Bell smoothing,
trained here on detokenised WikiText-2 train and the TAB tuning half minus the documents being
measured (never the reporting half), so it shares nothing with the rewriter's base model and
has not seen the originals it judges; ``tiny``: the embedded 4.5M model (per token, after
``<|doc|>``); or a model directory.

``--source synthetic`` measures held-out synthetic documents instead of TAB excerpts
(:func:`held_out_documents`); ``endings`` is the share of rewrites that stopped on the model's
end of turn. ``--examples`` at least ``--docs`` stores every rewrite, which
``benchmarks/rewriter_compare.py`` needs.

A markdown table of the figures (one row per method and temperature) goes to stderr at the end.

  PYTHONPATH=src python benchmarks/rewriter.py --model rewriter [--adapter runs/rewriter/adapter]
  PYTHONPATH=src python benchmarks/rewriter.py --split tune --docs 6 --temperatures 0.5,0.7,1.0 --threads 1
  PYTHONPATH=src python benchmarks/rewriter.py --model smollm2 --docs 4 --methods public
  PYTHONPATH=src python benchmarks/rewriter.py --source synthetic --docs 12 --methods dp-fusion --examples 12
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import json
import math
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from tokendp.text.spans import Span
from tokendp.text.taggers.labels import to_tab

DATA = Path("../shared/data")
TARGETS = {"kept": 0.85, "types": 0.6, "fluency": 2.0, "public_leaks": 0}


# ---------------------------------------------------------------------------- documents
def excerpts(n: int, *, split: str = "report", min_chars: int = 250, max_chars: int = 1100, data: Path = DATA
             ) -> list[tuple[str, str, list[Span]]]:
    """(doc_id, excerpt, gold spans) for the first ``n`` documents of ``split`` (``report`` or
    ``tune``) that have a paragraph of ``min_chars``..``max_chars`` characters with at least one
    gold span: the middle such paragraph."""
    from tokendp.text.tab import load_tab

    if split not in ("tune", "report"):
        raise SystemExit(f"--split must be tune or report, got {split!r}")
    tab = load_tab(data / "tab", split)
    out = []
    for doc_id, text in tab.texts.items():
        pos, candidates = 0, []
        for para in text.split("\n"):
            start, pos = pos, pos + len(para) + 1
            spans = sorted(Span(s.start - start, s.end - start, s.label) for s in tab.gold[doc_id]
                           if start <= s.start and s.end <= start + len(para))
            if min_chars <= len(para) <= max_chars and spans:
                candidates.append((para, spans))
        if candidates:
            para, spans = candidates[len(candidates) // 2]
            out.append((doc_id, para, spans))
        if len(out) == n:
            break
    return out


def report_excerpts(n: int, *, min_chars: int = 250, max_chars: int = 1100, data: Path = DATA
                    ) -> list[tuple[str, str, list[Span]]]:
    """:func:`excerpts` of the reporting half (``benchmarks/speculative.py`` uses the same)."""
    return excerpts(n, split="report", min_chars=min_chars, max_chars=max_chars, data=data)


# Held-out synthetic documents (issue 37): kinds and wording that the rewriter's training data
# (tokendp.models.training.synthetic, whose templates are court, medical, HR, letter, summary and
# e-mail sentences) never uses: clinic letters, HR e-mails and police reports, each with a header
# or salutation, two body paragraphs and a closing with a signature. Only the slot values come
# from the same Faker generator (SyntheticDocs.value), drawn from a seed (HELD_OUT_SEED) that the
# training stream never uses (its synthetic documents are seeded from 13 * 1_000_003 + step).
HELD_OUT_SEED = 37_037
_HELD_OUT: dict[str, tuple[list[str], list[str], list[str]]] = {
    "clinic letter": (
        ["Re: {PERSON:name}, date of birth {DATETIME:dob}, hospital number {CODE:mrn}\n\nDear {PERSON:doctor},"],
        ["I reviewed {PERSON:title_name} in the outpatient clinic of {ORG:hospital} on {DATETIME:date}.",
         "The patient is a {DEM:age} {DEM:occupation} who was referred with headaches lasting {QUANTITY:weeks}.",
         "On examination the weight was {QUANTITY:kg} and the blood pressure {QUANTITY:bp}.",
         "I have started {MISC:drug} {QUANTITY:dose} at night and suggested a headache diary.",
         "A scan has been booked at {ORG:hospital} under reference {CODE:ref}.",
         "The patient lives with a {DEM:relative} at {LOC:address}.",
         "I will see the patient again in {QUANTITY:weeks}; the clinic can be reached on {CODE:phone}."],
        ["With best wishes,\n{PERSON:doctor}\nConsultant Neurologist"],
    ),
    "HR e-mail": (
        ["Subject: probation review\n\nHi {PERSON:first_name},"],
        ["Following our conversation on {DATETIME:date}, here is the outcome of the probation review of {PERSON:name}.",
         "The panel met at our office in {LOC:city} and included {PERSON:name} from the {ORG:department} team.",
         "From {DATETIME:date} the salary rises to {QUANTITY:money} a year under contract {CODE:emp_id}.",
         "The employee has asked to work from home for {QUANTITY:hours} on Fridays, which the panel accepted.",
         "Payroll at {ORG:company} will keep using the bank account {CODE:account}.",
         "Questions about the review can go to {CODE:email}."],
        ["Many thanks,\n{PERSON:name}\n{DEM:job}"],
    ),
    "police report": (
        ["Incident report {CODE:case_no}"],
        ["At about 11 pm on {DATETIME:date}, officers were called to {LOC:address} after a reported burglary.",
         "The caller, {PERSON:name}, a {DEM:age} {DEM:nationality} {DEM:occupation}, said the back door had been forced.",
         "A neighbour, {PERSON:title_name}, saw a van with the registration {CODE:plate} leave the street.",
         "Property worth {QUANTITY:money} was reported stolen, including a laptop of {ORG:company}.",
         "A suspect was stopped in {LOC:city} the next morning and taken to {ORG:facility}.",
         "The caller's {DEM:relative} was informed by telephone on {CODE:phone}."],
        ["Reporting officer:\n{PERSON:title_name}, badge {CODE:small_no}"],
    ),
}


def held_out_documents(n: int, *, seed: int = HELD_OUT_SEED, min_chars: int = 250, max_chars: int = 1100
                       ) -> list[tuple[str, str, list[Span]]]:
    """(doc_id, document, spans) of ``n`` held-out synthetic documents (:data:`_HELD_OUT`: clinic
    HR e-mails, clinic letters and police reports in turn), each of ``min_chars`` to ``max_chars``
    characters: the opening, 2-3 sentences in each of two paragraphs, the closing. Deterministic in
    ``seed``; the training data never contains these templates."""
    import random

    from tokendp.models.training.synthetic import PARAGRAPH_BREAK, SyntheticDocs

    gen, rng = SyntheticDocs(seed), random.Random(seed)
    kinds, out = sorted(_HELD_OUT), []
    while len(out) < n:
        kind = kinds[len(out) % len(kinds)]
        openings, body, closings = _HELD_OUT[kind]
        sentences = [body[i] for i in sorted(rng.sample(range(len(body)), rng.randint(4, min(6, len(body)))))]
        cut = len(sentences) // 2
        template = PARAGRAPH_BREAK.join([rng.choice(openings), " ".join(sentences[:cut]), " ".join(sentences[cut:]),
                                         rng.choice(closings)])
        doc = gen._render(template)
        if min_chars <= len(doc.text) <= max_chars:
            out.append((f"synthetic-{len(out)} ({kind})", doc.text, list(doc.spans)))
    return out


# ---------------------------------------------------------------------------- metrics
def kept(original: str, spans: list[Span], rewrite: str) -> float:
    outside = np.ones(len(original), dtype=bool)
    for s in spans:
        outside[s.start:s.end] = False
    blocks = difflib.SequenceMatcher(None, original, rewrite, autojunk=False).get_matching_blocks()
    return float(sum(outside[a:a + size].sum() for a, _, size in blocks) / max(1, outside.sum()))


def public_text(original: str, spans: list[Span]) -> str:
    out, pos = [], 0
    for s in sorted(spans):
        out.append(original[pos:max(pos, s.start)])
        pos = max(pos, s.end)
    return "\x00".join(out + [original[pos:]])


def leaks(original: str, spans: list[Span], rewrite: str) -> list[str]:
    public = public_text(original, spans)
    secrets = {original[s.start:s.end] for s in spans}
    return sorted(x for x in secrets if len(x) > 3 and x in rewrite and x not in public)


def repeated_trigrams(text: str) -> float:
    """Share of word trigrams that occur more than once (loops the n-gram judge does not punish)."""
    words = text.split()
    grams = Counter(zip(words, words[1:], words[2:]))
    total = sum(grams.values())
    return sum(n for n in grams.values() if n > 1) / total if total else 0.0


def type_counts(tags: list[list[Span]]) -> Counter:
    """Spans per TAB label in the tagger's output for each rewrite (DATE, DURATION -> DATETIME, ...)."""
    return Counter(to_tab(s.label, unknown="MISC") for spans in tags for s in spans)


def types_score(found: Counter, gold: Counter) -> float:
    return sum(min(found[label], n) for label, n in gold.items()) / max(1, sum(gold.values()))


SLOT = "\x00"


def slot_fillers(original: str, spans: list[Span], rewrite: str) -> list[tuple[int, int]]:
    """(start, end) in ``rewrite`` of the filler of each span (in the order of ``spans``).

    The public text is ``original`` with each span cut to one :data:`SLOT` character
    (overlapping spans share one); difflib aligns it to the rewrite (autojunk off), and a span's
    filler is the rewrite side of the non-equal opcode that holds its slot character: what the
    rewrite writes between the kept text around the slot (empty when it drops the slot).
    """
    order = sorted(range(len(spans)), key=lambda k: (spans[k].start, spans[k].end))
    parts, length, pos, slot_at = [], 0, 0, [0] * len(spans)
    for k in order:
        s = spans[k]
        if s.start < pos and parts:  # overlaps the previous span: the same slot
            slot_at[k] = length - 1
            pos = max(pos, s.end)
            continue
        piece = original[pos:s.start]
        parts += [piece, SLOT]
        length += len(piece) + 1
        slot_at[k] = length - 1
        pos = max(pos, s.end)
    public = "".join(parts) + original[pos:]
    opcodes = difflib.SequenceMatcher(None, public, rewrite.replace(SLOT, " "), autojunk=False).get_opcodes()
    starts = [op[1] for op in opcodes]
    out = []
    for k in range(len(spans)):
        _, i1, i2, j1, j2 = opcodes[int(np.searchsorted(starts, slot_at[k], side="right")) - 1]
        assert i1 <= slot_at[k] < i2
        out.append((j1, j2))
    return out


def distinct_filler_pairs(original: str, spans: list[Span], rewrite: str) -> tuple[int, int]:
    """(pairs with different fillers, pairs) over the pairs of spans with the same label and
    different text in ``original``: a rewrite that fills two different dates with one date, or
    every PERSON slot with one name, scores low. Fillers compare stripped of spaces and
    punctuation at their ends; overlapping spans (one slot) never form a pair."""
    fill = [rewrite[a:b].strip(" ,.;:()'\"") for a, b in slot_fillers(original, spans, rewrite)]
    same, pairs = 0, 0
    for i in range(len(spans)):
        for j in range(i + 1, len(spans)):
            a, b = spans[i], spans[j]
            if a.label != b.label or original[a.start:a.end] == original[b.start:b.end] \
                    or (a.start < b.end and b.start < a.end):
                continue
            pairs += 1
            same += fill[i] == fill[j]
    return pairs - same, pairs


def filler_labels(tags: list[Span], start: int, end: int) -> set[str]:
    """TAB labels whose tagger spans cover the most characters of ``rewrite[start:end]`` (ties:
    all of them); empty when no tagger span overlaps it."""
    cover: Counter = Counter()
    for t in tags:
        overlap = min(end, t.end) - max(start, t.start)
        if overlap > 0:
            cover[to_tab(t.label, unknown="MISC")] += overlap
    best = max(cover.values(), default=0)
    return {label for label, n in cover.items() if n == best and best > 0}


def slot_label_hits(original: str, spans: list[Span], rewrite: str, tags: list[Span]) -> list[bool]:
    """Per gold span: is its filler in ``rewrite`` tagged (``tags``, the tagger's spans of the
    rewrite) with the span's own TAB label?"""
    return [to_tab(s.label, unknown="MISC") in filler_labels(tags, a, b)
            for s, (a, b) in zip(spans, slot_fillers(original, spans, rewrite))]


# ---------------------------------------------------------------------------- judges
class CharNgramJudge:
    """Character n-gram language model, interpolated Witten-Bell, exact integer n-gram keys.

    Characters map to ids 1..254 by frequency (255 = any other); an n-gram of up to 7 ids is one
    int64 (8 bits per character), so counts are ``np.unique`` over the corpus.
    """

    def __init__(self, text: str, order: int = 7) -> None:
        assert order <= 7
        self.order = order
        freq = Counter(text)
        self.ids = {c: i + 1 for i, (c, _) in enumerate(freq.most_common(254))}
        codes = self._codes(text)
        self.grams, self.counts, self.ctx, self.ctx_total, self.ctx_types = [], [], [], [], []
        for k in range(1, order + 1):
            g = self._grams(codes, k)
            keys, counts = np.unique(g, return_counts=True)
            self.grams.append(keys)
            self.counts.append(counts)
            ctx = keys >> 8
            cu, first = np.unique(ctx, return_index=True)
            totals = np.add.reduceat(counts, first)
            types = np.diff(np.append(first, len(ctx)))
            self.ctx.append(cu)
            self.ctx_total.append(totals)
            self.ctx_types.append(types)

    def _codes(self, text: str) -> np.ndarray:
        return np.array([self.ids.get(c, 255) for c in text], dtype=np.int64)

    @staticmethod
    def _grams(codes: np.ndarray, k: int) -> np.ndarray:
        n = len(codes) - k + 1
        g = np.zeros(max(0, n), dtype=np.int64)
        for j in range(k):
            g = (g << 8) | codes[j:j + n]
        return g

    @staticmethod
    def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(keys, query).clip(max=len(keys) - 1)
        return np.where(keys[idx] == query, values[idx], 0)

    def log_probs(self, text: str) -> np.ndarray:
        """Natural-log probability of each character after the first ``order - 1``."""
        codes = self._codes(text)
        n = len(codes) - self.order + 1
        if n <= 0:
            return np.zeros(0)
        p = np.full(n, 1.0 / 256)
        for k in range(1, self.order + 1):
            gram = self._grams(codes[self.order - k:], k)[:n]  # k-gram ending at each scored char
            c = self._lookup(self.grams[k - 1], self.counts[k - 1], gram).astype(float)
            total = self._lookup(self.ctx[k - 1], self.ctx_total[k - 1], gram >> 8).astype(float)
            types = self._lookup(self.ctx[k - 1], self.ctx_types[k - 1], gram >> 8).astype(float)
            seen = total > 0
            p = np.where(seen, (c + types * p) / np.maximum(total + types, 1), p)
        return np.log(p)

    def perplexity(self, text: str) -> float:
        lp = self.log_probs(text)
        return float(math.exp(-lp.mean())) if len(lp) else float("nan")


def ngram_judge(data: Path = DATA, wiki_chars: int = 6_000_000, exclude: frozenset[str] = frozenset()
                ) -> CharNgramJudge:
    """The n-gram judge on WikiText-2 train and the TAB tuning half without the ``exclude`` doc ids
    (the documents being measured, when they are from the tuning half)."""
    from tokendp.text.tab import load_tab
    from tokendp.models.training.wikitext import paragraphs

    parts, size = [], 0
    for p in paragraphs(data / "wikitext-2" / "train.txt", unk=lambda: "Smith"):
        parts.append(p)
        size += len(p)
        if size > wiki_chars:
            break
    parts += [t for d, t in load_tab(data / "tab", "tune").texts.items() if d not in exclude]
    return CharNgramJudge("\n".join(parts))


class HFJudge:
    """Per-token perplexity under a causal LM (the text after ``prefix``)."""

    def __init__(self, model_dir: str, prefix: str = "") -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.prefix = self.tok(prefix, add_special_tokens=False)["input_ids"] if prefix else \
            [self.tok.bos_token_id or self.tok.eos_token_id]

    @torch.no_grad()
    def perplexity(self, text: str) -> float:
        ids = torch.tensor([self.prefix + self.tok(text, add_special_tokens=False)["input_ids"]])
        logits = self.model(input_ids=ids).logits[0, :-1].float()  # (T-1, V)
        nll = torch.nn.functional.cross_entropy(logits[len(self.prefix) - 1:],
                                                ids[0, len(self.prefix):])
        return float(torch.exp(nll))


def make_judge(name: str, exclude: frozenset[str] = frozenset()):
    if name == "ngram":
        return ngram_judge(exclude=exclude), "character 7-gram, interpolated Witten-Bell, on WikiText-2 train (6M chars) + TAB tuning half (never a measured document)"
    if name == "tiny":
        from tokendp.models import DEFAULT_MODEL_DIR

        return HFJudge(str(DEFAULT_MODEL_DIR), "<|doc|>"), "the embedded 4.5M tiny model"
    return HFJudge(name), name


# ---------------------------------------------------------------------------- run
def load_model(name: str, adapter: str | None):
    from tokendp.backends import load_backend
    from tokendp.backends.hf import load_named_model as load_named

    if name == "rewriter":
        return load_named("rewriter", adapter=adapter)
    return load_backend(name)


def default_temperature() -> float:
    """``tokendp.sanitize``'s default temperature (the benchmark follows the library)."""
    import tokendp

    return inspect.signature(tokendp.sanitize).parameters["temperature"].default


def parse_temperatures(text: str | None) -> list[float]:
    if text is None:
        return [default_temperature()]
    try:
        values = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise SystemExit(f"--temperatures takes numbers separated by commas, got {text!r}") from None
    if not values or not all(math.isfinite(t) and t > 0 for t in values):
        raise SystemExit(f"--temperatures must be positive numbers, got {text!r}")
    return values


def score(texts: list[str], spans: list[list[Span]], rewrites: list[str], tags: list[list[Span]],
          judge, ppl_orig: list[float], gold: Counter, stop_reasons: list[str] | None = None) -> dict:
    """Every metric of one method's rewrites (``tags``: the tagger's spans of each rewrite;
    ``stop_reasons``: why each rewrite stopped, for the endings share)."""
    k = [kept(t, s, r) for t, s, r in zip(texts, spans, rewrites)]
    ratios = [judge.perplexity(r) / p if r.strip() else float("inf") for r, p in zip(rewrites, ppl_orig)]
    leak = [leaks(t, s, r) for t, s, r in zip(texts, spans, rewrites)]
    found = type_counts(tags)
    hits = [slot_label_hits(t, s, r, g) for t, s, r, g in zip(texts, spans, rewrites, tags)]
    by_label: dict[str, list[bool]] = {}
    for doc_spans, doc_hits in zip(spans, hits):
        for sp, hit in zip(doc_spans, doc_hits):
            by_label.setdefault(sp.label, []).append(hit)
    n_slots = sum(map(len, hits))
    distinct = [distinct_filler_pairs(t, s, r) for t, s, r in zip(texts, spans, rewrites)]
    return {
        "kept": round(statistics.mean(k), 4), "kept_per_doc": [round(x, 3) for x in k],
        "types": round(types_score(found, gold), 4), "types_found": dict(found),
        "slot_label_share": round(sum(map(sum, hits)) / max(1, n_slots), 4),
        "slot_label_share_per_label": {lab: f"{sum(h)}/{len(h)}" for lab, h in sorted(by_label.items())},
        "distinct_fillers": round(sum(d for d, _ in distinct) / max(1, sum(n for _, n in distinct)), 4),
        "distinct_filler_pairs": sum(n for _, n in distinct),
        "fluency": round(statistics.median(ratios), 3), "fluency_per_doc": [round(x, 3) for x in ratios],
        "leaks": sum(map(len, leak)), "leaked": leak,
        "repeated_trigrams": round(statistics.mean(repeated_trigrams(r) for r in rewrites), 3),
        **({} if stop_reasons is None else {
            # the share of rewrites that ended on the model's end of turn (EOS), not on a stop
            # string (the shipped adapter's <|im_start|>) or at T
            "endings": round(sum(r == "eos" for r in stop_reasons) / max(1, len(stop_reasons)), 4),
            "stop_reasons": dict(Counter(stop_reasons)), "stop_reasons_per_doc": list(stop_reasons)}),
    }


def run(args, on_method=None) -> dict:
    """The benchmark; ``on_method(result so far)`` after each method (for partial results)."""
    import tokendp
    from tokendp.text.taggers import get_tagger

    torch.set_num_threads(args.threads)
    temperatures = parse_temperatures(args.temperatures)
    source = getattr(args, "source", "tab")
    if source == "synthetic":
        docs = held_out_documents(args.docs, min_chars=args.min_chars, max_chars=args.max_chars)
    else:
        docs = excerpts(args.docs, split=args.split, min_chars=args.min_chars, max_chars=args.max_chars)
    t0 = time.perf_counter()
    judge, judge_name = make_judge(args.judge, exclude=frozenset(d[0] for d in docs))
    judge_s = time.perf_counter() - t0
    backend = load_model(args.model, args.adapter)
    tagger = get_tagger("auto")
    texts = [d[1] for d in docs]
    spans = [d[2] for d in docs]
    gold = Counter(s.label for d in docs for s in d[2])
    ppl_orig = [judge.perplexity(t) for t in texts]
    result = {"model": backend.name, "adapter": getattr(args, "adapter", None), "judge": judge_name, "source": source,
              "split": args.split, "docs": [d[0] for d in docs],
              "chars": [len(t) for t in texts], "gold_spans": dict(gold),
              # the originals scored as rewrites: slot_label_share here is the tagger's own agreement
              # with the gold labels, the ceiling a rewrite can reach under this tagger
              "original": score(texts, spans, texts, [list(tagger.tag(t)) for t in texts], judge, ppl_orig, gold),
              "methods": {}}
    runs = []
    for method in args.methods.split(","):
        if method == "public":
            runs.append(("public", method, 0.0))
        elif method == "dp-fusion":
            runs += [(f"dp-fusion@{t:g}", method, t) for t in temperatures]
        else:
            raise SystemExit(f"unknown method {method}")
    for key, method, temperature in runs:
        t0 = time.perf_counter()
        if method == "public":
            outs = tokendp.sanitize_batch(texts, spans=spans, model=backend, method="public",
                                          temperature=0.0)
        else:
            # One document per call: batching documents with different numbers of groups trips
            # an index_add_ shape error in generation._accumulate (diagnostics) at this commit.
            outs = [tokendp.sanitize_batch([t], spans=[s], model=backend, epsilon=args.epsilon,
                                           temperature=temperature, seed=args.seed + i)[0]
                    for i, (t, s) in enumerate(zip(texts, spans))]
        seconds = time.perf_counter() - t0
        rewrites = [o.text for o in outs]
        tags = [list(tagger.tag(r)) for r in rewrites]
        stops = [o.report.stop_reason for o in outs]
        m = {"method": method, **score(texts, spans, rewrites, tags, judge, ppl_orig, gold, stops),
             "seconds": round(seconds, 1),
             "examples": [{"original": t, "rewrite": r} for t, r in list(zip(texts, rewrites))[:args.examples]]}
        if method == "dp-fusion":
            m.update(epsilon=args.epsilon, temperature=temperature, seed=args.seed)
        result["methods"][key] = m
        print(f"[{time.strftime('%H:%M:%S')}] {key}: kept {m['kept']}, types {m['types']}, "
              f"slot labels {m['slot_label_share']}, fluency {m['fluency']}, {seconds:.0f} s",
              file=sys.stderr, flush=True)
        if on_method is not None:
            on_method(result)
    result["judge_build_s"] = round(judge_s, 1)
    result["targets"] = TARGETS
    return result


def summary(result: dict) -> dict:
    """Flat metrics (for `tokendp model info`): method_metric -> value, plus the setting."""
    half = "reporting" if result.get("split", "report") == "report" else "tuning"
    what = "held-out synthetic documents" if result.get("source") == "synthetic" else f"TAB {half}-half excerpts"
    out: dict = {"benchmark": f"benchmarks/rewriter.py, {len(result['docs'])} {what} "
                              f"({sum(result['chars'])} characters, {sum(result['gold_spans'].values())} gold spans)",
                 "judge": result["judge"]}
    for key, m in result["methods"].items():
        method = m.get("method", key)
        setting = f" (epsilon {m['epsilon']}, temperature {m['temperature']})" if method == "dp-fusion" else " (greedy)"
        out[f"{method}{setting}"] = (f"kept {m['kept']}, types {m['types']}, slot labels {m['slot_label_share']}, "
                                     f"fluency {m['fluency']}, leaks {m['leaks']}")
    return out


def table(result: dict) -> str:
    """The figures as a markdown table, one row per method (and temperature)."""
    rows = ["| method | temperature | kept | types | slot labels | distinct fillers | fluency | repeated trigrams "
            "| leaks | endings | seconds |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    o = result.get("original")
    if o:
        rows.append(f"| the original (reference) | - | {o['kept']:.2f} | {o['types']:.2f} | {o['slot_label_share']:.2f} | "
                    f"{o['distinct_fillers']:.2f} | {o['fluency']:.2f} | {o['repeated_trigrams']:.2f} | - | - | - |")
    for key, m in result["methods"].items():
        method = m.get("method", key)
        name = f"DP-Fusion, epsilon {m['epsilon']:g}" if method == "dp-fusion" else "public"
        temp = f"{m['temperature']:g}" if method == "dp-fusion" else "0 (greedy)"
        rows.append(f"| {name} | {temp} | {m['kept']:.2f} | {m['types']:.2f} | {m['slot_label_share']:.2f} | "
                    f"{m['distinct_fillers']:.2f} | {m['fluency']:.2f} | {m['repeated_trigrams']:.2f} | {m['leaks']} | "
                    f"{m.get('endings', float('nan')):.2f} | {m['seconds']:.0f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="rewriter", help="rewriter | smollm2 | tiny | a model directory")
    parser.add_argument("--adapter", default=None, help="with --model rewriter: an adapter directory "
                                                        "(default: the shipped one), e.g. runs/rewriter/adapter")
    parser.add_argument("--split", default="report", choices=["report", "tune"],
                        help="TAB half: report (odd-indexed, for reporting) or tune (even-indexed, for choosing "
                             "settings; the rewriter was trained on its paragraphs)")
    parser.add_argument("--source", default="tab", choices=["tab", "synthetic"],
                        help="tab: TAB excerpts of --split; synthetic: held-out synthetic clinic letters, HR e-mails "
                             "and police reports (templates the training never uses, seed %d)" % HELD_OUT_SEED)
    parser.add_argument("--docs", type=int, default=6)
    parser.add_argument("--min-chars", type=int, default=250)
    parser.add_argument("--max-chars", type=int, default=1100)
    parser.add_argument("--methods", default="public,dp-fusion")
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--temperatures", "--temperature", dest="temperatures", default=None,
                        help="dp-fusion temperatures, comma-separated, e.g. 0.5,0.7,1.0; the same seeds at each "
                             "(default: tokendp.sanitize's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--judge", default="ngram", help="ngram | tiny | a model directory")
    parser.add_argument("--examples", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="also write the JSON here (after each method, with "
                                                    "\"partial\": true until the last)")
    parser.add_argument("--record", action="store_true",
                        help="with --model rewriter: store the summary in the adapter's training.json "
                             "(shown by `tokendp model info rewriter`)")
    args = parser.parse_args(argv)
    if args.record and args.split != "report":
        raise SystemExit("--record stores reporting-half figures only; drop --split tune")
    def write_partial(partial: dict) -> None:  # so that an interrupted sweep keeps what it measured
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps({**partial, "partial": True}, indent=2, ensure_ascii=False) + "\n",
                                      encoding="utf-8")

    result = run(args, on_method=write_partial)
    if args.record:
        from tokendp.models.registry import adapter_dir

        info_path = adapter_dir(args.adapter) / "training.json"
        info = json.loads(info_path.read_text(encoding="utf-8"))
        info["metrics"] = summary(result)
        info_path.write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    text = json.dumps(result, indent=2, ensure_ascii=False)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(table(result), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
