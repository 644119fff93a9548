"""``evaluate_sanitization``: utility and attack success of every method, side by side.

For each TAB document (truncated span-safely to ``max_chars``) and each method setting:

1. **Perplexity** of the original document under the method's next-token distribution, by
   teacher forcing (:mod:`tokendp.eval.scoring`): one forward pass over the method's rows
   followed by the true document, then the mechanism's step vectorised over positions
   (``(n, R, V) -> (n, V)``); NLLs and token counts are pooled over documents.
2. **Release**: the method's sampled rewrite of the true document (``max_new_tokens`` T, a
   generator seeded per batch of documents, identical for every method, so methods whose
   distributions agree also agree on their samples).
3. **Token-recovery game** for PERSON, CODE and DATETIME (:mod:`tokendp.eval.candidates`):
   the white-box attacker (the same model) scores the release under each of the 5 candidates
   as the prompt's document with LOSS and Min-K%; success when candidate 0 scores best.
4. The certified **epsilon** (:class:`tokendp.eval.methods.BoundMethod`), the largest over the
   documents (for DP-Fusion it depends on a document's number of groups).

Each (document, setting) result is cached as JSON in ``out/cache/<run-hash>/`` as soon as it is
done (numbers only, no text), so a killed run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import time
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from tokendp.backends import HFBackend, RowSequence
from tokendp.errors import InvalidInputError
from tokendp.eval.candidates import ATTACK_LABELS, attack_candidates, truncate_document
from tokendp.eval.methods import BoundMethod, DocumentRows, Setting, document_rows, make_settings
from tokendp.eval.metrics import attack_success, loss_score, min_k_score, pooled_perplexity, target_logprobs
from tokendp.eval.scoring import continuation_logits
from tokendp.eval.tab import load_tab
from tokendp.generation import generate, make_generator
from tokendp.text.contexts import placeholder_id, prompt_template

DEFAULT_MAX_CHARS = 1200
DEFAULT_MAX_NEW_TOKENS = 400
DEFAULT_DELTA = 1e-5


@dataclass(frozen=True)
class EvalConfig:
    """Everything that determines an evaluation run (and its cache)."""

    data_dir: str
    candidates: str
    model: str
    methods: tuple[str, ...]
    epsilons: tuple[float, ...] = (10.0, 50.0)
    paper_settings: bool = False
    split: str = "report"
    limit: int | None = None
    max_chars: int = DEFAULT_MAX_CHARS
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    delta: float = DEFAULT_DELTA
    min_k: float = 0.2
    n_candidates: int = 5
    seed: int = 0
    batch_docs: int = 10

    def run_hash(self) -> str:
        """Hash of what changes results (not the method list or limit: those only select)."""
        keys = ("data_dir", "candidates", "model", "split", "max_chars", "max_new_tokens", "delta", "min_k",
                "n_candidates", "seed", "batch_docs")
        blob = json.dumps({k: getattr(self, k) for k in keys}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


@dataclass
class EvalDocument:
    """One document: its id, rows of every view, and the attack candidates' prompts per label."""

    doc_id: str
    rows: DocumentRows
    candidates: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)  # label -> prompts


def _seed(*parts: object) -> int:
    return zlib.crc32(":".join(map(str, parts)).encode())


def prepare_documents(config: EvalConfig, backend: HFBackend) -> list[EvalDocument]:
    """Load, truncate and tokenise the split's documents and build their attack candidates."""
    tab = load_tab(config.data_dir, config.split)
    pool = json.loads(Path(config.candidates).read_text(encoding="utf-8"))
    ids = list(tab.texts)[: config.limit] if config.limit else list(tab.texts)
    tok, opts = backend.tokenizer, backend.options
    template = prompt_template(tok, options=opts)
    placeholder = placeholder_id(tok, options=opts)
    docs = []
    for doc_id in ids:
        text, spans = truncate_document(tab.texts[doc_id], tab.gold[doc_id], max_chars=config.max_chars)
        doc = EvalDocument(doc_id, document_rows(text, spans, tok, template=template, placeholder=placeholder))
        for label in ATTACK_LABELS:
            if any(s.label == label for s in spans):
                gen = torch.Generator().manual_seed(_seed(config.seed, doc_id, label))
                cands = attack_candidates(text, spans, label, pool[label], n_candidates=config.n_candidates,
                                          generator=gen)
                doc.candidates[label] = [template.wrap(tok(c, add_special_tokens=False)["input_ids"]) for c in cands]
        docs.append(doc)
    return docs


def _perplexity_parts(backend: HFBackend, bound: BoundMethod, i: int) -> tuple[float, int]:
    """(total NLL, tokens) of document i's original text under the bound method, by teacher forcing."""
    doc = bound.docs[i]
    logits = continuation_logits(backend, bound.rows(doc), doc.target)  # (R, n, V)
    n = logits.shape[1]
    step = bound.step(logits.transpose(0, 1), torch.full((n,), i, dtype=torch.long))  # logprobs (n, V)
    target = torch.tensor(doc.target, device=step.logprobs.device)
    return float(-target_logprobs(step.logprobs, target).double().sum()), n


def _attack(backend: HFBackend, doc: EvalDocument, released: Sequence[int], k: float) -> dict[str, dict[str, float]]:
    """Success of LOSS and Min-K% per attacked label on the released token ids."""
    if not doc.candidates:
        return {}
    if not released:  # nothing released: every candidate ties, chance level
        return {lab: {"loss": 1 / len(c), "mink": 1 / len(c)} for lab, c in doc.candidates.items()}
    truth = next(iter(doc.candidates.values()))[0]
    prompts = [truth] + [p for c in doc.candidates.values() for p in c[1:]]
    logits = continuation_logits(backend, prompts, released)  # (P, n, V)
    lp = target_logprobs(torch.log_softmax(logits, -1), torch.tensor(released, device=logits.device)
                         .expand(len(prompts), -1))  # (P, n)
    loss, mink = loss_score(lp).cpu(), min_k_score(lp, k=k).cpu()  # (P,)
    out, start = {}, 1
    for label, cands in doc.candidates.items():
        idx = torch.tensor([0, *range(start, start + len(cands) - 1)])
        start += len(cands) - 1
        out[label] = {"loss": attack_success(loss[idx]), "mink": attack_success(mink[idx])}
    return out


def _eos_ids(backend: HFBackend) -> list[int]:
    ids = {backend.tokenizer.eos_token_id}
    for stop in backend.options.get("stop", []):
        found = backend.tokenizer.convert_tokens_to_ids(stop)
        if isinstance(found, int) and found != backend.tokenizer.unk_token_id:
            ids.add(found)
    return sorted(i for i in ids if i is not None)


class _Cache:
    """Per-(setting, document) JSON records under ``out/cache/<run-hash>/<setting>/``."""

    def __init__(self, out: Path, config: EvalConfig) -> None:
        self.root = out / "cache" / config.run_hash()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "config.json").write_text(json.dumps(asdict(config), indent=2))

    def path(self, setting: Setting, doc_id: str) -> Path:
        return self.root / setting.key / f"{doc_id}.json"

    def get(self, setting: Setting, doc_id: str) -> dict | None:
        p = self.path(setting, doc_id)
        return json.loads(p.read_text()) if p.is_file() else None

    def put(self, setting: Setting, doc_id: str, record: dict) -> None:
        p = self.path(setting, doc_id)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(p)


def evaluate_sanitization(config: EvalConfig, out_dir: str | Path, *, backend: HFBackend | None = None,
                          progress: bool = True) -> list[dict[str, Any]]:
    """Run the evaluation (resuming from ``out_dir``'s cache); one result row per setting."""
    started = time.perf_counter()
    backend = backend or HFBackend.load(config.model)
    docs = prepare_documents(config, backend)
    if not docs:
        raise InvalidInputError("no documents to evaluate: check --data, --split and --limit")
    settings = make_settings(config.methods, epsilons=config.epsilons, paper=config.paper_settings,
                             vocab_size=backend.vocab_size, max_new_tokens=config.max_new_tokens, delta=config.delta)
    cache = _Cache(Path(out_dir), config)
    bar = tqdm(total=len(settings) * len(docs), desc="eval sanitize", unit="doc", disable=not progress)
    records = {}
    for setting in settings:
        bar.set_postfix_str(f"{setting.method} {setting.name}")
        records[setting] = _run_setting(config, backend, docs, setting, cache, bar)
    bar.close()
    rows = [summarise(s, records[s], config) for s in settings]
    for r in rows:
        r["seconds_total"] = round(time.perf_counter() - started, 1)
    return rows


def _run_setting(config: EvalConfig, backend: HFBackend, docs: list[EvalDocument], setting: Setting,
                 cache: _Cache, bar: tqdm) -> list[dict]:
    results: dict[str, dict] = {}
    for c in range(0, len(docs), config.batch_docs):
        chunk = docs[c:c + config.batch_docs]
        pending = {d.doc_id for d in chunk if cache.get(setting, d.doc_id) is None}
        for d in chunk:
            if d.doc_id not in pending:
                results[d.doc_id] = cache.get(setting, d.doc_id)
                bar.update(1)
        if not pending:
            continue
        bound = BoundMethod(setting, [d.rows for d in chunk], vocab_size=backend.vocab_size,
                            max_new_tokens=config.max_new_tokens, delta=config.delta)
        sequences = [RowSequence.from_ids(bound.rows(d.rows)) for d in chunk]
        released = generate(backend, sequences, bound.step, max_new_tokens=config.max_new_tokens,
                            generator=make_generator(_seed(config.seed, "release", c)), eos_ids=_eos_ids(backend),
                            stop_strings=backend.options.get("stop", []))
        for i, d in enumerate(chunk):
            if d.doc_id not in pending:
                continue
            nll, n = _perplexity_parts(backend, bound, i)
            record = {"doc": d.doc_id, "nll": nll, "tokens": n, "epsilon": bound.epsilon(d.rows),
                      "groups": len(d.rows.groups), "released_tokens": len(released[i].token_ids),
                      "attacks": _attack(backend, d, released[i].token_ids, config.min_k)}
            cache.put(setting, d.doc_id, record)
            results[d.doc_id] = record
            bar.update(1)
    return [results[d.doc_id] for d in docs]


def summarise(setting: Setting, records: list[dict], config: EvalConfig) -> dict[str, Any]:
    """One result row: pooled perplexity, attack success pooled and per label, epsilon."""
    eps = [r["epsilon"] for r in records]
    row: dict[str, Any] = {
        "method": setting.method, "setting": setting.name,
        "epsilon": None if any(e is None for e in eps) else max(eps),
        "target_epsilon": setting.target,
        "ppl": pooled_perplexity((r["nll"], r["tokens"]) for r in records),
    }
    for attack in ("loss", "mink"):
        games = [(lab, g[attack]) for r in records for lab, g in r["attacks"].items()]
        row[f"asr_{attack}"] = sum(s for _, s in games) / len(games) if games else None
        for label in ATTACK_LABELS:
            per = [s for lab, s in games if lab == label]
            row[f"asr_{attack}_{label}"] = sum(per) / len(per) if per else None
    row.update({"games": sum(len(r["attacks"]) for r in records), "docs": len(records),
                "mean_released_tokens": sum(r["released_tokens"] for r in records) / len(records),
                "params": {k: v for k, v in asdict(setting).items() if k not in ("method", "name") and v is not None},
                "max_new_tokens": config.max_new_tokens, "delta": config.delta})
    return row
