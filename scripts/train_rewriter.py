"""Train (or resume) the LoRA rewriter adapter of SmolLM2-135M-Instruct (CPU or one GPU).

  python scripts/train_rewriter.py --out runs/rewriter              # train / resume from the latest checkpoint
  python scripts/train_rewriter.py --out runs/rewriter --device cuda  # bf16 autocast, float32 adapter
  python scripts/train_rewriter.py --out runs/rewriter --export src/tokendp/models/rewriter
  python scripts/train_rewriter.py --out runs/rewriter --merged runs/rewriter/model  # a model directory for --model
  python scripts/train_rewriter.py --smoke                          # ~1 minute on a tiny model built from a config
  python scripts/train_rewriter.py --smoke --placeholder-style typed --keep runs/smoke  # typed slots, kept
  python scripts/train_rewriter.py --check-endings src/tokendp/models/rewriter --tab ""  # an adapter's endings

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

Endings: before the last save the run checks, on ``--end-check`` held-out examples (the last
2 TAB documents and 16 WikiText paragraphs, kept out of training, and synthetic documents of a
seed training never uses), that the end of turn (``<|im_end|>`` for SmolLM2) is the likeliest
token after the answer's last token, and records the share in ``training.json`` (``"endings"``;
docs/sanitize.md, "Endings"). ``--check-endings ADAPTER`` runs the same check on any adapter.
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
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from tokendp.models.training.rewriter import (KINDS, MIXTURE, MULTI, TRAILING, Paragraph, RewriteExample,
                                              RewriterStream, end_of_turn, paragraphs_of, tab_documents, tab_passages,
                                              tiny_model_and_tokenizer)
from tokendp.training import Progress, ProgressBar, ResumableLoop, fingerprint

LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
CHECKPOINT = "checkpoint.pt"
# Settings that change neither the data nor the objective: a run may resume with others.
RESUMABLE_WITH_OTHER = ("out", "steps", "threads", "device", "checkpoint_every", "log_every", "hardware",
                        "tab", "wikitext", "end_check",  # the paragraphs themselves are in the fingerprint
                        "init_adapter")  # its weights' sha256 is in the fingerprint, not its path
HELD_OUT_DOCS, HELD_OUT_WIKI = 2, 16  # the last TAB documents and WikiText paragraphs, kept out of training
ENDINGS_TARGET = 0.9  # below this share of held-out answers ending on the end of turn, the run warns
LAYOUT = ("; some examples of 2-4 paragraphs joined by a blank line (letters and e-mails end on their "
          "closing), a few sources and targets with a trailing newline; the answer ends with the chat "
          "template's end of turn")

OBJECTIVE = ("chat template + default paraphrase instruction; source = paragraph with every token "
             "overlapping a hidden span as one '_' placeholder; target = the paragraph with fresh "
             "typed fillers (all spans hidden), some shown and copied (partial), or none (copy); "
             "loss on the assistant answer and <|im_end|>" + LAYOUT)
TYPED_OBJECTIVE = ("chat template + default paraphrase instruction; source = paragraph with every token "
                   "overlapping a hidden span as ONE marker token of the span's label (typed slots); "
                   "target = the paragraph with coherent fresh fillers (one locale, dates by role, "
                   "titles agreeing with pronouns, distinct entities apart; all spans hidden), some "
                   "shown and copied (partial), or none (copy); loss on the assistant answer and EOS" + LAYOUT)
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
    end_check: int = 32  # held-out examples of the endings check before the last save (0: none)
    init_adapter: str = ""  # an adapter directory (PEFT's layout, same r, alpha, targets) to start from


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


def init_from_adapter(peft_model, adapter: Path, cfg: Config) -> str:
    """Load the LoRA tensors of ``adapter`` (PEFT's layout, e.g. the shipped rewriter) into
    ``peft_model`` as the starting point of a run; returns the sha256 of its weights file (part of
    the run's fingerprint). Its rank, alpha and target modules must be those of ``cfg``."""
    import hashlib

    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    config = json.loads((adapter / "adapter_config.json").read_text())
    theirs = (config["r"], float(config["lora_alpha"]), sorted(config["target_modules"]))
    ours = (cfg.r, float(cfg.alpha), sorted(cfg.targets))
    if theirs != ours:
        raise SystemExit(f"--init-adapter {adapter} has r={theirs[0]}, alpha={theirs[1]:g}, targets {theirs[2]}; "
                         f"this run has r={ours[0]}, alpha={ours[1]:g}, targets {ours[2]}: pass --r and --alpha to match")
    weights = adapter / "adapter_model.safetensors"
    tensors = {k: v.to(torch.float32) for k, v in load_file(str(weights)).items()}
    result = set_peft_model_state_dict(peft_model, tensors)
    missing = [k for k in result.missing_keys if "lora_" in k]
    if result.unexpected_keys or missing or not tensors:
        raise SystemExit(f"--init-adapter {adapter} does not fit the model: {len(missing)} LoRA tensors missing, "
                         f"{len(result.unexpected_keys)} unexpected")
    return hashlib.sha256(weights.read_bytes()).hexdigest()


def save_adapter(peft_model, dest: Path) -> None:
    """PEFT's layout (``PeftModel.save_pretrained``), the tensors stored in float16 as shipped."""
    from safetensors.torch import load_file, save_file

    peft_model.save_pretrained(dest, save_embedding_layers=False)  # LoRA layers only; no hub look-up
    weights = dest / "adapter_model.safetensors"
    tensors = {k: v.to(torch.float16).contiguous() for k, v in load_file(str(weights)).items()}
    save_file(tensors, str(weights), metadata={"format": "pt"})


def held_out(items: list, k: int) -> tuple[list, list]:
    """(training part, held-out part): the last ``k`` items are held out, none when there are
    fewer than ``4 * k``."""
    return (items, []) if len(items) < 4 * k else (items[:-k], items[-k:])


def held_out_examples(tokenizer, cfg: Config, options: dict, *, tab: list[list[Paragraph]],
                      wiki: list[str]) -> list[RewriteExample]:
    """``cfg.end_check`` whole examples (their answer not cut, so ending on the end of turn) from
    the held-out TAB documents ``tab`` and WikiText paragraphs ``wiki``, and synthetic documents of
    the seed of "step -1", which the training stream (seeded by step) never uses."""
    stream = RewriterStream(tokenizer, tab=paragraphs_of(tab, min_chars=cfg.min_chars, max_chars=cfg.max_chars),
                            passages=tab_passages(tab, min_chars=cfg.min_chars, max_chars=cfg.max_chars), wiki=wiki,
                            seed=cfg.seed * 1_000_003 - 1, max_tokens=cfg.max_tokens, options=options)
    examples: list[RewriteExample] = []
    for _ in range(20 * cfg.end_check):
        if len(examples) == cfg.end_check:
            break
        e = stream.batch(1)[0]
        if e.ids[-1] == stream.end:
            examples.append(e)
    return examples


def likeliest_after_answer(model, examples: list[RewriteExample]) -> list[int]:
    """Each example's likeliest next token after its answer's last token (the end of turn removed)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    with torch.no_grad():
        out = [int(model(input_ids=torch.tensor([e.ids[:-1]], device=device)).logits[0, -1].argmax())
               for e in examples]
    model.train(was_training)
    return out


def ending_share(model, tokenizer, examples: list[RewriteExample]) -> float:
    """The share of ``examples`` (whole ones: :func:`held_out_examples`) whose likeliest token after
    the answer's last token is the chat template's end of turn (:func:`end_of_turn`)."""
    end = end_of_turn(tokenizer)
    return sum(t == end for t in likeliest_after_answer(model, examples)) / len(examples)


def endings(model, tokenizer, examples: list[RewriteExample]) -> dict:
    """The endings check for ``training.json``; prints it, with a warning below :data:`ENDINGS_TARGET`."""
    share = ending_share(model, tokenizer, examples)
    end = tokenizer.convert_ids_to_tokens(end_of_turn(tokenizer))
    print(f"endings: {share:.2f} of {len(examples)} held-out answers have {end} as their likeliest next token",
          flush=True)
    if share < ENDINGS_TARGET:
        print(f"warning: under {ENDINGS_TARGET}: rewrites may not end on {end} (docs/sanitize.md, Endings)", flush=True)
    return {"share": round(share, 4), "examples": len(examples), "end_of_turn": end,
            "kinds": dict(sorted(Counter(e.kind for e in examples).items()))}


def _record(paragraph: Paragraph) -> list:
    """A TAB paragraph as a JSON value for the run fingerprint (its spans as dicts)."""
    text, spans = paragraph
    return [text, [s.to_dict() for s in spans]]


def _tab_documents(cfg: Config) -> list[list[Paragraph]]:
    return tab_documents(cfg.tab, split="tune") if cfg.tab and Path(cfg.tab).is_dir() else []


def train(cfg: Config, *, model=None, tokenizer=None, tab=None, wiki=None,
          on_progress=None) -> Path:
    """Train or resume into ``cfg.out``; returns the adapter directory. ``tab``: TAB documents
    (:func:`tab_documents`), ``wiki``: WikiText paragraphs, their last ones held out
    (:func:`held_out`). ``on_progress`` gets each step's :class:`tokendp.training.Progress`
    (after the progress bar)."""
    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if model is None:
        model, tokenizer = load_base(cfg)
    tab, held_tab = held_out(_tab_documents(cfg) if tab is None else tab, HELD_OUT_DOCS)
    wiki, held_wiki = held_out(_wiki(cfg) if wiki is None else wiki, HELD_OUT_WIKI)
    paragraphs = paragraphs_of(tab, min_chars=cfg.min_chars, max_chars=cfg.max_chars)
    passages = tab_passages(tab, min_chars=cfg.min_chars, max_chars=cfg.max_chars)
    peft_model = add_lora(model, cfg)
    init_sha = init_from_adapter(peft_model, Path(cfg.init_adapter), cfg) if cfg.init_adapter else ""
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
    if init_sha:  # runs from scratch keep their fingerprint
        settings["init_adapter_sha256"] = init_sha
    run = fingerprint(data=[{"tab": _record(p)} for p in paragraphs] + [{"passage": _record(p)} for p in passages]
                      + [{"wiki": p} for p in wiki],
                      settings={"format": "tokendp.rewriter/1", "objective": objective(cfg), **settings})
    held = held_out_examples(tokenizer, cfg, options, tab=held_tab, wiki=held_wiki) if cfg.end_check else []

    def export(step: int) -> None:
        info = {"base_model": cfg.base_name, "step": step, "total_steps": cfg.steps,
                "train_minutes": round(loop.elapsed / 60, 1), "tokens_seen": counters["tokens"],
                "loss_ema": None if counters["ema"] is None else round(counters["ema"], 4), "objective": objective(cfg),
                "mixture": dict(zip(KINDS, MIXTURE)), "multi_paragraph": MULTI, "trailing_newline": TRAILING,
                "tab_paragraphs": len(paragraphs), "tab_passages": len(passages),
                "hardware": cfg.hardware, "config": asdict(cfg)}
        if step == cfg.steps and held:
            info["endings"] = endings(lm, tokenizer, held)

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
    stream = RewriterStream(tokenizer, tab=paragraphs, passages=passages, wiki=wiki,
                            seed=cfg.seed * 1_000_003 + loop.step, max_tokens=cfg.max_tokens, options=options)
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
                 placeholder_style=placeholder_style, end_check=4)
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


def check_endings(adapter: Path, cfg: Config, *, base=None, tokenizer=None) -> float:
    """:func:`ending_share` of ``base`` (default: ``cfg``'s) with ``adapter`` (PEFT's layout, with
    its ``tokendp.json``) on ``cfg.end_check`` held-out examples (:func:`held_out_examples`);
    prints :func:`endings`."""
    from peft import PeftModel

    torch.set_num_threads(cfg.threads)
    if base is None:
        base, tokenizer = load_base(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model = PeftModel.from_pretrained(base, str(adapter)).to(cfg.device)
    options_file = adapter / "tokendp.json"
    options = json.loads(options_file.read_text()) if options_file.is_file() else {}
    examples = held_out_examples(tokenizer, cfg, options, tab=held_out(_tab_documents(cfg), HELD_OUT_DOCS)[1],
                                 wiki=held_out(_wiki(cfg), HELD_OUT_WIKI)[1])
    return endings(model, tokenizer, examples)["share"]


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
    parser.add_argument("--check-endings", metavar="ADAPTER", default=None,
                        help="print the share of --end-check held-out examples whose likeliest token after the "
                             "answer is the end of turn, for the adapter in ADAPTER (e.g. src/tokendp/models/rewriter)")
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
    if args.check_endings:
        check_endings(Path(args.check_endings), cfg)
        return 0
    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
