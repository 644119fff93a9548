"""Training loop, checkpoints and export of the default model.

Objective: weighted next-token cross-entropy (see :mod:`examples`), AdamW with linear warm-up
and cosine decay to 10%, gradient clipping at 1.0, fixed seeds. The curriculum position
advances with the steps, but not past ``gate_progress`` until the random-copy loss (an
exponential moving average) is below ``copy_gate``: longer and natural sequences are only
worth their cost once the model copies. Resumable: a checkpoint holds model, optimiser,
scheduler, step, curriculum position, copy-loss average and RNG states; the data stream is
re-seeded from (seed, step).

Continued training (``init_from``): a second stage starts from an exported model directory
(weights and tokenizer), at full length, with a mixture weighted towards filling placeholders
(:func:`examples.kind_weights`); training time and tokens of the earlier stage are carried over.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

from tokendp.models.training.examples import KINDS, Example, ExampleStream, curriculum_max_doc
from tokendp.models.training.synthetic import SyntheticDocs
from tokendp.models.training.tokenizer import END, PAD, SPECIAL_TOKENS, train_tokenizer
from tokendp.models.training.wikitext import paragraphs

DATA = ("WikiText-2 train (detokenised) and synthetic PII-dense documents (Faker: court, "
        "medical, HR, letters, case summaries); random-token sequences; no TAB")
OBJECTIVE = ("copy '<|doc|>X<|rewrite|>X<|end|>' and fill '<|doc|>X with spans masked<|rewrite|>X "
             "with fresh entities, each as many tokens as its placeholders<|end|>'; loss on the "
             "rewrite (+0.1 x LM loss on natural sources); length curriculum")
TOKENDP_JSON = {"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>",
                "stop": ["<|end|>"]}


@dataclass
class TrainConfig:
    """Everything that determines a training run."""

    out_dir: str
    wikitext: str = "../shared/data/wikitext-2/train.txt"
    vocab_size: int = 8192
    hidden: int = 256
    layers: int = 3
    heads: int = 8
    ffn: int = 704
    max_positions: int = 2048
    total_steps: int = 5000
    warmup: int = 100
    lr: float = 1e-3
    weight_decay: float = 0.01
    token_budget: int = 1536
    max_batch: int = 24
    min_doc: int = 16
    max_doc: int = 400
    ramp: float = 0.6
    seed: int = 1234
    threads: int = 2
    copy_gate: float = 1.0  # random-copy loss (nats/token) needed to lengthen past gate_progress
    gate_progress: float = 0.15
    checkpoint_minutes: float = 5.0
    log_every: int = 20
    max_paragraphs: int | None = None
    synthetic_for_tokenizer: int = 20000
    hardware: str = "2 shared CPU cores (torch, 2 threads)"
    init_from: str | None = None  # an exported model directory to continue from (fill stage)


def model_config(cfg: TrainConfig, tokenizer) -> LlamaConfig:
    """A Llama-architecture config: RoPE, RMSNorm, SwiGLU, tied embeddings."""
    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden, intermediate_size=cfg.ffn,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.heads, max_position_embeddings=cfg.max_positions,
        rope_theta=10000.0, tie_word_embeddings=True, rms_norm_eps=1e-5,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|doc|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids(END),
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD))


def prepare_tokenizer(cfg: TrainConfig, paras: list[str]):
    """Load the run's tokenizer, training it first (WikiText + synthetic documents) if needed."""
    path = Path(cfg.out_dir) / "tokenizer"
    if cfg.init_from and not (path / "tokenizer.json").exists():
        AutoTokenizer.from_pretrained(cfg.init_from).save_pretrained(path)
    if not (path / "tokenizer.json").exists():
        synth = SyntheticDocs(cfg.seed)
        texts = paras + [synth.document(8).text for _ in range(cfg.synthetic_for_tokenizer)]
        train_tokenizer(texts, vocab_size=cfg.vocab_size).save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def load_paragraphs(cfg: TrainConfig) -> list[str]:
    """Detokenised WikiText paragraphs; with ``wikitext=""`` (the smoke run, which must not need
    ../shared) synthetic documents stand in for them."""
    unk = SyntheticDocs(cfg.seed + 1)
    if not cfg.wikitext:
        return [unk.document(4).text for _ in range(cfg.max_paragraphs or 200)]
    paras = []
    for p in paragraphs(cfg.wikitext, unk=lambda: unk.value("name").split()[-1]):
        paras.append(p)
        if cfg.max_paragraphs and len(paras) >= cfg.max_paragraphs:
            break
    return paras


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak at total_steps."""
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    t = min(1.0, (step - cfg.warmup) / max(1, cfg.total_steps - cfg.warmup))
    return 0.1 + 0.45 * (1 + math.cos(math.pi * t))


def collate(batch: list[Example], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids (B, T), attention mask (B, T) and loss weights (B, T)."""
    width = max(len(e.ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)  # (B, T)
    attn = torch.zeros((len(batch), width), dtype=torch.long)  # (B, T)
    weights = torch.zeros((len(batch), width), dtype=torch.float32)  # (B, T)
    for i, e in enumerate(batch):
        ids[i, :len(e.ids)] = torch.tensor(e.ids)
        attn[i, :len(e.ids)] = 1
        weights[i, :len(e.ids)] = torch.tensor(e.weights)
    return ids, attn, weights


def token_losses(model, ids: torch.Tensor, attn: torch.Tensor,
                 weights: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of predicting ids[:, t] from ids[:, :t], (B, T), zero where weights is 0.

    The output layer (half of this model's compute at an 8k vocabulary) runs only at the
    positions that carry loss.
    """
    hidden = model.model(input_ids=ids, attention_mask=attn).last_hidden_state  # (B, T, H)
    keep = weights[:, 1:] > 0  # (B, T-1)
    logits = model.lm_head(hidden[:, :-1][keep]).float()  # (N, V)
    ce = torch.zeros_like(weights)  # (B, T)
    ce[:, 1:][keep] = torch.nn.functional.cross_entropy(logits, ids[:, 1:][keep],
                                                        reduction="none")  # (N,)
    return ce


def save_checkpoint(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def train(cfg: TrainConfig) -> Path:
    """Train (or resume) into ``cfg.out_dir``; returns the checkpoint path."""
    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2))
    paras = load_paragraphs(cfg)
    tok = prepare_tokenizer(cfg, paras)
    torch.manual_seed(cfg.seed)
    model = LlamaForCausalLM(model_config(cfg, tok))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95),
                            weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))
    ckpt_path = out / "checkpoint.pt"
    step, elapsed, tokens_seen = 0, 0.0, 0
    curriculum, copy_ema = 0, float("inf")
    earlier = {"minutes": 0.0, "tokens": 0, "steps": 0}
    if cfg.init_from:
        model.load_state_dict(LlamaForCausalLM.from_pretrained(cfg.init_from, dtype=torch.float32).state_dict())
        info = json.loads((Path(cfg.init_from) / "training.json").read_text())
        earlier = {"minutes": info["train_minutes"], "tokens": info["tokens_seen"], "steps": info["step"]}
        curriculum = cfg.total_steps  # the model already copies: full lengths from the start
    if ckpt_path.exists():
        state = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        step, elapsed, tokens_seen = state["step"], state["elapsed"], state["tokens_seen"]
        curriculum = state.get("curriculum", min(step, int(cfg.gate_progress * cfg.total_steps)))
        copy_ema = state.get("copy_ema", float("inf"))
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        print(f"resumed at step {step}", flush=True)
    stream = ExampleStream(tok, paras, seed=cfg.seed * 1_000_003 + step, max_doc=cfg.max_doc,
                           min_doc=cfg.min_doc, ramp=cfg.ramp, fill_stage=cfg.init_from is not None)
    model.train()
    sums = {k: [0.0, 0] for k in KINDS}
    t0, last_ckpt = time.time(), time.time()
    start_elapsed = elapsed

    def checkpoint() -> None:
        save_checkpoint(ckpt_path, {
            "model": model.state_dict(), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(), "step": step, "curriculum": curriculum,
            "copy_ema": copy_ema, "earlier": earlier,
            "elapsed": start_elapsed + time.time() - t0, "tokens_seen": tokens_seen,
            "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
            "config": asdict(cfg)})

    while step < cfg.total_steps:
        batch = stream.batch(curriculum / cfg.total_steps, token_budget=cfg.token_budget,
                             max_batch=cfg.max_batch)
        ids, attn, weights = collate(batch, tok.pad_token_id)
        ce = token_losses(model, ids, attn, weights)  # (B, T)
        target = (weights == 1.0).float()  # (B, T)
        loss = (ce * weights).sum() / target.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        tokens_seen += int(attn.sum())
        per_example = ((ce * target).sum(1) / target.sum(1)).tolist()
        for e, value in zip(batch, per_example):
            sums[e.kind][0] += value
            sums[e.kind][1] += 1
            if e.kind == "random":
                copy_ema = value if math.isinf(copy_ema) else 0.95 * copy_ema + 0.05 * value
        curriculum += copy_ema < cfg.copy_gate or curriculum < cfg.gate_progress * cfg.total_steps
        if step % cfg.log_every == 0 or step == cfg.total_steps:
            losses = " ".join(f"{k}={s / n:.3f}" for k, (s, n) in sums.items() if n)
            wall = start_elapsed + time.time() - t0
            print(f"step {step} curriculum {curriculum} copy_ema {copy_ema:.2f} "
                  f"wall {wall / 60:.1f}m lr {sched.get_last_lr()[0]:.2e} T {ids.shape[1]} B {ids.shape[0]} tokens {tokens_seen} {losses}", flush=True)
            sums = {k: [0.0, 0] for k in KINDS}
        if time.time() - last_ckpt > 60 * cfg.checkpoint_minutes:
            checkpoint()
            last_ckpt = time.time()
    checkpoint()
    return ckpt_path


def _portable_tokenizer_config(path: Path) -> None:
    """Name the generic fast-tokenizer class and the special tokens under both the
    transformers 4 and 5 keys, so either major version loads the tokenizer."""
    config = json.loads(path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    extra = config.get("extra_special_tokens") or config.get("additional_special_tokens")
    config["extra_special_tokens"] = config["additional_special_tokens"] = extra
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def export(out_dir: str | Path, dest: str | Path) -> Path:
    """Write the latest checkpoint of ``out_dir`` as an fp16 HF model directory at ``dest``."""
    out, dest = Path(out_dir), Path(dest)
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    known = TrainConfig.__dataclass_fields__
    cfg = TrainConfig(**{k: v for k, v in state["config"].items() if k in known})
    tok = AutoTokenizer.from_pretrained(out / "tokenizer")
    model = LlamaForCausalLM(model_config(cfg, tok))
    model.load_state_dict(state["model"])
    model = model.to(torch.float16)
    model.generation_config = GenerationConfig(
        eos_token_id=tok.convert_tokens_to_ids(END), pad_token_id=tok.pad_token_id,
        do_sample=False, max_new_tokens=1024)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    tok.save_pretrained(dest)
    _portable_tokenizer_config(dest / "tokenizer_config.json")
    (dest / "tokendp.json").write_text(json.dumps(TOKENDP_JSON, indent=2) + "\n")
    earlier = state.get("earlier", {"minutes": 0.0, "tokens": 0, "steps": 0})
    info = {"parameters": sum(p.numel() for p in model.parameters()),
            "trained_context": 2 * curriculum_max_doc(
                min(1.0, state.get("curriculum", state["step"]) / cfg.total_steps),
                start=cfg.min_doc, end=cfg.max_doc,
                ramp=cfg.ramp) + 3, "data": DATA, "objective": OBJECTIVE,
            "hardware": cfg.hardware, "step": earlier["steps"] + state["step"],
            "total_steps": earlier["steps"] + cfg.total_steps,
            "train_minutes": round(earlier["minutes"] + state["elapsed"] / 60, 1),
            "tokens_seen": earlier["tokens"] + state["tokens_seen"],
            "special_tokens": SPECIAL_TOKENS, "config": state["config"]}
    (dest / "training.json").write_text(json.dumps(info, indent=2) + "\n")
    return dest
