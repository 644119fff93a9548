"""Benchmark of the embedded default model (results go into its model card).

Measures, on this machine:
- copy fidelity: greedy rewrite of TAB paragraphs of 300-600 characters with no placeholders,
  mean difflib ratio to the input (reporting half: odd-indexed documents of sorted ids);
- perplexity of the language model on detokenised WikiText-2 test (per token, the document
  tokens after ``<|doc|>``);
- public-context rewrites: TAB paragraphs whose gold spans are replaced by placeholders
  (every overlapping token -> ``<|mask|>``), greedily rewritten; the share of the characters
  outside the spans that the rewrite reproduces in order (does it keep the thread of the
  document around its fillers?), and a few examples;
- filler loss: nats per token of fill examples built like the training data but freshly drawn
  (synthetic documents and WikiText-2 train excerpts, seed 99), over the tokens opposite a
  placeholder (the fillers) and over the copied tokens;
- latency: load the model and generate 100 tokens for 7 rows, next to the bare load time.

  PYTHONPATH=src python benchmarks/default_model.py [--quick] [--model-dir DIR] [--record]
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

from tokendp.models import DEFAULT_MODEL_DIR, load_default_model, prompt_format
from tokendp.models.training.examples import ExampleStream, masked_ids
from tokendp.models.training.wikitext import paragraphs
from tokendp.text.spans import Span

DATA = Path("../shared/data")


def tab_paragraphs(n: int) -> list[tuple[str, list[Span]]]:
    """Up to ``n`` paragraphs of 300-600 characters (with their gold spans) from the
    reporting half of TAB: odd-indexed documents in sorted id order."""
    texts = json.loads((DATA / "tab" / "texts.json").read_text(encoding="utf-8"))
    gold = json.loads((DATA / "tab" / "gold_spans.json").read_text(encoding="utf-8"))
    out = []
    for doc_id in sorted(texts)[1::2]:
        text, pos, candidates = texts[doc_id], 0, []
        for para in text.split("\n"):
            start, pos = pos, pos + len(para) + 1
            if 300 <= len(para) <= 600:
                candidates.append((start, para))
        if not candidates:
            continue
        # The middle qualifying paragraph: one per document keeps the sample diverse.
        start, para = candidates[len(candidates) // 2]
        spans = [Span(s - start, e - start, label) for s, e, label in gold[doc_id]
                 if start <= s and e <= start + len(para)]
        out.append((para, sorted(spans)))
        if len(out) == n:
            break
    return out


def prompt_ids(tokenizer, fmt: dict, doc_ids: list[int]) -> list[int]:
    """ids(template prefix) + ids(document) + ids(template suffix), as the engine builds them."""
    before, after = fmt["prompt_template"].split("{document}")
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    return enc(before) + doc_ids + enc(after)


@torch.no_grad()
def greedy(model, tokenizer, prompts: list[list[int]], max_new: int) -> list[str]:
    """Greedy continuations of left-padded prompts, cut at the stop token."""
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), tokenizer.pad_token_id, dtype=torch.long)  # (B, T)
    attn = torch.zeros_like(ids)  # (B, T)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        attn[i, width - len(p):] = 1
    out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max_new,
                         do_sample=False, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)  # (B, T + new)
    return [tokenizer.decode(row[width:], skip_special_tokens=True) for row in out]


def rewrites(model, tokenizer, fmt: dict, docs: list[list[int]], batch: int = 8) -> list[str]:
    """Greedy rewrites of documents given as token ids, ``batch`` prompts at a time."""
    out = []
    for i in range(0, len(docs), batch):
        chunk = docs[i:i + batch]
        out += greedy(model, tokenizer, [prompt_ids(tokenizer, fmt, d) for d in chunk],
                      max(map(len, chunk)) + 16)
    return out


def copy_fidelity(model, tokenizer, fmt: dict, paras: list[str]) -> float:
    """Mean difflib ratio between each paragraph and its greedy rewrite."""
    docs = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in paras]
    outs = rewrites(model, tokenizer, fmt, docs)
    return sum(difflib.SequenceMatcher(None, o, p, autojunk=False).ratio()
               for o, p in zip(outs, paras)) / len(paras)


@torch.no_grad()
def perplexity(model, tokenizer, n_paragraphs: int, max_len: int = 512) -> float:
    """exp(mean NLL per token) of WikiText-2 test paragraphs, each after ``<|doc|>``."""
    doc_id = tokenizer.convert_tokens_to_ids("<|doc|>")
    nll, count = 0.0, 0
    for k, para in enumerate(paragraphs(DATA / "wikitext-2" / "test.txt", unk=lambda: "<unk>")):
        if k == n_paragraphs:
            break
        ids = torch.tensor([[doc_id] + tokenizer(para, add_special_tokens=False)["input_ids"]
                            [:max_len]])  # (1, T)
        logits = model(input_ids=ids).logits[0, :-1].float()  # (T-1, V)
        nll += torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum").item()
        count += ids.shape[1] - 1
    return math.exp(nll / count)


def public_rewrites(model, tokenizer, fmt: dict, items) -> list[dict]:
    """Public-context rewrites: gold spans masked token-wise, greedy rewrite."""
    docs = [masked_ids(tokenizer, para, spans) for para, spans in items]
    return [{"public_context": tokenizer.decode(d).replace(fmt["placeholder"], "[MASK]"),
             "rewrite": t} for d, t in zip(docs, rewrites(model, tokenizer, fmt, docs))]


def context_kept(original: str, spans: list[Span], rewrite: str) -> float:
    """Share of the characters of ``original`` outside ``spans`` that ``rewrite`` reproduces,
    in order (difflib's matching blocks)."""
    outside = [True] * len(original)
    for s in spans:
        outside[s.start:s.end] = [False] * (s.end - s.start)
    blocks = difflib.SequenceMatcher(None, original, rewrite, autojunk=False).get_matching_blocks()
    kept = sum(sum(outside[a:a + size]) for a, _, size in blocks)
    return kept / max(1, sum(outside))


@torch.no_grad()
def filler_loss(model, tokenizer, per_kind: int = 32, n_tokens: int = 200) -> dict:
    """Mean nats per token of fresh fill/wikifill examples: opposite placeholders, and copied."""
    paras = paragraphs(DATA / "wikitext-2" / "train.txt", unk=lambda: "Smith")
    stream = ExampleStream(tokenizer, list(paras), seed=99)
    mask_id = tokenizer.convert_tokens_to_ids("<|mask|>")
    sums = {"filler": [0.0, 0], "copied": [0.0, 0]}
    for kind in ("fill", "wikifill") * per_kind:
        ids = stream.example(kind, n_tokens).ids  # <|doc|> source <|rewrite|> target <|end|>
        n = (len(ids) - 3) // 2
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()  # (L, V)
        ce = torch.nn.functional.cross_entropy(logits[n + 1:2 * n + 1], torch.tensor(ids[n + 2:2 * n + 2]),
                                               reduction="none")  # (n,) target token t
        hidden = torch.tensor(ids[1:n + 1]) == mask_id  # (n,) source token t is a placeholder
        for name, where in (("filler", hidden), ("copied", ~hidden)):
            sums[name][0] += ce[where].sum().item()
            sums[name][1] += int(where.sum())
    return {name: round(total / max(1, count), 3) for name, (total, count) in sums.items()}


def latency(model_dir: Path, rows: int = 7, new_tokens: int = 100) -> dict:
    """Seconds to load the model, and to load it and generate ``new_tokens`` for ``rows`` rows."""
    t0 = time.perf_counter()
    model, tokenizer = load_default_model(model_dir=model_dir)
    loaded = time.perf_counter() - t0
    prompt = tokenizer("<|doc|>The applicant was born in", add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt] * rows)  # (R, T)
    with torch.no_grad():
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                       min_new_tokens=new_tokens, max_new_tokens=new_tokens,
                       pad_token_id=tokenizer.pad_token_id)
    return {"load_s": round(loaded, 2), "load_and_generate_s": round(time.perf_counter() - t0, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=str(DEFAULT_MODEL_DIR))
    parser.add_argument("--quick", action="store_true", help="8 paragraphs, small perplexity set")
    parser.add_argument("--record", action="store_true",
                        help="store the metrics in the model directory's training.json")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model_dir = Path(args.model_dir)
    timing = latency(model_dir)
    model, tokenizer = load_default_model(model_dir=model_dir)
    fmt = prompt_format(model_dir)
    items = tab_paragraphs(8 if args.quick else 40)
    public = public_rewrites(model, tokenizer, fmt, items)
    kept = [context_kept(p, spans, r["rewrite"]) for (p, spans), r in zip(items, public)]
    metrics = {
        "copy_fidelity_tab_300_600": round(copy_fidelity(model, tokenizer, fmt,
                                                         [p for p, _ in items]), 4),
        "tab_paragraphs": len(items),
        "public_rewrite_context_kept": round(sum(kept) / len(kept), 4),
        **{f"{name}_loss_nats": value
           for name, value in filler_loss(model, tokenizer, 8 if args.quick else 32).items()},
        "wikitext2_test_ppl": round(perplexity(model, tokenizer, 40 if args.quick else 400), 2),
        "wikitext2_test_paragraphs": 40 if args.quick else 400,
        **timing,
        "cpu_load_avg_1m": round(os.getloadavg()[0], 1),
        "threads": args.threads,
    }
    examples = public[:2 if args.quick else 3]
    print(json.dumps({"metrics": metrics, "rewrite_examples": examples}, indent=2,
                     ensure_ascii=False))
    if args.record:
        info_path = model_dir / "training.json"
        info = json.loads(info_path.read_text(encoding="utf-8"))
        info["metrics"] = metrics
        info["rewrite_examples"] = examples
        info_path.write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
