"""Benchmark: DP-Fusion sanitization against the bare forward passes and against dp-fusion-lib.

Setting (issue 3): a 2-layer model built from a config with the Qwen2.5-0.5B shapes
(hidden 896, vocabulary 151,936) and random weights, one TAB test document with its gold
spans in 6 privacy groups, 150 new tokens, float32 on CPU.

Timings, each the best of ``--repeats`` runs, all in this process with the same threads:

* ``forward``: prefill + 150 decode steps of the same 7 rows through the backend, sampling
  from the public row (no mechanism) - the floor for any DP-Fusion implementation;
* ``tokendp``: ``tokendp.sanitize_batch`` end to end (contexts, DP-Fusion step, ledger);
  required: tokendp / forward <= 1.10;
* ``prefill shared`` vs ``prefill unshared``: the prompt pass with and without the shared
  prefix cache;
* ``dp-fusion-lib``: if a Python with ``dp-fusion-lib==0.1.0`` is given (``--dpf-python``,
  default ``/tmp/dpf/bin/python``), its ``dp_fusion_groups_incremental`` on the same token
  rows, betas, model weights and threads, run as a subprocess; required: tokendp / it <= 0.6.

With ``--model NAME`` (e.g. ``rewriter``) the same document runs on that model instead (its own
tokenizer, template and placeholder; ``--device``), dp-fusion-lib is skipped, and the report
adds seconds per document, tokens per second, and the speculative engine (``speculative=True``,
k = 4) against the one-token engine. The rewriter stops at EOS, so the forward passes run as
many tokens as tokendp released: the ratio stays like for like.

Run: ``PYTHONPATH=src python benchmarks/sanitize.py`` (a few minutes on 2 CPU cores);
``PYTHONPATH=src python benchmarks/sanitize.py --model rewriter --device cuda`` on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import torch

from tokendp.malloc import keep_freed_memory

TAB = Path("../shared/data/tab")
GROUPS, NEW_TOKENS, BETA, ALPHA = 6, 150, 0.05, 2.0


def build_tokenizer(texts: list[str], out: Path):
    """A byte-level BPE tokenizer trained on the TAB texts (8k entries; ids fit the 152k head)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=8000, special_tokens=["<|endoftext|>", "<|mask|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(out)
    return fast


def build_model(out: Path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=2,
                      num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32_768,
                      tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg).eval()
    model.save_pretrained(out)
    return model


def pick_document(texts: dict[str, str], gold: dict[str, list]) -> tuple[str, str, list[dict]]:
    """The shortest TAB test document whose gold spans have at least 6 labels."""
    ok = [d for d in sorted(texts) if len({s[2] for s in gold[d]}) >= GROUPS]
    doc = min(ok, key=lambda d: len(texts[d]))
    return doc, texts[doc], [{"start": s, "end": e, "label": lab} for s, e, lab in gold[doc]]


def group_mapping(spans: list[dict]) -> dict[str, str]:
    """6 groups: the 5 most frequent labels, and every other label together."""
    counts: dict[str, int] = {}
    for s in spans:
        counts[s["label"]] = counts.get(s["label"], 0) + 1
    top = sorted(counts, key=lambda k: -counts[k])[:GROUPS - 1]
    return {lab: lab if lab in top else "OTHER" for lab in counts}


def prefix_token_saving(texts: dict[str, str], gold: dict[str, list], tok, template, placeholder: int) -> float:
    """Share of prefill token-rows that prefix sharing skips over all TAB test documents
    (gold spans, one group per label): sum (R - 1) P / sum R L, with R rows of L tokens and a
    shared prefix of P tokens per document."""
    from tokendp.backends import RowSequence
    from tokendp.text.contexts import build_contexts
    from tokendp.text.spans import Span

    saved = total = 0
    for doc in sorted(texts):
        ctx = build_contexts(texts[doc], [Span(s, e, lab) for s, e, lab in gold[doc]], tok, template=template,
                             placeholder=placeholder)
        p = RowSequence.from_ids(ctx.rows).shared_prefix_length()
        saved += (len(ctx.rows) - 1) * p
        total += len(ctx.rows) * ctx.length
    return saved / total


def best_of(repeats: int, fn, label: str) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        print(f"{label}: {times[-1]:.2f} s", file=sys.stderr, flush=True)
    return min(times)


DPF_SCRIPT = textwrap.dedent("""
    import json, sys, time, torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from dp_fusion_lib.utils import dp_fusion_groups_incremental
    cfg = json.load(open(sys.argv[1]))
    torch.set_num_threads(cfg["threads"])
    model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(cfg["tokenizer"])
    times = []
    for _ in range(cfg["repeats"]):
        rows = {name: torch.tensor(ids) for name, ids in cfg["rows"].items()}
        torch.manual_seed(0)
        t0 = time.perf_counter()
        _, lambdas, _ = dp_fusion_groups_incremental(rows, cfg["betas"], cfg["alpha"], model, tok,
                                                     temperature=1.0, max_new_tokens=cfg["new_tokens"])
        times.append(time.perf_counter() - t0)
    tokens = 1 + len(next(iter(lambdas.values()), []))  # the first token is not in its lists
    print(json.dumps({"seconds": min(times), "tokens": tokens}))
""")


def run_dp_fusion_lib(python: str, work: Path, rows: dict, betas: dict, repeats: int,
                      new_tokens: int) -> float | None:
    if not Path(python).exists():
        return None
    cfg = work / "dpf.json"
    cfg.write_text(json.dumps({"model": str(work / "model"), "tokenizer": str(work / "tok"), "rows": rows,
                               "betas": betas, "alpha": ALPHA, "new_tokens": new_tokens,
                               "threads": torch.get_num_threads(), "repeats": repeats}))
    script = work / "dpf_run.py"
    script.write_text(DPF_SCRIPT)
    # The same malloc settings as keep_freed_memory(), through glibc's environment variables.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
    out = subprocess.run([python, str(script), str(cfg)], capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        print(out.stderr[-2000:], file=sys.stderr)
        return None
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["tokens"] != new_tokens:  # it stops at EOS: then the comparison is not like for like
        print(f"dp-fusion-lib stopped after {result['tokens']} tokens", file=sys.stderr)
        return None
    return result["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dpf-python", default="/tmp/dpf/bin/python")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS,
                        help="tokens to generate (the issue's setting is 150; fewer for a quick look)")
    parser.add_argument("--model", default=None, help="a model name or directory instead of the random 2-layer model")
    parser.add_argument("--device", default=None, help="torch device for --model [default: cuda if available]")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the tokendp command does (tokendp.malloc); both sides of the ratio alike

    from tokendp.backends import HFBackend, RowSequence, load_backend
    from tokendp.generation import generate, make_generator
    from tokendp.mechanisms import MechanismStep
    from tokendp.jobs.sanitize import sanitize_batch
    from tokendp.text.contexts import build_contexts, placeholder_id, prompt_template
    from tokendp.text.spans import Span

    texts = json.loads((TAB / "texts.json").read_text())
    gold = json.loads((TAB / "gold_spans.json").read_text())
    doc_id, text, spans = pick_document(texts, gold)
    mapping = group_mapping(spans)
    work = Path(tempfile.mkdtemp(prefix="tokendp-bench-"))
    if args.model:
        backend = load_backend(args.model, device=args.device, dtype="float32")
        tok = backend.tokenizer
    else:
        tok = build_tokenizer(list(texts.values()), work / "tok")
        backend = HFBackend(build_model(work / "model"), tok, name="qwen2-2layer-152k (random)")
    template = prompt_template(tok, options=backend.options)
    placeholder = placeholder_id(tok, options=backend.options)
    ctx = build_contexts(text, [Span.from_dict(s) for s in spans], tok, template=template,
                         placeholder=placeholder, groups=mapping)
    seq = RowSequence.from_ids(ctx.rows)

    def bare_step(logits, docs, temperature):
        return MechanismStep(torch.log_softmax(logits[:, 0] / temperature, -1), {})  # (N, V)

    def run_tokendp(speculative: bool = False):
        res = sanitize_batch([text], spans=[spans], model=backend, beta=BETA, alpha=ALPHA, groups=mapping,
                             max_new_tokens=args.new_tokens, seed=0, speculative=speculative)
        return res[0]

    released = run_tokendp().report.tokens_generated if args.model else args.new_tokens  # EOS: like for like

    def run_forward():
        generate(backend, [seq], bare_step, max_new_tokens=released, generator=make_generator(0), eos_ids=[])

    print(f"{doc_id}: {len(text)} characters, {ctx.length} prompt tokens, {len(ctx.rows)} rows, "
          f"shared prefix {seq.shared_prefix_length()} tokens", file=sys.stderr, flush=True)
    run_forward()  # warm-up (allocations, lazy inits)
    t_forward, t_tokendp = [], []
    for _ in range(args.repeats):  # interleaved, so that load changes hit both alike
        t_forward.append(best_of(1, run_forward, "forward"))
        t_tokendp.append(best_of(1, run_tokendp, "tokendp"))
    t_forward, t_tokendp = min(t_forward), min(t_tokendp)
    t_shared = best_of(args.repeats, lambda: backend.prefill([seq], share_prefix=True), "prefill shared")
    t_unshared = best_of(args.repeats, lambda: backend.prefill([seq], share_prefix=False), "prefill unshared")
    report = run_tokendp().report
    names = [g.name for g in ctx.groups]
    rows = {"PUBLIC": list(ctx.rows[0]), **{n: list(r) for n, r in zip(names, ctx.rows[1:])}}
    t_dpf = None if args.model else run_dp_fusion_lib(args.dpf_python, work, rows, dict.fromkeys(names, BETA),
                                                      args.repeats, args.new_tokens)
    t_speculative = best_of(args.repeats, lambda: run_tokendp(True), "tokendp speculative") if args.model else None

    result = {
        "model": backend.name, "device": str(backend.device),
        "document": doc_id, "characters": len(text), "prompt_tokens": ctx.length,
        "shared_prefix_tokens": seq.shared_prefix_length(), "groups": names, "rows": len(ctx.rows),
        "new_tokens": args.new_tokens, "tokens_generated": report.tokens_generated, "threads": args.threads,
        "seconds": {"forward": t_forward, "tokendp": t_tokendp, "prefill_shared": t_shared,
                    "prefill_unshared": t_unshared, "dp_fusion_lib": t_dpf, "tokendp_speculative": t_speculative},
        "ratio_tokendp_over_forward": t_tokendp / t_forward,
        "seconds_per_document": t_tokendp, "tokens_per_second": report.tokens_generated / t_tokendp,
        "speculative_speedup": None if t_speculative is None else t_tokendp / t_speculative,
        "prefill_saving": 1 - t_shared / t_unshared,
        "prefill_token_rows_saved_all_tab": prefix_token_saving(texts, gold, tok, template, placeholder),
        "ratio_tokendp_over_dp_fusion_lib": None if t_dpf is None else t_tokendp / t_dpf,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
