"""Benchmark: PMixED prediction against the bare mixed-adapter forward pass of the same rows,
and against one forward pass per member (the reference implementation's way).

Setting (issue 14): ``--prompts`` prompts answered together, each a sequence of 1 + N rows (the
public row on the base model, then one row per member's LoRA adapter, N = ``--members``);
``--max-tokens`` T new tokens per prompt; float32 on CPU (or ``--device``). The base model is the
embedded default model or, with ``--large``, a 2-layer model with the Qwen2.5-0.5B shapes
(hidden 896, vocabulary 151,936, random weights). The adapters have rank 4 on every linear
layer with random non-zero B. With ``--ensemble DIR`` the benchmark reads a trained ensemble
instead (``tokendp ensemble train``; its base model from the manifest): the mechanism's cost
depends on what the members learnt (a member within the cap at lambda = 1 closes the search in
one pass; a member far from the public model takes several). End-of-text is switched off so that
every timing runs exactly T steps.

Timings, each the best of ``--repeats`` runs in this process, interleaved:

* ``forward``: ``backend.prefill`` of all P (1 + N) rows + T - 1 ``backend.decode`` steps with
  a fixed token, ONE mixed-adapter pass per step (peft ``adapter_names``);
* ``per_member``: the same tokens with one pass per member per step (1 + N passes of P rows, each
  with its own KV cache and a single adapter), as the reference implementation runs the ensemble;
* ``predict``: ``tokendp.predict`` end to end (calibration, PMixED with its float64 mollifier,
  ledger charges, sampling, stop checks).

Reported: seconds per token and the ratios predict / forward and per_member / forward.

Run: ``PYTHONPATH=src python benchmarks/predict.py`` (about a minute on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

import torch

from tokendp.malloc import keep_freed_memory

PROMPT = "The hospital admitted the patient on a Tuesday, and the doctors"


def base_model(large: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from tokendp.models import DEFAULT_MODEL_DIR

    tok = AutoTokenizer.from_pretrained(DEFAULT_MODEL_DIR)
    if large:
        torch.manual_seed(0)
        cfg = Qwen2Config(vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=2,
                          num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096,
                          tie_word_embeddings=True)
        return Qwen2ForCausalLM(cfg), tok, "qwen2-2layer-152k (random)"
    return AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL_DIR, dtype=torch.float32), tok, "default"


def write_ensemble(model, members: int, root: Path) -> dict[str, Path]:
    """``members`` random rank-4 adapters of ``model`` and a manifest, as `tokendp ensemble train` lays them out."""
    from peft import LoraConfig, get_peft_model

    from tokendp.ensemble.manifest import Manifest, ShardInfo, shard_name

    dirs = {}
    for j in range(members):
        torch.manual_seed(j)
        peft_model = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=32, target_modules="all-linear",
                                                                     task_type="CAUSAL_LM"))
        with torch.no_grad():
            for name, p in peft_model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.01)
        dirs[shard_name(j)] = root / shard_name(j)
        peft_model.save_pretrained(dirs[shard_name(j)])
    Manifest("benchmark-base", tuple(ShardInfo(s, 1, 1) for s in dirs), seed=0).write(root)
    return dirs


def best_of(fn) -> float:
    t0 = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--sample-rate", type=float, default=1.0)
    parser.add_argument("--queries", type=int, default=None,
                        help="the budget T the run is calibrated for (default: the tokens timed); a larger T "
                             "means a smaller beta, members further from lambda = 1 and a longer search")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--ensemble", type=Path, default=None, help="a trained ensemble directory (--members unused)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()

    from tokendp.backends import HFBackend, Row, RowSequence
    from tokendp.jobs.predict import load_ensemble, predict, prompt_rows

    if args.ensemble is not None:
        root = args.ensemble
        manifest, backend = load_ensemble(root, device=args.device, dtype="float32")
        model, tok, name = backend.model, backend.tokenizer, manifest.base_model
        args.members = manifest.ensemble_size
    else:
        model, tok, name = base_model(args.large)
        root = Path(tempfile.mkdtemp(prefix="tokendp-bench-ensemble-"))
        dirs = write_ensemble(model, args.members, root)
        backend = HFBackend(model.to(args.device).eval(), tok, name=name)
        backend.add_adapters(dirs)
    tok.eos_token = None  # no early stop: every timing runs exactly T steps
    model.generation_config.eos_token_id = None
    shards = backend.adapters
    prompts = [f"{PROMPT} ({i})" for i in range(args.prompts)]
    ids = [tuple(tok(p)["input_ids"]) for p in prompts]
    seqs = [prompt_rows(i, shards) for i in ids]
    token = torch.full((args.prompts,), int(tok.convert_tokens_to_ids(tok.tokenize("the")[0])))  # (P,)
    T = args.max_tokens

    def run_forward() -> None:
        state, _ = backend.prefill(seqs)
        for _ in range(T - 1):
            backend.decode(state, token)

    def run_per_member() -> None:
        states = [backend.prefill([RowSequence((Row(i, adapter),)) for i in ids])[0] for adapter in (None, *shards)]
        for _ in range(T - 1):
            for state in states:
                backend.decode(state, token)

    def run_predict():
        return predict(prompts, ensemble=root, backend=backend, queries=args.queries or args.prompts * T, max_new_tokens=T,
                       epsilon=8.0, delta=1e-5, sample_rate=args.sample_rate, seed=0, concurrency=args.prompts,
                       diagnostics=True)

    out = run_predict()  # warm-up and the report
    run_forward()
    run_per_member()
    t = {"forward": float("inf"), "per_member": float("inf"), "predict": float("inf")}
    for _ in range(args.repeats):  # interleaved, so that load from other processes hits all alike
        t["forward"] = min(t["forward"], best_of(run_forward))
        t["per_member"] = min(t["per_member"], best_of(run_per_member))
        t["predict"] = min(t["predict"], best_of(run_predict))
    tokens = args.prompts * T
    result = {
        "model": name, "vocab_size": backend.vocab_size, "device": args.device, "threads": args.threads,
        "members": args.members, "prompts": args.prompts, "rows": args.prompts * (1 + args.members),
        "max_tokens": T, "queries": out.report.queries, "sample_rate": args.sample_rate,
        "tokens_released": out.report.tokens_released,
        "epsilon": out.report.epsilon, "beta": out.report.beta, "diagnostics": out.diagnostics,
        "seconds_per_token": {k: v / tokens for k, v in t.items()},
        "ratio_predict_over_forward": t["predict"] / t["forward"],
        "ratio_per_member_over_forward": t["per_member"] / t["forward"],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
