"""Benchmark: InvisibleInk synthesis against the bare forward passes of the same rows.

Setting (issue 6): ``--num`` synthetic texts generated together, each from a disjoint batch of
``--batch-size`` WikiText-2 paragraphs, so every step runs num * (1 + B) rows; ``--max-tokens``
new tokens per text; float32 on CPU (or ``--device``). The model is the embedded default model
(its weights and tokenizer) or, with ``--large``, a 2-layer model with the Qwen2.5-0.5B shapes
(hidden 896, vocabulary 151,936, random weights) and the default model's tokenizer, where the
mechanism's work over the vocabulary is largest relative to the model. End-of-text is switched
off so that both timings run exactly T steps on the same rows.

Timings, each the best of ``--repeats`` runs in this process with the same threads:

* ``forward``: ``backend.prefill`` of the same rows + T - 1 ``backend.decode`` steps with a fixed
  token: the bare forward passes, no mechanism, no sampling, no bookkeeping;
* ``synthesize``: ``tokendp.synthesize`` end to end (tokenising, calibration, DClip + Top-k+ +
  exponential mechanism, ledger, sampling, stop checks, decoding the texts).

Required: synthesize / forward <= 1.15. Tokens per second count num * T generated tokens.

Run: ``PYTHONPATH=src python benchmarks/synthesize.py`` (about a minute on 2 CPU cores);
``--large`` for the 152k vocabulary.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from tokendp.malloc import keep_freed_memory

WIKITEXT = Path("../shared/data/wikitext-2/valid.txt")
FALLBACK = "The hospital admitted the patient on a Tuesday, and the doctors reviewed the notes twice."


def references(count: int) -> list[str]:
    """``count`` WikiText-2 paragraphs of 200 to 600 characters (a fixed sentence if the data is absent)."""
    if not WIKITEXT.is_file():
        return [f"{FALLBACK} ({i})" for i in range(count)]
    lines = [s.strip() for s in WIKITEXT.read_text(encoding="utf-8").splitlines()]
    good = [s for s in lines if 200 <= len(s) <= 600 and not s.startswith("=")]
    return good[:count]


def load_backend(large: bool, device: str):
    """The default model (or the large random model) with end-of-text switched off."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from tokendp.backends import HFBackend
    from tokendp.models import DEFAULT_MODEL_DIR, prompt_format

    tok = AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR)
    if large:
        torch.manual_seed(0)
        cfg = Qwen2Config(vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=2,
                          num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096,
                          tie_word_embeddings=True)
        model, name = Qwen2ForCausalLM(cfg), "qwen2-2layer-152k (random)"
    else:
        model, name = AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL_DIR, dtype=torch.float32), "default"
    tok.eos_token = None  # no early stop: both timings run exactly T steps
    model.generation_config.eos_token_id = None
    options = {k: v for k, v in prompt_format().items() if k != "stop"}
    return HFBackend(model.to(device).eval(), tok, name=name, options=options)


def best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=100)
    parser.add_argument("--epsilon", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--large", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the tokendp command does (tokendp.malloc); both sides of the ratio alike

    from tokendp.jobs.synthesize import batch_rows, partition, synthesize
    from tokendp.text.prompt_pair import synthesis_prompts

    backend = load_backend(args.large, args.device)
    refs = references(args.num * args.batch_size)
    tok = backend.tokenizer
    prompts = synthesis_prompts(tok, options=backend.options)
    seqs = [batch_rows(refs, b, tok, prompts)
            for b in partition(len(refs), batch_size=args.batch_size, num=args.num)]
    token = torch.full((args.num,), int(tok.convert_tokens_to_ids(tok.tokenize("the")[0])))  # (N,)

    def run_forward() -> None:
        state, _ = backend.prefill(seqs)
        for _ in range(args.max_tokens - 1):
            backend.decode(state, token)

    def run_synthesize():
        return synthesize(refs, epsilon=args.epsilon, delta=1e-5, references_per_text=args.batch_size,
                          max_new_tokens=args.max_tokens, top_k=args.top_k, num=args.num, model=backend, seed=0,
                          concurrency=args.num)

    out = run_synthesize()  # warm-up (allocations, lazy inits) and the report
    run_forward()
    t_forward = t_synth = float("inf")
    for _ in range(args.repeats):  # interleaved, so that load from other processes hits both alike
        t_forward = min(t_forward, best_of(1, run_forward))
        t_synth = min(t_synth, best_of(1, run_synthesize))
    tokens = args.num * args.max_tokens
    result = {
        "model": backend.name, "vocab_size": backend.vocab_size, "device": args.device, "threads": args.threads,
        "texts": args.num, "batch_size": args.batch_size, "rows": sum(len(s) for s in seqs),
        "prompt_tokens_max": max(s.max_length for s in seqs), "max_tokens": args.max_tokens, "top_k": args.top_k,
        "tokens_generated": sum(o.tokens_generated for o in out), "clip": out[0].clip, "epsilon": out[0].epsilon,
        "topk_plus_mean": out[0].topk_plus_mean,
        "seconds": {"forward": t_forward, "synthesize": t_synth},
        "tokens_per_second": {"forward": tokens / t_forward, "synthesize": tokens / t_synth},
        "ratio_synthesize_over_forward": t_synth / t_forward,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
