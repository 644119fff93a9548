"""Train (or resume) the LoRA rewriter adapter of SmolLM2-135M-Instruct (CPU or one GPU).

  python scripts/train_rewriter.py --out runs/rewriter              # train / resume from the latest checkpoint
  python scripts/train_rewriter.py --out runs/rewriter --device cuda  # bf16 autocast, float32 adapter
  python scripts/train_rewriter.py --out runs/rewriter --export src/tokendp/models/rewriter
  python scripts/train_rewriter.py --smoke                          # ~1 minute on a tiny model built from a config

Data: :mod:`tokendp.models.training.rewriter` (TAB tuning-half paragraphs with fresh typed
fillers, synthetic Faker documents, WikiText fill and copy), in the model's chat template with
the default paraphrase instruction. Only the adapter trains (LoRA on q, k, v, o, gate, up,
down); the base model stays frozen. Every ``--checkpoint-every`` steps the run writes, each
atomically (temporary name, then rename): ``ckpt-STEP.pt`` (adapter, optimiser, scheduler,
step; the last two are kept) and ``adapter/`` (the fp16 adapter as shipped, with
``training.json``). Rerunning the same command resumes from the newest checkpoint; the data
stream is re-seeded from (seed, step).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from tokendp.models.lora import LLAMA_TARGETS, add_lora, load_lora_state, lora_state_dict, save_adapter
from tokendp.models.training.rewriter import (KINDS, MIXTURE, RewriteExample, RewriterStream, tab_paragraphs,
                                              tiny_model_and_tokenizer)

OBJECTIVE = ("chat template + default paraphrase instruction; source = paragraph with every token "
             "overlapping a hidden span as one '_' placeholder; target = the paragraph with fresh "
             "typed fillers (all spans hidden), some shown and copied (partial), or none (copy); "
             "loss on the assistant answer and <|im_end|>")


@dataclass
class Config:
    out: str = "runs/rewriter"
    base: str = ""  # model directory; "" = the converted SmolLM2 cache
    base_name: str = "smollm2"
    tab: str = "../shared/data/tab"
    wikitext: str = "../shared/data/wikitext-2/train.txt"
    steps: int = 2000
    batch: int = 4
    lr: float = 3e-4
    warmup: int = 20
    weight_decay: float = 0.0
    r: int = 32
    alpha: float = 64.0
    targets: tuple[str, ...] = LLAMA_TARGETS
    max_tokens: int = 320
    seed: int = 13
    threads: int = 1
    device: str = "cpu"
    checkpoint_every: int = 20
    keep: int = 2
    log_every: int = 5
    min_chars: int = 120
    max_chars: int = 1100
    hardware: str = "2 shared CPU cores (torch, 1 thread, nice 10)"


def lr_factor(step: int, cfg: Config) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak at ``cfg.steps``."""
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    t = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return 0.1 + 0.45 * (1 + math.cos(math.pi * t))


def batch_loss(model, batch: list[RewriteExample], pad_id: int) -> tuple[torch.Tensor, int, list[float]]:
    """Mean cross-entropy over the answer tokens of the batch; the LM head runs only there."""
    width = max(len(e.ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)  # (B, T)
    attn = torch.zeros_like(ids)  # (B, T)
    loss_at = torch.zeros((len(batch), width), dtype=torch.bool)  # (B, T): predict ids[:, t]
    for i, e in enumerate(batch):
        ids[i, :len(e.ids)] = torch.tensor(e.ids)
        attn[i, :len(e.ids)] = 1
        loss_at[i, e.n_prompt:len(e.ids)] = True
    device = model.lm_head.weight.device
    ids, attn, loss_at = ids.to(device), attn.to(device), loss_at.to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        hidden = model.model(input_ids=ids, attention_mask=attn).last_hidden_state  # (B, T, H)
    keep = loss_at[:, 1:]  # (B, T-1)
    logits = model.lm_head(hidden[:, :-1][keep]).float()  # (N, V)
    ce = torch.nn.functional.cross_entropy(logits, ids[:, 1:][keep], reduction="none")  # (N,)
    per_example = torch.zeros(len(batch), device=device).index_add_(
        0, keep.nonzero()[:, 0], ce.detach()) / keep.sum(1).clamp(min=1)  # (B,)
    return ce.mean(), int(attn.sum()), per_example.tolist()


def _checkpoints(out: Path) -> list[Path]:
    return sorted(out.glob("ckpt-*.pt"))


def _atomic_dir(write, dest: Path) -> None:
    """Write a directory with ``write(tmp)`` and rename it to ``dest`` (replacing an old one)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        write(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the adapter is meant to be read and shipped
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.rename(dest, old)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_base(cfg: Config):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = cfg.base
    if not base:
        from tokendp.models.cache import SMOLLM2, ensure_model_dir

        base = str(ensure_model_dir(SMOLLM2))
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).to(cfg.device)
    return model, tok


def train(cfg: Config, *, model=None, tokenizer=None, tab=None, wiki=None) -> Path:
    """Train or resume into ``cfg.out``; returns the adapter directory."""
    from tqdm import tqdm

    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if model is None:
        model, tokenizer = load_base(cfg)
    if tab is None:
        tab = tab_paragraphs(cfg.tab, split="tune", min_chars=cfg.min_chars, max_chars=cfg.max_chars) \
            if cfg.tab and Path(cfg.tab).is_dir() else []
    if wiki is None:
        wiki = _wiki(cfg)
    torch.manual_seed(cfg.seed)
    add_lora(model, r=cfg.r, alpha=cfg.alpha, targets=cfg.targets)
    model.to(cfg.device)
    if cfg.device.startswith("cuda"):
        cfg.hardware = f"1 {torch.cuda.get_device_name()} (bf16 autocast, float32 adapter)"
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.999), weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))
    step, elapsed, tokens, ema = 0, 0.0, 0, None
    found = _checkpoints(out)
    if found:
        state = torch.load(found[-1], weights_only=False, map_location=cfg.device)
        load_lora_state(model, state["lora"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        step, elapsed, tokens, ema = state["step"], state["elapsed"], state["tokens"], state["ema"]
        print(f"resumed from {found[-1].name} at step {step}", flush=True)
    (out / "config.json").write_text(json.dumps(asdict(cfg), indent=2) + "\n")
    stream = RewriterStream(tokenizer, tab=tab, wiki=wiki, seed=cfg.seed * 1_000_003 + step,
                            max_tokens=cfg.max_tokens)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model.train()
    t0, start_elapsed = time.time(), elapsed
    sums = {k: [0.0, 0] for k in KINDS}

    def checkpoint() -> None:
        wall = start_elapsed + time.time() - t0
        path = out / f"ckpt-{step:06d}.pt"
        tmp = path.with_suffix(".tmp")
        torch.save({"lora": lora_state_dict(model), "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(), "step": step, "elapsed": wall,
                    "tokens": tokens, "ema": ema, "config": asdict(cfg)}, tmp)
        os.replace(tmp, path)
        for old in _checkpoints(out)[:-cfg.keep]:
            old.unlink()
        info = {"base_model": cfg.base_name, "step": step, "total_steps": cfg.steps,
                "train_minutes": round(wall / 60, 1), "tokens_seen": tokens,
                "loss_ema": None if ema is None else round(ema, 4), "objective": OBJECTIVE,
                "mixture": dict(zip(KINDS, MIXTURE)), "tab_paragraphs": len(tab),
                "hardware": cfg.hardware, "config": asdict(cfg)}

        def write(tmpdir: Path) -> None:
            save_adapter(model, tmpdir, r=cfg.r, alpha=cfg.alpha, targets=cfg.targets,
                         base_model=cfg.base_name, dtype=torch.float16)
            (tmpdir / "training.json").write_text(json.dumps(info, indent=2) + "\n")

        _atomic_dir(write, out / "adapter")

    bar = tqdm(total=cfg.steps, initial=step, desc="rewriter", mininterval=10, dynamic_ncols=True,
               file=sys.stdout)
    while step < cfg.steps:
        batch = stream.batch(cfg.batch)
        # On a CPU, one example per pass with gradients accumulated: no padding (examples differ
        # up to 4x in length, and a padded batch costs its longest row times the batch size). On
        # a GPU, one padded pass: a 135M model is bound by kernel launches, not arithmetic.
        passes = [batch] if cfg.device.startswith("cuda") else [[e] for e in batch]
        opt.zero_grad(set_to_none=True)
        n_answer = sum(len(e.ids) - e.n_prompt for e in batch)
        value, n_tok, per_example = 0.0, 0, []
        for part in passes:
            loss, n, per = batch_loss(model, part, pad)
            share = sum(len(e.ids) - e.n_prompt for e in part) / n_answer
            (loss * share).backward()
            value += loss.item() * share
            n_tok += n
            per_example += per
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        step += 1
        tokens += n_tok
        ema = value if ema is None else 0.95 * ema + 0.05 * value
        for e, v in zip(batch, per_example):
            sums[e.kind][0] += v
            sums[e.kind][1] += 1
        bar.update(1)
        bar.set_postfix(loss=f"{value:.3f}", ema=f"{ema:.3f}", refresh=False)
        if step % cfg.log_every == 0 or step == cfg.steps:
            kinds = {k: round(s / n, 3) for k, (s, n) in sums.items() if n}
            line = {"step": step, "loss": round(value, 4), "ema": round(ema, 4),
                    "lr": sched.get_last_lr()[0], "tokens": tokens,
                    "minutes": round((start_elapsed + time.time() - t0) / 60, 2), **kinds}
            with open(out / "metrics.jsonl", "a") as f:
                f.write(json.dumps(line) + "\n")
            sums = {k: [0.0, 0] for k in KINDS}
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            checkpoint()
    bar.close()
    if not (out / "adapter").exists():
        checkpoint()
    return out / "adapter"


def _wiki(cfg: Config) -> list[str]:
    if not cfg.wikitext or not Path(cfg.wikitext).is_file():
        return []
    from tokendp.models.training.synthetic import SyntheticDocs
    from tokendp.models.training.wikitext import paragraphs

    names = SyntheticDocs(cfg.seed + 1)
    return [p for p in paragraphs(cfg.wikitext, unk=lambda: names.value("surname")) if len(p) >= 300]


def smoke(out: str, steps: int = 6) -> Path:
    """Train a tiny model from a config for ``steps`` steps (checkpoint every 3), synthetic data only."""
    model, tok = tiny_model_and_tokenizer()
    cfg = Config(out=out, base="", base_name="tiny-smoke", tab="", wikitext="", steps=steps, batch=2,
                 warmup=2, r=4, alpha=8, max_tokens=64, checkpoint_every=3, log_every=1)
    return train(cfg, model=model, tokenizer=tok, tab=[], wiki=[])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/rewriter", help="run directory (checkpoints, adapter/, log)")
    parser.add_argument("--smoke", action="store_true", help="tiny end-to-end run in a temp dir")
    parser.add_argument("--export", metavar="DEST", default=None,
                        help="copy the run's latest adapter/ to DEST (e.g. src/tokendp/models/rewriter)")
    for name, field in Config.__dataclass_fields__.items():
        if name in ("out", "targets", "hardware"):
            continue
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(field.default), default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            adapter = smoke(tmp)
            print(f"smoke run wrote {sorted(p.name for p in adapter.iterdir())}")
        return 0
    if args.export:
        src, dest = Path(args.out) / "adapter", Path(args.export)
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("adapter_config.json", "adapter_model.safetensors", "training.json"):
            shutil.copyfile(src / name, dest / name)
        print(f"exported {src} -> {dest}")
        return 0
    cfg = Config(out=args.out)
    for name in Config.__dataclass_fields__:
        if getattr(args, name, None) is not None:
            setattr(cfg, name, getattr(args, name))
    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
