"""Train (or resume) the LoRA rewriter adapter of SmolLM2-135M-Instruct (CPU or one GPU).

  python scripts/train_rewriter.py --out runs/rewriter              # train / resume from the latest checkpoint
  python scripts/train_rewriter.py --out runs/rewriter --device cuda  # bf16 autocast, float32 adapter
  python scripts/train_rewriter.py --out runs/rewriter --export src/tokendp/models/rewriter
  python scripts/train_rewriter.py --out runs/rewriter --merged runs/rewriter/model  # a model directory for --model
  python scripts/train_rewriter.py --smoke                          # ~1 minute on a tiny model built from a config
  python scripts/train_rewriter.py --smoke --placeholder-style typed --keep runs/smoke  # typed slots, kept

``--placeholder-style typed`` trains for typed slots: each hidden token of the source is its
label's marker (``Name``, ``Date``, ``Place``...; :func:`tokendp.text.contexts.typed_markers`)
instead of ``_``, and the adapter's ``tokendp.json`` declares ``"placeholder_style": "typed"``
with the markers, so ``tokendp sanitize`` builds typed public rows for it (docs/sanitize.md).

Data: :mod:`tokendp.models.training.rewriter` (TAB tuning-half paragraphs with fresh typed
fillers, synthetic Faker documents, WikiText fill and copy), in the model's chat template with
the default paraphrase instruction. Only the adapter trains (peft's LoRA on q, k, v, o, gate,
up, down); the base model stays frozen. The loop is tokendp's shared resumable one
(:mod:`tokendp.training`): every ``--checkpoint-every`` steps the run writes, each atomically
(temporary name, then rename): ``checkpoint.pt`` (adapter, optimiser, scheduler, step, in
tokendp's one checkpoint format) and ``adapter/`` (the fp16 adapter as shipped, in PEFT's
layout, with ``training.json``). Rerunning the same command resumes from the checkpoint; the
data stream is re-seeded from (seed, step). A checkpoint is taken up only by the same run: the
same TAB and WikiText paragraphs (by content) and settings; ``--steps`` may grow (the run
continues, its schedule stretched to the new length), ``--device``, ``--threads`` and the
logging and checkpoint intervals may change.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from tokendp.models.training.rewriter import (KINDS, MIXTURE, RewriteExample, RewriterStream, tab_paragraphs,
                                              tiny_model_and_tokenizer)
from tokendp.training import Progress, ProgressBar, ResumableLoop, fingerprint

LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
CHECKPOINT = "checkpoint.pt"
# Settings that change neither the data nor the objective: a run may resume with others.
RESUMABLE_WITH_OTHER = ("out", "steps", "threads", "device", "checkpoint_every", "log_every", "hardware",
                        "tab", "wikitext")  # the paragraphs themselves are in the fingerprint

OBJECTIVE = ("chat template + default paraphrase instruction; source = paragraph with every token "
             "overlapping a hidden span as one '_' placeholder; target = the paragraph with fresh "
             "typed fillers (all spans hidden), some shown and copied (partial), or none (copy); "
             "loss on the assistant answer and <|im_end|>")
TYPED_OBJECTIVE = ("chat template + default paraphrase instruction; source = paragraph with every token "
                   "overlapping a hidden span as ONE marker token of the span's label (typed slots); "
                   "target = the paragraph with coherent fresh fillers (one locale, dates by role, "
                   "titles agreeing with pronouns, distinct entities apart; all spans hidden), some "
                   "shown and copied (partial), or none (copy); loss on the assistant answer and EOS")
STOP = ["<|im_start|>"]  # a sampled answer that skips <|im_end|> and opens a new chat turn stops there


def objective(cfg: Config) -> str:
    return TYPED_OBJECTIVE if cfg.placeholder_style == "typed" else OBJECTIVE


def model_options(cfg: Config, tokenizer) -> dict:
    """The ``tokendp.json`` the adapter ships with: its placeholder style (and, typed, its markers)."""
    from tokendp.text.contexts import PLACEHOLDER_STYLES, typed_markers

    if cfg.placeholder_style not in PLACEHOLDER_STYLES:
        raise SystemExit(f"--placeholder-style must be one of {', '.join(PLACEHOLDER_STYLES)}")
    options = {"placeholder": "_", "stop": STOP}
    if cfg.placeholder_style == "typed":
        options.update(placeholder_style="typed", placeholders=typed_markers(tokenizer))
    return options


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
    log_every: int = 5
    min_chars: int = 120
    max_chars: int = 1100
    hardware: str = "2 shared CPU cores (torch, 1 thread, nice 10)"
    placeholder_style: str = "single"  # "typed": one marker per label (tokendp.text.contexts.placeholders)


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


def add_lora(model, cfg: Config):
    """The peft model: LoRA (rank r, alpha) on ``cfg.targets``, the base frozen, A drawn from ``cfg.seed``."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=0.0, target_modules=list(cfg.targets), bias="none",
                      task_type="CAUSAL_LM")
    torch.manual_seed(cfg.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # peft calls transformers' deprecated is_gradient_checkpointing
        peft_model = get_peft_model(model, lora)
    peft_model.peft_config["default"].base_model_name_or_path = cfg.base_name
    return peft_model


def save_adapter(peft_model, dest: Path) -> None:
    """PEFT's layout (``PeftModel.save_pretrained``), the tensors stored in float16 as shipped."""
    from safetensors.torch import load_file, save_file

    peft_model.save_pretrained(dest, save_embedding_layers=False)  # LoRA layers only; no hub look-up
    weights = dest / "adapter_model.safetensors"
    tensors = {k: v.to(torch.float16).contiguous() for k, v in load_file(str(weights)).items()}
    save_file(tensors, str(weights), metadata={"format": "pt"})


def train(cfg: Config, *, model=None, tokenizer=None, tab=None, wiki=None,
          on_progress=None) -> Path:
    """Train or resume into ``cfg.out``; returns the adapter directory. ``on_progress`` gets each
    step's :class:`tokendp.training.Progress` (after the progress bar)."""
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
    peft_model = add_lora(model, cfg)
    peft_model.to(cfg.device)
    lm = peft_model.get_base_model()  # the LlamaForCausalLM with LoRA layers in it
    if cfg.device.startswith("cuda"):
        cfg.hardware = f"1 {torch.cuda.get_device_name()} (bf16 autocast, float32 adapter)"
    params = [p for p in peft_model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.999), weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))
    counters = {"tokens": 0, "ema": None}
    sums = {k: [0.0, 0] for k in KINDS}
    settings = {k: v for k, v in asdict(cfg).items() if k not in RESUMABLE_WITH_OTHER}
    options = model_options(cfg, tokenizer)
    if cfg.placeholder_style == "single":  # as before the style existed: such runs resume as they did
        settings.pop("placeholder_style")
    else:
        settings["options"] = options
    run = fingerprint(data=[{"tab": p} for p in tab] + [{"wiki": p} for p in wiki],
                      settings={"format": "tokendp.rewriter/1", "objective": objective(cfg), **settings})

    def export(step: int) -> None:
        info = {"base_model": cfg.base_name, "step": step, "total_steps": cfg.steps,
                "train_minutes": round(loop.elapsed / 60, 1), "tokens_seen": counters["tokens"],
                "loss_ema": None if counters["ema"] is None else round(counters["ema"], 4), "objective": objective(cfg),
                "mixture": dict(zip(KINDS, MIXTURE)), "tab_paragraphs": len(tab),
                "hardware": cfg.hardware, "config": asdict(cfg)}

        def write(tmpdir: Path) -> None:
            save_adapter(peft_model, tmpdir)
            (tmpdir / "training.json").write_text(json.dumps(info, indent=2) + "\n")
            (tmpdir / "tokendp.json").write_text(json.dumps(options, indent=2) + "\n")

        _atomic_dir(write, out / "adapter")

    loop = ResumableLoop(model=peft_model, optimizer=opt, scheduler=sched, steps=cfg.steps, checkpoint=out / CHECKPOINT,
                         run=run, checkpoint_every=cfg.checkpoint_every, checkpoint_at_end=True,
                         map_location=cfg.device, on_checkpoint=export,
                         save_extra=lambda: {"tokens": counters["tokens"], "ema": counters["ema"], "config": asdict(cfg)},
                         load_extra=lambda state: counters.update(tokens=state["tokens"], ema=state["ema"]))
    if loop.resume():
        print(f"resumed from {CHECKPOINT} at step {loop.step}", flush=True)
    (out / "config.json").write_text(json.dumps(asdict(cfg), indent=2) + "\n")
    stream = RewriterStream(tokenizer, tab=tab, wiki=wiki, seed=cfg.seed * 1_000_003 + loop.step,
                            max_tokens=cfg.max_tokens, options=options)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    peft_model.train()

    def step(_: int) -> tuple[float, dict[str, float]]:
        batch = stream.batch(cfg.batch)
        # On a CPU, one example per pass with gradients accumulated: no padding (examples differ
        # up to 4x in length, and a padded batch costs its longest row times the batch size). On
        # a GPU, one padded pass: a 135M model is bound by kernel launches, not arithmetic.
        passes = [batch] if cfg.device.startswith("cuda") else [[e] for e in batch]
        opt.zero_grad(set_to_none=True)
        n_answer = sum(len(e.ids) - e.n_prompt for e in batch)
        value, n_tok, per_example = 0.0, 0, []
        for part in passes:
            loss, n, per = batch_loss(lm, part, pad)
            share = sum(len(e.ids) - e.n_prompt for e in part) / n_answer
            (loss * share).backward()
            value += loss.item() * share
            n_tok += n
            per_example += per
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        counters["tokens"] += n_tok
        ema = counters["ema"] = value if counters["ema"] is None else 0.95 * counters["ema"] + 0.05 * value
        for e, v in zip(batch, per_example):
            sums[e.kind][0] += v
            sums[e.kind][1] += 1
        return value, {"ema": ema}

    with ProgressBar("rewriter", file=sys.stdout, mininterval=10, total=cfg.steps) as bar:
        def log(p: Progress) -> None:
            nonlocal sums
            bar(p)
            if p.step % cfg.log_every == 0 or p.step == cfg.steps:
                kinds = {k: round(s / n, 3) for k, (s, n) in sums.items() if n}
                line = {"step": p.step, "loss": round(p.loss, 4), "ema": round(p.metrics["ema"], 4),
                        "lr": sched.get_last_lr()[0], "tokens": counters["tokens"],
                        "minutes": round(p.elapsed / 60, 2), **kinds}
                with open(out / "metrics.jsonl", "a") as f:
                    f.write(json.dumps(line) + "\n")
                sums = {k: [0.0, 0] for k in KINDS}
            if on_progress is not None:
                on_progress(p)

        loop.run(step, log)
    if not (out / "adapter").exists():
        loop.save()
    return out / "adapter"


def _wiki(cfg: Config) -> list[str]:
    if not cfg.wikitext or not Path(cfg.wikitext).is_file():
        return []
    from tokendp.models.training.synthetic import SyntheticDocs
    from tokendp.models.training.wikitext import paragraphs

    names = SyntheticDocs(cfg.seed + 1)
    return [p for p in paragraphs(cfg.wikitext, unk=lambda: names.value("surname")) if len(p) >= 300]


def smoke(out: str, steps: int = 6, placeholder_style: str = "single") -> Path:
    """Train a tiny model from a config for ``steps`` steps (checkpoint every 3), synthetic data
    only, and write it merged into ``out/model`` (a model directory for ``--model``)."""
    model, tok = tiny_model_and_tokenizer()
    cfg = Config(out=out, base="", base_name="tiny-smoke", tab="", wikitext="", steps=steps, batch=2,
                 warmup=2, r=4, alpha=8, max_tokens=64, checkpoint_every=3, log_every=1,
                 placeholder_style=placeholder_style)
    adapter = train(cfg, model=model, tokenizer=tok, tab=[], wiki=[])
    base, tok = tiny_model_and_tokenizer()
    write_merged(adapter, Path(out) / "model", base=base, tokenizer=tok)
    return adapter


def write_merged(adapter: Path, dest: Path, *, base=None, tokenizer=None, cfg: Config | None = None) -> Path:
    """``dest``: the base model with ``adapter`` merged in (peft's ``merge_and_unload``), its
    tokenizer and the adapter's ``tokendp.json``: a directory ``tokendp sanitize --model`` loads."""
    from peft import PeftModel

    if base is None:
        base, tokenizer = load_base(cfg or Config())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()

    def write(tmp: Path) -> None:
        merged.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        shutil.copyfile(adapter / "tokendp.json", tmp / "tokendp.json")

    dest.parent.mkdir(parents=True, exist_ok=True)
    _atomic_dir(write, dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/rewriter", help="run directory (checkpoints, adapter/, log)")
    parser.add_argument("--smoke", action="store_true", help="tiny end-to-end run in a temp dir")
    parser.add_argument("--export", metavar="DEST", default=None,
                        help="copy the run's latest adapter/ (with its tokendp.json) to DEST (e.g. src/tokendp/models/rewriter)")
    parser.add_argument("--merged", metavar="DEST", default=None,
                        help="write the base with the run's adapter merged in, its tokenizer and tokendp.json to "
                             "DEST: a model directory for `tokendp sanitize --model DEST`")
    parser.add_argument("--keep", metavar="DIR", default=None,
                        help="with --smoke: run in DIR and keep it (DIR/model is the merged tiny model)")
    for name, field in Config.__dataclass_fields__.items():
        if name in ("out", "targets", "hardware"):
            continue
        extra = {"choices": ("single", "typed")} if name == "placeholder_style" else {}
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(field.default), default=None, **extra)
    args = parser.parse_args(argv)
    if args.smoke:
        style = args.placeholder_style or "single"
        if args.keep:
            adapter = smoke(args.keep, placeholder_style=style)
            print(f"smoke run wrote {sorted(p.name for p in adapter.iterdir())}; model: {Path(args.keep) / 'model'}")
            return 0
        with tempfile.TemporaryDirectory() as tmp:
            adapter = smoke(tmp, placeholder_style=style)
            print(f"smoke run wrote {sorted(p.name for p in adapter.iterdir())}")
        return 0
    if args.export:
        src, dest = Path(args.out) / "adapter", Path(args.export)
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("adapter_config.json", "adapter_model.safetensors", "training.json", "tokendp.json"):
            shutil.copyfile(src / name, dest / name)
        print(f"exported {src} -> {dest}")
        return 0
    if args.merged:
        saved = json.loads((Path(args.out) / "config.json").read_text())
        cfg = Config(**{k: tuple(v) if k == "targets" else v for k, v in saved.items()})
        print(f"merged -> {write_merged(Path(args.out) / 'adapter', Path(args.merged), cfg=cfg)}")
        return 0
    cfg = Config(out=args.out)
    for name in Config.__dataclass_fields__:
        if getattr(args, name, None) is not None:
            setattr(cfg, name, getattr(args, name))
    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
