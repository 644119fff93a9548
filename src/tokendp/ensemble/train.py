"""Train PMixED's ensemble: split a private corpus into N disjoint shards, one LoRA adapter each.

``tokendp ensemble train --data CORPUS.jsonl --shards N --out DIR`` (and :func:`train_ensemble`).

Shards. The records (one JSON object per line with a text field) are split into N disjoint
shards by a keyed hash of each unit under ``seed`` (public): a unit's shard depends on the unit
alone, so removing one unit moves nothing else. With ``group_by`` the unit is a group: all
records with the same value of that field go to the same shard (e.g. every record of one user).
Fewer units than shards is an error; shard sizes vary binomially.

Adapters. Each shard fine-tunes its own LoRA adapter on the base model (PMixED's setting: rank
4, LoRA alpha 32, AdamW with learning rate 2e-4 and weight decay 0.01) with the causal LM loss
on its texts, for ``steps`` mini-batches drawn from that shard only. An adapter never sees
another shard's data, which is what PMixED's per-shard guarantee needs (docs/privacy.md,
"PMixED"); a shard without trainable tokens keeps its fresh adapter (B = 0: the base model).

Resumable. Each shard runs the shared :class:`~tokendp.training.loop.ResumableLoop`: the
adapter, optimiser and sampler state are checkpointed every ``checkpoint_every`` steps under the
shard's fingerprint (a content hash of its texts and the settings), and a rerun continues from
there; a shard whose adapter directory is complete is skipped. The ensemble directory is claimed
by the fingerprint of the whole corpus and the settings (``.run.json``): a rerun with other data,
even a corpus of the same size, or other settings is refused. The manifest (``manifest.json``)
holds counts and parameters only, never text. (A fingerprint is not DP; it sits beside adapters
that are not DP either: PMixED's guarantee is on the predictions, and the ensemble directory is
as private as the corpus.)
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokendp.ensemble.manifest import (MANIFEST_FILE, Manifest, ShardInfo, adapter_complete, read_manifest,
                                       shard_name)
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.documents import is_jsonl, jsonl_records, text_lines
from tokendp.training import Progress, ResumableLoop, check_run, fingerprint

CHECKPOINT = "checkpoint.pt"


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of every shard's adapter (the PMixED paper's defaults)."""

    steps: int = 100
    lora_r: int = 4
    lora_alpha: float = 32.0
    lr: float = 2e-4
    weight_decay: float = 0.01
    batch_size: int = 8
    max_length: int = 256
    checkpoint_every: int = 50

    def check(self) -> TrainConfig:
        for name in ("steps", "lora_r", "batch_size", "max_length", "checkpoint_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("lora_alpha", "lr"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise InvalidParameterError(f"{name} must be a finite number > 0, got {value!r}")
        if not (isinstance(self.weight_decay, (int, float)) and math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise InvalidParameterError(f"weight_decay must be a finite number >= 0, got {self.weight_decay!r}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "lora_r": self.lora_r, "lora_alpha": self.lora_alpha, "lr": self.lr,
                "weight_decay": self.weight_decay, "optimizer": "AdamW", "batch_size": self.batch_size,
                "max_length": self.max_length, "target_modules": "all-linear", "lora_dropout": 0.0}


# ---------------------------------------------------------------------------- corpus and shards
def read_corpus(path: str | Path, *, text_field: str = "text", group_by: str | None = None
                ) -> tuple[list[str], list[str] | None]:
    """Texts and, with ``group_by``, each record's group key (its value as JSON). A JSONL file
    (``.jsonl``, ``.ndjson``) holds one object per line; any other file is UTF-8 text with one
    record per non-blank line (e.g. WikiText's paragraphs), which has no fields to group by.
    Messages carry line numbers and field names only."""
    if not is_jsonl(path):
        if group_by:
            raise InvalidInputError(f"--group-by {group_by} needs a JSONL corpus (records with fields); "
                                    f"{path} is read as plain text, one record per line")
        return text_lines(path), None
    texts: list[str] = []
    groups: list[str] | None = [] if group_by else None
    for where, record in jsonl_records(path):
        if not isinstance(record.get(text_field), str):
            raise InvalidInputError(f"{where} has no string field {text_field!r}")
        texts.append(record[text_field])
        if groups is not None:
            if record.get(group_by) is None:
                raise InvalidInputError(f"{where} has no field {group_by!r} to group by")
            groups.append(json.dumps(record[group_by], sort_keys=True))
    return texts, groups


def shard_of(key: str, shards: int, *, seed: int) -> int:
    """The shard of a unit: a keyed hash (BLAKE2b, key = the public seed) of the unit's own key,
    mod ``shards``. It depends on nothing else in the corpus, so adding or removing one unit
    moves no other unit between shards (docs/privacy.md, "PMixED")."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8, key=str(seed).encode("ascii")).digest()
    return int.from_bytes(digest, "big") % shards


def split_shards(texts: Sequence[str], shards: int, *, seed: int, groups: Sequence[str] | None = None) -> list[list[int]]:
    """Record indices of each of ``shards`` disjoint shards. A unit (a group with ``groups``,
    else a record, keyed by its text) goes to :func:`shard_of` its key: a shard's content never
    depends on the other units, which is what a guarantee per shard, or per group, needs. Shards
    differ in size (binomially); an empty shard trains nothing and is the base model."""
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise InvalidParameterError(f"shards must be an integer >= 1, got {shards!r}")
    if groups is not None and len(groups) != len(texts):
        raise InvalidInputError("one group key per record is needed")
    keys = list(texts) if groups is None else list(groups)
    units = len(set(keys))
    if units < shards:
        what = "distinct records" if groups is None else "groups"
        raise InvalidInputError(f"the corpus has {units} {what}, fewer than the {shards} shards asked for")
    out: list[list[int]] = [[] for _ in range(shards)]
    for i, key in enumerate(keys):
        out[shard_of(key, shards, seed=seed)].append(i)
    return out


# ---------------------------------------------------------------------------- training
def _lora_config(config: TrainConfig) -> Any:
    from peft import LoraConfig

    return LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=0.0,
                      target_modules="all-linear", task_type="CAUSAL_LM")


def _tokenize(tokenizer: Any, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """Token ids per text, cut to ``max_length``; texts of fewer than 2 tokens carry no LM loss and are dropped."""
    ids = [list(tokenizer(t, truncation=True, max_length=max_length)["input_ids"]) for t in texts]
    return [i for i in ids if len(i) >= 2]


def _batch(seqs: Sequence[Sequence[int]], pad_id: int) -> dict[str, Any]:
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, :len(s)] = 1
    labels = ids.masked_fill(mask == 0, -100)  # (B, L): no loss on padding
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def train_adapter(backend: Any, seqs: Sequence[Sequence[int]], out: Path, *, config: TrainConfig, seed: int,
                  run: str, on_step: Callable[[int], None] | None = None,
                  on_progress: Callable[[Progress], None] | None = None, label: str = "") -> None:
    """Train one fresh LoRA adapter on ``seqs`` (token ids of one shard) on ``backend``'s base
    model and save it to ``out`` in PEFT's layout; resumes from the checkpoint of the run ``run``
    (the shard's fingerprint) in ``out``'s sibling work directory. The base model is handed back
    without the adapter (peft ``unload``), so the next shard starts from the base model again and
    never from this shard's weights. ``on_step(n)`` counts steps (those restored from a
    checkpoint at once); ``on_progress`` gets each step's :class:`~tokendp.training.Progress`."""
    import torch
    from peft import get_peft_model

    pad = backend._pad_id()
    with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):  # the caller's global RNG is left alone
        warnings.simplefilter("ignore", FutureWarning)  # peft calls transformers' deprecated is_gradient_checkpointing
        torch.manual_seed(seed)  # LoRA's A initialisation (training only; no privacy noise is drawn here)
        model = get_peft_model(backend.model, _lora_config(config))
    work = out.with_name(f".{out.name}.partial")
    work.mkdir(parents=True, exist_ok=True)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    sampler = torch.Generator().manual_seed(seed)
    loop = ResumableLoop(model=model, optimizer=optimizer, steps=config.steps if seqs else 0, checkpoint=work / CHECKPOINT,
                         run=run, checkpoint_every=config.checkpoint_every, map_location=backend.device, label=label,
                         save_extra=lambda: {"sampler": sampler.get_state()},
                         load_extra=lambda state: sampler.set_state(state["sampler"]))
    if loop.resume() and on_step is not None:
        on_step(loop.step)

    def step(_: int) -> float:
        pick = torch.randint(len(seqs), (min(config.batch_size, len(seqs)),), generator=sampler).tolist()
        batch = {k: v.to(backend.device) for k, v in _batch([seqs[i] for i in pick], pad).items()}
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    def progress(p: Progress) -> None:
        if on_step is not None:
            on_step(1)
        if on_progress is not None:
            on_progress(p)

    model.train()
    loop.run(step, progress)
    if not seqs:  # nothing to learn: the fresh adapter (B = 0) is the base model
        if on_step is not None:
            on_step(config.steps)
        if on_progress is not None:
            on_progress(Progress(config.steps, config.steps, float("nan"), 0.0, {}, label))
    model.eval()
    final = work / "adapter"
    model.save_pretrained(final)
    backend.model = model.unload()  # the base model, every LoRA layer removed
    if out.exists():
        shutil.rmtree(out)
    final.replace(out)  # the adapter directory appears complete or not at all
    shutil.rmtree(work, ignore_errors=True)


def train_ensemble(data: str | Path, *, shards: int, out: str | Path, base: str | Path, seed: int = 0,
                   group_by: str | None = None, text_field: str = "text", config: TrainConfig | None = None,
                   device: str | None = None, dtype: str | None = None, on_step: Callable[[int], None] | None = None,
                   on_shard: Callable[[int, bool], None] | None = None,
                   on_progress: Callable[[Progress], None] | None = None) -> Manifest:
    """Split ``data`` into ``shards`` disjoint shards, train one adapter per shard into ``out``
    (skipping finished ones), and write the manifest (see the module docstring).

    ``base`` is a registered model name (``smollm2``, ``tiny``), a directory or a cached hub id;
    the manifest records it as given. ``device`` defaults to CUDA when available; ``dtype`` is the
    frozen base model's (default float32 on the CPU, bfloat16 on a GPU); the LoRA weights and
    their optimiser state stay float32 either way (peft keeps adapters in float32).

    ``on_step(n)`` is called with the number of optimiser steps just done (of ``shards *
    config.steps`` in all); ``on_shard(index, skipped)`` as each shard starts; ``on_progress``
    with a :class:`~tokendp.training.Progress` over the whole ensemble after every step (its
    label names the shard), e.g. a :class:`~tokendp.training.ProgressBar`.
    """
    from tokendp._optional import require

    require("peft", "ensemble", "tokendp ensemble train", why="to train LoRA adapters")
    config = (config or TrainConfig()).check()
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidParameterError(f"seed must be an integer, got {seed!r}")
    texts, groups = read_corpus(data, text_field=text_field, group_by=group_by)
    if not texts:
        raise InvalidInputError(f"{data}: the corpus holds no records")
    parts = split_shards(texts, shards, seed=seed, groups=groups)
    from tokendp.backends import load_model

    backend = load_model(base, device=device, dtype=dtype)
    tokenized = [_tokenize(backend.tokenizer, [texts[i] for i in part], config.max_length) for part in parts]
    infos = tuple(ShardInfo(shard_name(j), len(part), sum(len(s) for s in tokenized[j]))
                  for j, part in enumerate(parts))
    manifest = Manifest(str(base), infos, seed, text_field, group_by, config.to_dict())
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    if (root / MANIFEST_FILE).is_file():
        old = read_manifest(root)
        if old.to_dict() != manifest.to_dict():
            raise InvalidInputError(f"{root} holds an ensemble trained with other data or settings; "
                                    "use a new --out directory (or the same settings to resume)")
    settings = {"format": "tokendp.ensemble.train/1", **{k: v for k, v in manifest.to_dict().items() if k != "shards"},
                "shards": shards}
    check_run(root, fingerprint(data=texts if groups is None else zip(texts, groups), settings=settings))
    manifest.write(root)
    total = shards * config.steps
    for j, info in enumerate(infos):
        target = root / info.name
        finished = adapter_complete(target)
        if on_shard is not None:
            on_shard(j, finished)
        label = f"shard {j + 1}/{shards}"
        if finished:
            if on_step is not None:
                on_step(config.steps)
            if on_progress is not None:
                on_progress(Progress((j + 1) * config.steps, total, float("nan"), 0.0, {}, f"{label} (done)"))
            continue
        shard_progress = None
        if on_progress is not None:
            def shard_progress(p: Progress, offset: int = j * config.steps) -> None:
                on_progress(Progress(offset + p.step, total, p.loss, p.elapsed, p.metrics, p.label))
        run = fingerprint(data=tokenized[j], settings={**settings, "shard": j, "shard_seed": seed * 1_000_003 + j})
        train_adapter(backend, tokenized[j], target, config=config, seed=seed * 1_000_003 + j, run=run,
                      on_step=on_step, on_progress=shard_progress, label=label)
    return manifest
