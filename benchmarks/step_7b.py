"""Benchmark: the DP-Fusion step on a model with the shape of Qwen2.5-7B-Instruct (issue 27, item 4).

No hub is reachable, and quality does not matter here: the model is built from its config with
random weights (bfloat16 on a GPU), so the numbers are the cost of the passes and of the step.
The config is Qwen2.5-7B-Instruct's (``QWEN25_7B`` below, as published in its config.json):
hidden 3584, 28 layers, 28 attention heads, 4 key/value heads (head dim 128), MLP 18944,
vocabulary 152,064, RMSNorm eps 1e-6, rope theta 1e6, untied embeddings (7.6B parameters,
15.2 GB in bfloat16).

A batch of ``--batch`` documents (default 8), each with ``--groups`` privacy groups (1 + m
rows of ``--prompt-tokens`` tokens: a public row with placeholders and one row per group,
which differs from it in that group's spans only), decodes ``--new-tokens`` tokens. Timings,
all in this process, interleaved, best of ``--repeats``:

* ``passes``: prefill + the same number of decode passes of the same rows through the backend,
  with a fixed token (no sampling, no mechanism): the floor;
* ``forward``: :func:`tokendp.generation.generate` with the public row's own distribution
  (the loop, the exact sampler, no mechanism);
* ``tokendp``: ``generate`` with the DP-Fusion step (:class:`tokendp.mechanisms.DPFusion`,
  alpha ``--alpha``, beta ``--beta`` for every group) and the exact sampler;
* ``step``: the DP-Fusion step and the exact sampler alone, on one decode step's logits,
  against one decode pass (``pass``): the step's share of the forward pass.

Reported: the ratios tokendp / passes and tokendp / forward (the issue's goal: at most 1.05 at
batch 8), step / pass, and tokens per second (released tokens of all documents per second).

GPU: ``PYTHONPATH=src python benchmarks/step_7b.py`` (cuda if available, bfloat16).
CPU smoke test (seconds; tests/test_step_7b_benchmark.py):
``PYTHONPATH=src python benchmarks/step_7b.py --scale small --layers 2 --threads 1``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence

import torch

QWEN25_7B = {  # Qwen2.5-7B-Instruct's config.json (the values that shape the computation)
    "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0, "hidden_act": "silu", "tie_word_embeddings": False, "use_sliding_window": False,
    "sliding_window": 131072, "max_window_layers": 28, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645,
}
SMALL = {  # the same architecture, tiny: a CPU smoke test in seconds
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 4096, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0, "hidden_act": "silu", "tie_word_embeddings": False, "use_sliding_window": False,
    "bos_token_id": 0, "eos_token_id": 1,
}


def build_backend(scale: str, layers: int | None, device: str, dtype: torch.dtype, seed: int = 0):
    """An :class:`~tokendp.backends.HFBackend` over a Qwen2 model with random weights, built on
    ``device`` in ``dtype`` (no copy through host memory), and a word-level tokenizer that
    covers its vocabulary (ids only: the text does not matter)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    from tokendp.backends import HFBackend

    values = dict(QWEN25_7B if scale == "full" else SMALL)
    if layers is not None:
        values["num_hidden_layers"] = values["max_window_layers"] = layers
    cfg = Qwen2Config(**values)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(cfg, dtype=dtype).eval()
    vocab = {f"t{i}": i for i in range(cfg.vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t2"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=f"t{cfg.eos_token_id}", pad_token="t2",
                                   unk_token="t2")
    return HFBackend(model, fast, name=f"qwen2.5-7b-shape ({scale}, {cfg.num_hidden_layers} layers, random)")


def documents(n: int, groups: int, length: int, vocab: int, seed: int = 0) -> list[list[list[int]]]:
    """``n`` documents of 1 + ``groups`` equal-length rows: row 0 public (placeholder id 3 in
    every span), row i its group's spans filled in. Spans cover about 10% of the tokens, the
    first one after a shared prefix of a quarter of the prompt."""
    g = torch.Generator().manual_seed(seed)
    docs = []
    for _ in range(n):
        private = torch.randint(4, vocab, (length,), generator=g)
        starts = torch.randint(length // 4, length - 4, (max(groups, length // 40),), generator=g).tolist()
        owners = [k % groups for k in range(len(starts))]
        public = private.clone()
        for at in starts:
            public[at:at + 4] = 3
        rows = [public.tolist()]
        for i in range(groups):
            row = public.clone()
            for at, owner in zip(starts, owners):
                if owner == i:
                    row[at:at + 4] = private[at:at + 4]
            rows.append(row.tolist())
        docs.append(rows)
    return docs


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", choices=("full", "small"), default="full",
                        help="full: Qwen2.5-7B-Instruct's shape; small: a tiny model of the same architecture")
    parser.add_argument("--layers", type=int, default=None, help="override the number of layers [default: 28 full, 2 small]")
    parser.add_argument("--batch", type=int, default=8, help="documents decoded together")
    parser.add_argument("--groups", type=int, default=6, help="privacy groups per document (rows = 1 + groups)")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="[default: 421 full (the rewriter's document), 32 small]")
    parser.add_argument("--new-tokens", type=int, default=None, help="[default: 64 full, 4 small]")
    parser.add_argument("--alpha", type=float, default=2.0)
    parser.add_argument("--beta", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=None, help="[default: 3 full, 1 small]")
    parser.add_argument("--device", default=None, help="[default: cuda if available, else cpu]")
    parser.add_argument("--dtype", default=None, help="bfloat16 or float32 [default: bfloat16 on cuda, float32 on cpu]")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads [default: torch's]")
    args = parser.parse_args(argv)
    full = args.scale == "full"
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    prompt = args.prompt_tokens or (421 if full else 32)
    new_tokens = args.new_tokens or (64 if full else 4)
    repeats = args.repeats or (3 if full else 1)
    if args.threads:
        torch.set_num_threads(args.threads)

    from tokendp.backends import RowSequence
    from tokendp.generation import generate, make_generators
    from tokendp.mechanisms import DPFusion, MechanismStep
    from tokendp.sampling import sample_ids

    backend = build_backend(args.scale, args.layers, str(device), dtype)
    vocab = backend.model.config.vocab_size
    sequences = [RowSequence.from_ids(rows) for rows in documents(args.batch, args.groups, prompt, vocab)]
    mechanism = DPFusion(args.alpha)
    betas = torch.full((args.batch, args.groups), args.beta, dtype=torch.float64, device=device)  # (N, m)

    def dp_step(logits, docs, temperature):
        return mechanism.step(logits, betas=betas[docs], temperature=temperature)

    def bare_step(logits, docs, temperature):
        return MechanismStep(torch.log_softmax(logits[:, 0].float() / temperature, -1), {})  # (N, V)

    def run(step) -> None:
        generate(backend, sequences, step, max_new_tokens=new_tokens, generator=make_generators(0, args.batch),
                 eos_ids=[])

    def passes() -> None:
        state, _ = backend.prefill(sequences)
        token = torch.full((args.batch, 1), 5, dtype=torch.int64)
        for _ in range(new_tokens):
            backend.extend(state, token)

    def prefill() -> None:
        backend.prefill(sequences)

    state, flat = backend.prefill(sequences)  # one step's logits, for the step alone
    logits = flat.view(args.batch, 1 + args.groups, -1)  # (N, R, V)
    docs = torch.arange(args.batch, device=device)
    generators = make_generators(0, args.batch)
    token = torch.full((args.batch, 1), 5, dtype=torch.int64)

    def step_alone() -> None:
        for _ in range(new_tokens):
            out = dp_step(logits, docs, 1.0)
            sample_ids(out.logprobs, generators)

    def one_pass_each() -> None:
        for _ in range(new_tokens):
            backend.extend(state, token)

    with torch.inference_mode():
        run(dp_step)  # warm-up: allocations, kernels, lazy inits
        run(bare_step)
        times: dict[str, list[float]] = {k: [] for k in ("passes", "forward", "tokendp", "prefill", "step", "pass")}
        for _ in range(repeats):  # interleaved, so that load changes hit every mode alike
            times["passes"].append(timed(passes, device))
            times["forward"].append(timed(lambda: run(bare_step), device))
            times["tokendp"].append(timed(lambda: run(dp_step), device))
            times["prefill"].append(timed(prefill, device))
            times["step"].append(timed(step_alone, device) / new_tokens)
            times["pass"].append(timed(one_pass_each, device) / new_tokens)
    best = {k: min(v) for k, v in times.items()}
    cfg = backend.model.config
    result = {
        "model": backend.name, "device": str(device), "dtype": str(dtype).removeprefix("torch."),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "parameters": sum(p.numel() for p in backend.model.parameters()),
        "config": {k: getattr(cfg, k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                "num_key_value_heads", "intermediate_size", "vocab_size")},
        "batch": args.batch, "groups": args.groups, "rows": args.batch * (1 + args.groups),
        "prompt_tokens": prompt, "new_tokens": new_tokens, "alpha": args.alpha, "beta": args.beta,
        "repeats": repeats, "threads": torch.get_num_threads(),
        "seconds": best,
        "ratio_tokendp_over_passes": best["tokendp"] / best["passes"],
        "ratio_tokendp_over_forward": best["tokendp"] / best["forward"],
        "step_share_of_pass": best["step"] / best["pass"],
        "tokens_per_second": args.batch * new_tokens / best["tokendp"],
        "tokens_per_second_forward": args.batch * new_tokens / best["forward"],
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
