"""``evaluate_synthesis``: how close DP synthetic texts come to real ones (MAUVE), per setting.

Every setting writes ``num`` texts from the same private references (in the same disjoint
batches of B) with the same model, prompt pair, T and tau, and is compared with the same
held-out real texts:

* ``invisibleink`` at each epsilon and ``amin`` (Amin et al.) at theirs: :func:`tokendp.synthesize`;
* ``public``: epsilon 0 (the public row's Top-k at tau; no reference is read);
* ``non-private``: each reference's own prompt, sampled at tau from its own top-k: what the
  model writes from one example without any privacy (epsilon infinite);
* ``real``: ``num`` references themselves, the ceiling at this sample size;
* ``off-topic`` (when texts are given, e.g. WikiText-2 paragraphs): real text of another kind,
  the floor that shows the features tell topics apart.

Per setting: MAUVE against the held-out texts (:mod:`tokendp.eval.mauve`: mean and standard
deviation over k-means seeds), the on-topic share, the share of empty texts, the share that
ended by themselves (end of text rather than T) and the mean length in words. Generated texts
are cached in ``out/cache/<run-hash>/`` chunk by chunk, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from tokendp.backends import HFBackend, RowSequence, load_backend
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.eval.mauve import featurize, mauve_score, on_topic_share
from tokendp.generation import generate, make_generator
from tokendp.mechanisms import MechanismStep
from tokendp.jobs.synthesize import synthesize
from tokendp.text.prompt_pair import PromptPair, synthesis_prompts
from tokendp.text.tab import load_tab

CHUNK = 8  # texts generated together and cached together
TAB_DOMAIN = "a paragraph from a judgment of the European Court of Human Rights"


@dataclass(frozen=True)
class SynthEvalConfig:
    """Everything that determines an evaluation run (and its cache)."""

    model: str
    epsilons: tuple[float, ...]
    amin_epsilons: tuple[float, ...]
    num: int = 16
    batch_size: int = 4
    max_tokens: int = 48
    temperature: float = 1.0
    top_k: int = 100
    delta: float = 1e-5
    domain: str | None = None
    seed: int = 0
    buckets: int = 5
    mauve_seeds: int = 5

    def key(self, references: Sequence[str], prompts: PromptPair) -> str:
        """The cache's name: this config, the references and the prompt pair's token ids."""
        pair = [list(prompts.public), list(prompts.private.before), list(prompts.private.after)]
        blob = json.dumps([asdict(self), list(references), pair], sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


@dataclass(frozen=True)
class Setting:
    name: str
    method: str  # invisibleink | amin | public | non-private
    epsilon: float | None  # None: no guarantee (non-private)


def settings(config: SynthEvalConfig) -> list[Setting]:
    """The generated settings: non-private, InvisibleInk (largest epsilon first), Amin et al., public."""
    out = [Setting("non-private", "non-private", None)]
    out += [Setting(f"invisibleink-eps{e:g}", "invisibleink", e) for e in sorted(config.epsilons, reverse=True)]
    out += [Setting(f"amin-eps{e:g}", "amin", e) for e in sorted(config.amin_epsilons, reverse=True)]
    return out + [Setting("public", "public", 0.0)]


# ---------------------------------------------------------------------------- data
def paragraphs(texts: Sequence[str], *, min_chars: int = 200, max_chars: int = 500, seed: int = 0) -> list[str]:
    """The lines of ``texts`` with min_chars..max_chars characters (stripped), in an order
    shuffled by ``seed`` (so that a prefix spans many documents)."""
    out = [p.strip() for t in texts for p in t.split("\n") if min_chars <= len(p.strip()) <= max_chars]
    random.Random(seed).shuffle(out)
    return out


def tab_paragraphs(data_dir: str | Path, split: str, **kwargs: Any) -> list[str]:
    """:func:`paragraphs` of the documents of a TAB split ("tune" or "report")."""
    texts = load_tab(data_dir, split).texts
    return paragraphs([texts[d] for d in sorted(texts)], **kwargs)


# ---------------------------------------------------------------------------- generation
def _own_top_k_step(top_k: int):
    """Non-private sampling: softmax(z / tau) over the top-k of the only row's logits ``# (Na, 1, V)``."""
    def step(logits: torch.Tensor, docs: torch.Tensor, temperature: float) -> MechanismStep:
        z = logits[:, 0].double() / temperature  # (Na, V)
        kth = z.topk(min(top_k, z.shape[-1]), dim=-1).values[:, -1:]  # (Na, 1)
        return MechanismStep(torch.log_softmax(z.masked_fill(z < kth, -math.inf), -1), {})
    return step


def _chunk_texts(setting: Setting, config: SynthEvalConfig, backend: HFBackend, prompts: PromptPair,
                 references: Sequence[str], start: int, count: int) -> list[dict[str, Any]]:
    """Texts start .. start+count-1 of a setting; text j reads references jB .. jB+B-1 only
    (non-private: reference j; public: none)."""
    seed = config.seed * 1_000_003 + start
    common = dict(max_new_tokens=config.max_tokens, temperature=config.temperature, delta=config.delta, model=backend,
                  seed=seed, domain=config.domain, concurrency=count)
    if setting.method in ("invisibleink", "amin"):
        b = config.batch_size
        out = synthesize(references[start * b:(start + count) * b], epsilon=setting.epsilon, references_per_text=b,
                         method=setting.method, top_k=config.top_k if setting.method == "invisibleink" else None,
                         **common)
    elif setting.method == "public":
        out = synthesize(references[start:start + count], epsilon=0.0, references_per_text=1, top_k=config.top_k,
                         **common)
    elif setting.method == "non-private":
        rows = [RowSequence.from_ids([prompts.private.wrap(backend.tokenizer(r, add_special_tokens=False)["input_ids"])])
                for r in references[start:start + count]]
        out = generate(backend, rows, _own_top_k_step(config.top_k), max_new_tokens=config.max_tokens,
                       generator=make_generator(seed, backend.device), temperature=config.temperature,
                       eos_ids=backend.eos_token_ids, stop_strings=backend.options.get("stop", []))
        return [{"text": o.text, "stop_reason": o.stop_reason} for o in out]
    return [{"text": o.text, "stop_reason": o.stop_reason, "epsilon": o.epsilon} for o in out]


def setting_texts(setting: Setting, config: SynthEvalConfig, backend: HFBackend, prompts: PromptPair,
                  references: Sequence[str], cache: Path, progress: Any = None) -> list[dict[str, Any]]:
    """All ``num`` texts of a setting, generated chunk by chunk and appended to ``cache/<name>.jsonl``."""
    path = cache / f"{setting.name}.jsonl"
    done = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.is_file() else []
    while len(done) < config.num:
        count = min(CHUNK, config.num - len(done))
        chunk = _chunk_texts(setting, config, backend, prompts, references, len(done), count)
        with path.open("a", encoding="utf-8") as f:
            f.write("".join(json.dumps(r) + "\n" for r in chunk))
        done += chunk
        if progress is not None:
            progress.update(count)
    return done[:config.num]


# ---------------------------------------------------------------------------- the run
def _check(config: SynthEvalConfig, references: Sequence[str], held_out: Sequence[str]) -> None:
    for name in ("num", "batch_size", "max_tokens", "top_k", "buckets", "mauve_seeds"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")
    if any(not (isinstance(e, (int, float)) and math.isfinite(e) and e > 0)
           for e in (*config.epsilons, *config.amin_epsilons)):
        raise InvalidParameterError("every epsilon must be a finite number > 0 (public, epsilon 0, is always evaluated)")
    need = config.num * config.batch_size
    if len(references) < need:
        raise InvalidInputError(f"{config.num} texts in disjoint batches of {config.batch_size} need {need} references, "
                                f"got {len(references)}; lower num or batch_size")
    if len(held_out) < config.buckets:
        raise InvalidInputError(f"{len(held_out)} held-out texts cannot fill {config.buckets} MAUVE clusters")


def evaluate_synthesis(config: SynthEvalConfig, references: Sequence[str], held_out: Sequence[str],
                       out_dir: str | Path, *, off_topic: Sequence[str] = (), backend: HFBackend | None = None,
                       device: str | None = None, progress: bool = True) -> list[dict[str, Any]]:
    """One result row per setting (module docstring): real, the generated settings, then
    off-topic when ``off_topic`` texts are given. Generated texts are cached in ``out_dir``."""
    _check(config, references, held_out)
    if off_topic and len(off_topic) < config.num:
        raise InvalidInputError(f"{len(off_topic)} off-topic texts cannot fill a row of num = {config.num}")
    backend = backend if backend is not None else load_backend(config.model, device=device)
    prompts = synthesis_prompts(backend.tokenizer, options=backend.options, domain=config.domain)
    cache = Path(out_dir) / "cache" / config.key(references, prompts)
    cache.mkdir(parents=True, exist_ok=True)
    todo = settings(config)
    texts = {"real": [{"text": t, "stop_reason": None} for t in references[:config.num]]}
    with tqdm(total=config.num * len(todo), unit="text", desc="synthesize", disable=not progress) as bar:
        for s in todo:
            texts[s.name] = setting_texts(s, config, backend, prompts, references, cache, bar)
    kinds = [Setting("real", "real", None), *todo]
    if off_topic:
        texts["off-topic"] = [{"text": t, "stop_reason": None} for t in off_topic[:config.num]]
        kinds.append(Setting("off-topic", "off-topic", None))
    feats = {name: featurize(backend.model, backend.tokenizer, [r["text"] for r in recs], max_tokens=config.max_tokens)
             for name, recs in texts.items()}
    held = featurize(backend.model, backend.tokenizer, held_out, max_tokens=config.max_tokens)
    seeds = range(1, config.mauve_seeds + 1)
    rows = []
    for s in kinds:
        recs = texts[s.name]
        mean, std = mauve_score(held, feats[s.name], buckets=config.buckets, seeds=seeds)
        epsilon = recs[0]["epsilon"] if s.method in ("invisibleink", "amin") else s.epsilon  # certified
        rows.append({
            "setting": s.name, "method": s.method, "epsilon": epsilon, "mauve": mean, "mauve_std": std,
            "on_topic": on_topic_share(feats[s.name], held),
            "empty": float(np.mean([not r["text"].strip() for r in recs])),
            "ended": None if s.method in ("real", "off-topic") else  # not generated
            float(np.mean([r["stop_reason"] != "max_new_tokens" for r in recs])),
            "words": float(np.mean([len(r["text"].split()) for r in recs])),
            "texts": len(recs), "held_out": len(held_out), "batch_size": config.batch_size,
            "max_tokens": config.max_tokens, "temperature": config.temperature, "model": config.model,
        })
    return rows
