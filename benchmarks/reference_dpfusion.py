"""Benchmark: tokendp against the reference DP-Fusion library (dp-fusion-lib 0.1.0) in one run (issue 27, item 5).

The same documents (token rows: a public row with placeholders and one row per privacy group,
:func:`step_7b.documents`), the same model object, the same Renyi order and the same cap on
each group's symmetric divergence: tokendp's cap is alpha * beta (docs/privacy.md,
"DP-Fusion"), dp-fusion-lib's ``find_lambda`` caps the divergence at the beta it is given, so
it gets alpha * beta. Both generate up to ``--new-tokens`` tokens per document and stop at the
tokenizer's EOS; times are per released token, interleaved, best of ``--repeats``:

* ``reference``: ``dp_fusion_lib.dp_fusion_groups_incremental``, one document at a time (its
  only mode: one KV-cached batch of the document's rows);
* ``tokendp_one``: :func:`tokendp.generation.generate` with the DP-Fusion step, one document
  at a time (like for like);
* ``tokendp_batch``: the same documents decoded together (tokendp's batched engine).

The two are not the same mechanism: dp-fusion-lib bisects lambda on a float32 divergence that
clamps probabilities at 1e-10 (which can accept lambdas whose true divergence exceeds the cap,
docs/privacy.md) and samples with ``torch.multinomial``; tokendp certifies every lambda in
float64 and samples exactly. Only the cost is compared here. On a GPU dp-fusion-lib runs the
model under ``torch.amp.autocast("cuda")`` (float16); give both the same ``--dtype``.

dp-fusion-lib is not a dependency of tokendp (it is non-commercial licensed, and pins nothing
tokendp needs): install its wheel beside tokendp without dependencies, e.g.
``pip download dp-fusion-lib==0.1.0 --no-deps`` on a machine with index access, then
``pip install --no-deps dp_fusion_lib-0.1.0-py3-none-any.whl`` on the GPU host (its imports,
torch, transformers and requests, are already there). Without it the script prints
``{"skipped": ...}`` and exits 0.

Run: ``PYTHONPATH=src:benchmarks python benchmarks/reference_dpfusion.py --model 7b`` (GPU) or
``--model tiny --threads 1`` (CPU; ``--model`` also takes ``small`` and any tokendp model name).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import step_7b  # noqa: E402  (the 7B-shaped model and the synthetic documents)


def reference_module():
    """dp_fusion_lib.utils, or None when dp-fusion-lib is not installed."""
    try:
        return importlib.import_module("dp_fusion_lib.utils")
    except ImportError:
        return None


def load(model: str, device: str, dtype: torch.dtype, layers: int | None):
    if model in ("7b", "small"):
        return step_7b.build_backend("full" if model == "7b" else "small", layers, device, dtype)
    from tokendp.backends import load_backend

    return load_backend(model, device=device, dtype=str(dtype).removeprefix("torch."))


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="7b", help="7b (Qwen2.5-7B shape, random), small, or a tokendp model name")
    parser.add_argument("--layers", type=int, default=None, help="for 7b / small: override the number of layers")
    parser.add_argument("--docs", type=int, default=4)
    parser.add_argument("--groups", type=int, default=6)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--alpha", type=float, default=2.0)
    parser.add_argument("--beta", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default=None, help="[default: cuda if available, else cpu]")
    parser.add_argument("--dtype", default=None, help="[default: bfloat16 on cuda, float32 on cpu]")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    reference = reference_module()
    if reference is None:
        result = {"skipped": "dp-fusion-lib is not installed (pip install --no-deps its 0.1.0 wheel; see the docstring)"}
        print(json.dumps(result))
        return result
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))

    from tokendp.backends import RowSequence
    from tokendp.generation import document_seed, generate, make_generators
    from tokendp.mechanisms import DPFusion

    backend = load(args.model, str(device), dtype, args.layers)
    tok, model = backend.tokenizer, backend.model
    if tok.pad_token_id is None:  # dp-fusion-lib pads the rows' batch with it
        tok.pad_token = tok.eos_token
    vocab = min(model.config.vocab_size, len(tok))
    docs = step_7b.documents(args.docs, args.groups, args.prompt_tokens, vocab)
    eos = tok.eos_token_id
    mechanism = DPFusion(args.alpha)
    betas = torch.full((args.docs, args.groups), args.beta, dtype=torch.float64, device=device)
    names = [f"G{i}" for i in range(args.groups)]

    def dp_step(logits, index, temperature):
        return mechanism.step(logits, betas=betas[index], temperature=temperature)

    def run_tokendp(which: list[int]) -> int:
        streams = make_generators([document_seed(0, i) for i in which], len(which))  # document i's own stream
        out = generate(backend, [RowSequence.from_ids(docs[i]) for i in which], dp_step,
                       max_new_tokens=args.new_tokens, generator=streams, eos_ids=[eos])
        return sum(len(g.token_ids) for g in out)

    def run_reference(i: int) -> int:
        rows = {"PUBLIC": torch.tensor(docs[i][0]), **{n: torch.tensor(r) for n, r in zip(names, docs[i][1:])}}
        torch.manual_seed(i)
        _, lambdas, _ = reference.dp_fusion_groups_incremental(
            rows, dict.fromkeys(names, args.alpha * args.beta), args.alpha, model, tok, temperature=1.0,
            max_new_tokens=args.new_tokens)
        return 1 + len(next(iter(lambdas.values()), []))  # its lists leave out the first token

    def timed(fn) -> tuple[float, int]:
        step_7b.sync(device)
        t0 = time.perf_counter()
        tokens = fn()
        step_7b.sync(device)
        return time.perf_counter() - t0, tokens

    with torch.inference_mode():
        run_tokendp([0])  # warm-up
        run_reference(0)
        per_token: dict[str, list[float]] = {"reference": [], "tokendp_one": [], "tokendp_batch": []}
        released: dict[str, int] = {}
        for _ in range(args.repeats):  # interleaved
            for name, fn in (("reference", lambda: sum(run_reference(i) for i in range(args.docs))),
                             ("tokendp_one", lambda: sum(run_tokendp([i]) for i in range(args.docs))),
                             ("tokendp_batch", lambda: run_tokendp(list(range(args.docs))))):
                seconds, tokens = timed(fn)
                per_token[name].append(seconds / tokens)
                released[name] = tokens
                print(f"{name}: {seconds:.2f} s, {tokens} tokens", file=sys.stderr, flush=True)
    best = {k: min(v) for k, v in per_token.items()}
    result = {
        "model": backend.name, "device": str(device), "dtype": str(dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(), "docs": args.docs, "groups": args.groups,
        "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens, "alpha": args.alpha,
        "beta": args.beta, "cap": args.alpha * args.beta, "repeats": args.repeats,
        "released_tokens": released, "seconds_per_token": best,
        "ratio_tokendp_one_over_reference": best["tokendp_one"] / best["reference"],
        "ratio_tokendp_batch_over_reference": best["tokendp_batch"] / best["reference"],
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
