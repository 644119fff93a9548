"""Benchmark: what the shared prefix saves when ``tokendp generate`` reads a long prompt.

The rows of a generation prompt (``tokendp.text.prompts``) agree up to the first place where
one shows something the public row does not: the first span of a trusted document, or the first
untrusted chunk. ``HFBackend.prefill`` runs that common prefix once per prompt and copies its
KV cache to every row. Two layouts of a long prompt (SmolLM2's tokenizer and chat template):

* ``chunks last``: a long trusted document without spans (a TAB judgment, ~6,000 characters)
  then 4 untrusted chunks (other TAB excerpts, ~500 characters each): 5 rows that share
  everything before the first chunk;
* ``spans early``: the same document with its gold spans as groups (one per label), then the
  4 chunks: 1 + groups + 4 rows that share only what precedes the first span.

Timings (best of ``--repeats``, interleaved): ``backend.prefill`` of the rows with and without
sharing, on a model with SmolLM2-135M's shapes (hidden 576, 9 heads, 3 KV heads, vocabulary
49,152) but ``--layers`` layers and random weights: the saving is in token-rows, the same per
layer. Reported: prefill token-rows with and without sharing, seconds, and their ratio.

Run: ``PYTHONPATH=src python benchmarks/generate.py`` (a few minutes on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from tokendp.malloc import keep_freed_memory

TAB = Path("../shared/data/tab")


def build_backend(layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    from tokendp.backends import HFBackend
    from tokendp.models.registry import base_model_dir
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_model_dir())
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49_152, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                      tie_word_embeddings=True)
    return HFBackend(LlamaForCausalLM(cfg).eval(), tok, name=f"smollm2-shapes-{layers}-layers (random)",
                     options={"placeholder": "_"})


def layouts(backend):
    """{layout: RowSequence} for the two layouts (see the module docstring)."""
    from tokendp.backends import RowSequence
    from tokendp.text.contexts import placeholder_id, prompt_template
    from tokendp.text.prompts import build_prompt_contexts
    from tokendp.text.spans import Span

    texts = json.loads((TAB / "texts.json").read_text())
    gold = json.loads((TAB / "gold_spans.json").read_text())
    ids = sorted(texts, key=lambda d: len(texts[d]))
    doc = next(d for d in ids if len(texts[d]) >= 6000)
    text = texts[doc][:6000]
    spans = [Span(s, e, lab) for s, e, lab in gold[doc] if e <= len(text)]
    chunks = [texts[d][:500] for d in ids[:4]]
    tok = backend.tokenizer
    tpl, ph = prompt_template(tok, instruction=""), placeholder_id(tok, options=backend.options)
    out = {}
    for name, doc_spans in (("chunks last", []), ("spans early", spans)):
        ctx = build_prompt_contexts("What did the court decide?", [(text, doc_spans)], chunks, tok, template=tpl,
                                    placeholder=ph)
        out[name] = RowSequence.from_ids(ctx.rows)
    return doc, out


def token_rows(seq, shared: bool) -> int:
    """Prefill token-rows: every row in full, or the common prefix once plus every row's suffix."""
    p = seq.shared_prefix_length() if shared else 0
    return p + sum(len(r.ids) - p for r in seq.rows)


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    backend = build_backend(args.layers)
    doc, seqs = layouts(backend)
    result = {"document": doc, "layers": args.layers, "threads": args.threads, "layouts": {}}
    for name, seq in seqs.items():
        backend.prefill([seq])  # warm-up
        shared, unshared = [], []
        for _ in range(args.repeats):  # interleaved, so that load changes hit both alike
            shared.append(best_of(1, lambda: backend.prefill([seq], share_prefix=True)))
            unshared.append(best_of(1, lambda: backend.prefill([seq], share_prefix=False)))
        row = {"rows": len(seq), "prompt_tokens": len(seq.rows[0].ids), "shared_prefix_tokens": seq.shared_prefix_length(),
               "token_rows_shared": token_rows(seq, True), "token_rows_unshared": token_rows(seq, False),
               "seconds_shared": min(shared), "seconds_unshared": min(unshared)}
        row["token_row_ratio"] = row["token_rows_shared"] / row["token_rows_unshared"]
        row["time_ratio_shared_over_unshared"] = row["seconds_shared"] / row["seconds_unshared"]
        result["layouts"][name] = row
        print(f"{name}: {json.dumps(row)}", file=sys.stderr, flush=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
