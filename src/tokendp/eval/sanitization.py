"""``evaluate_sanitization``: utility and attack success of every method, side by side.

For each TAB document (truncated span-safely to ``max_chars``, or whole) and each method setting:

1. **Perplexity** of the original document under the method's next-token distribution, by
   teacher forcing (:mod:`tokendp.eval.scoring`): one forward pass over the method's rows
   followed by the true document, then the mechanism's step vectorised over positions
   (``(n, R, V) -> (n, V)``); NLLs and token counts are pooled over documents.
2. **Release**: the method's sampled rewrite of the true document (``max_new_tokens`` T).
   All pending settings of a batch of documents are generated together in one batched
   decoding loop (each setting's mechanism applied to its own sequences), with a generator
   seeded from (seed, batch). With ``max_new_tokens=None`` each document is released alone
   at sanitize's own T for it (:func:`tokendp.params.default_new_tokens`), its settings
   calibrated to that T and its number of groups, seeded from (seed, document): at full length
   this is what a user's ``tokendp sanitize`` certifies, and a document's results do not
   depend on which others are evaluated.
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

from tokendp.backends import HFBackend, RowSequence, load_backend
from tokendp.errors import InvalidInputError
from tokendp.eval.cache import ResultCache
from tokendp.eval.candidates import ATTACK_LABELS, attack_candidates, truncate_document
from tokendp.eval.methods import (FUSION_METHODS, BoundMethod, DocumentRows, Setting, document_rows,
                                  make_settings)
from tokendp.mechanisms import MechanismStep
from tokendp.eval.metrics import attack_success, loss_score, min_k_score, pooled_perplexity, target_logprobs
from tokendp.eval.scoring import continuation_logits
from tokendp.params import default_new_tokens
from tokendp.text.tab import TabSplit, load_tab, spread_by_length
from tokendp.generation import generate, make_generator
from tokendp.text.contexts import placeholders, prompt_template

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
    filter_epsilons: tuple[float, ...] | None = None  # dp-fusion-filter's, when not ``epsilons``
    paper_settings: bool = False
    split: str = "report"
    limit: int | None = None
    ids: tuple[str, ...] | None = None  # these documents of the split, in this order
    spread: bool = False  # ``limit`` documents at evenly spaced ranks of length
    max_chars: int | None = DEFAULT_MAX_CHARS  # None: whole documents
    max_new_tokens: int | None = DEFAULT_MAX_NEW_TOKENS  # None: each document's own T (sanitize's default)
    delta: float = DEFAULT_DELTA
    min_k: float = 0.2
    n_candidates: int = 5
    seed: int = 0
    batch_docs: int = 20
    match_lengths: bool = False  # attack candidates with the true forms' token counts
    device: str | None = None  # None: cuda if available, else cpu
    dtype: str | None = None  # None: float32 on CPU, bfloat16 on GPU

    def run_hash(self) -> str:
        """Hash of what changes results (not the method list or limit: those only select)."""
        keys = ("data_dir", "candidates", "model", "split", "max_chars", "max_new_tokens", "delta", "min_k",
                "n_candidates", "seed", "batch_docs", "match_lengths")
        params = {k: getattr(self, k) for k in keys}
        if self.max_new_tokens is not None:  # batches, and so seeds and calibration, follow the selection
            params |= {k: getattr(self, k) for k in ("ids", "spread") if getattr(self, k)}
        params |= {k: getattr(self, k) for k in ("device", "dtype") if getattr(self, k) is not None}
        blob = json.dumps(params, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


@dataclass
class EvalDocument:
    """One document: its id, rows of every view, and the attack candidates' prompts per label."""

    doc_id: str
    rows: DocumentRows
    candidates: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)  # label -> prompts


def _seed(*parts: object) -> int:
    return zlib.crc32(":".join(map(str, parts)).encode())


def prepare_documents(config: EvalConfig, backend: HFBackend, tab: TabSplit, ids: Sequence[str]) -> list[EvalDocument]:
    """Truncate (unless whole) and tokenise the documents ``ids`` of ``tab`` and build their
    attack candidates; refuse one whose prompt and T do not fit the model."""
    pool = json.loads(Path(config.candidates).read_text(encoding="utf-8"))
    tok, opts = backend.tokenizer, backend.options
    template = prompt_template(tok, options=opts)
    placeholder = placeholders(tok, options=opts)
    length = (lambda s: len(tok(" " + s, add_special_tokens=False)["input_ids"])) if config.match_lengths else None
    docs = []
    for doc_id in ids:
        text, spans = tab.texts[doc_id], tab.gold[doc_id]
        if config.max_chars is not None:
            text, spans = truncate_document(text, spans, max_chars=config.max_chars)
        doc = EvalDocument(doc_id, document_rows(text, spans, tok, template=template, placeholder=placeholder))
        backend.check_fits(len(doc.rows.original), new_tokens(config, doc))
        for label in ATTACK_LABELS:
            if any(s.label == label for s in spans):
                gen = torch.Generator().manual_seed(_seed(config.seed, doc_id, label))
                cands = attack_candidates(text, spans, label, pool[label], n_candidates=config.n_candidates,
                                          generator=gen, length=length)
                doc.candidates[label] = [template.wrap(tok(c, add_special_tokens=False)["input_ids"]) for c in cands]
        docs.append(doc)
    return docs


def select_documents(texts: dict[str, str], config: EvalConfig) -> list[str]:
    """The ids to evaluate: ``config.ids`` (in that order), else ``limit`` documents spread over
    lengths (:func:`spread_by_length`) or the split's first ``limit``, else all of them."""
    if config.ids is not None:
        unknown = [d for d in config.ids if d not in texts]
        if unknown:
            raise InvalidInputError(f"documents not in the {config.split!r} split: {', '.join(unknown[:5])}"
                                    + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""))
        return list(config.ids)
    if config.spread:
        return spread_by_length(texts, config.limit or len(texts))
    return list(texts)[: config.limit] if config.limit else list(texts)


def new_tokens(config: EvalConfig, doc: EvalDocument) -> int:
    """T of ``doc``'s releases: the run's, or sanitize's default for the document (public: its
    token count)."""
    return config.max_new_tokens or default_new_tokens(len(doc.rows.target))


def _perplexities(backend: HFBackend, bounds: Sequence[BoundMethod], i: int) -> list[tuple[float, int]]:
    """(total NLL, tokens) of document i's original text under each bound method, by teacher forcing.

    One forward pass over the distinct rows the methods read (the original, public, scrubbed
    and group views), then each method's step vectorised over positions ``(n, R, V) -> (n, V)``.
    The widest method's rows come first, so that each method's rows are a slice of the logits (a
    view) whenever they are contiguous: a full-length document's logits are gigabytes.
    """
    doc = bounds[0].docs[i]
    widest = max(bounds, key=lambda b: len(b.rows(doc)))
    views = list(dict.fromkeys([*widest.rows(doc), *(r for b in bounds for r in b.rows(doc))]))  # distinct rows
    logits = continuation_logits(backend, views, doc.target)  # (D, n, V)
    n = logits.shape[1]
    target = torch.tensor(doc.target, device=logits.device)  # (n,)
    out = []
    for bound in bounds:
        rows = _rows_of(logits, [views.index(r) for r in bound.rows(doc)])  # (R, n, V)
        logprobs = bound.teacher_forced(rows.transpose(0, 1), i)  # (n, V)
        out.append((float(-target_logprobs(logprobs, target).double().sum()), n))
    return out


def _rows_of(logits: torch.Tensor, index: list[int]) -> torch.Tensor:
    """``logits[index]``: a view when the indices are consecutive, else a copy."""
    if index == list(range(index[0], index[0] + len(index))):
        return logits[index[0]:index[0] + len(index)]
    return logits[torch.tensor(index, device=logits.device)]


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


def evaluate_sanitization(config: EvalConfig, out_dir: str | Path, *, backend: HFBackend | None = None,
                          progress: bool = True) -> list[dict[str, Any]]:
    """Run the evaluation (resuming from ``out_dir``'s cache); one result row per setting."""
    started = time.perf_counter()
    tab = load_tab(config.data_dir, config.split)
    ids = select_documents(tab.texts, config)  # before the model loads: a bad id costs nothing
    if not ids:
        raise InvalidInputError("no documents to evaluate: check --data, --split, --limit and --ids")
    backend = load_backend(backend or config.model, device=config.device, dtype=config.dtype)
    docs = prepare_documents(config, backend, tab, ids)
    if config.max_new_tokens is None:  # each document alone, its settings calibrated to its own T
        batches = [([d], d.doc_id, _settings(config, backend, [d])) for d in docs]
    else:
        chosen = _settings(config, backend, docs)
        batches = [(docs[c:c + config.batch_docs], c, chosen) for c in range(0, len(docs), config.batch_docs)]
    cache = ResultCache(Path(out_dir), config)
    records: dict[tuple[str, str], dict] = {}  # (setting key, doc_id) -> record
    bar = tqdm(total=sum(len(chunk) * len(chosen) for chunk, _, chosen in batches), desc="eval sanitize",
               unit="run", disable=not progress)
    for chunk, seed, chosen in batches:
        _run_chunk(config, backend, chunk, seed, chosen, cache, records, bar)
    bar.close()
    rows = [summarise(s, [records[s.key, d.doc_id] for d in docs], config) for s in batches[0][2]]
    for r in rows:
        r["seconds_total"] = round(time.perf_counter() - started, 1)
    return rows


def _settings(config: EvalConfig, backend: HFBackend, docs: Sequence[EvalDocument]) -> list[Setting]:
    """The run's settings, calibrated to ``docs``' T (:func:`new_tokens`, which they share) and
    numbers of groups. The same keys, in the same order, for any ``docs``."""
    return make_settings(config.methods, epsilons=config.epsilons, filter_epsilons=config.filter_epsilons,
                         paper=config.paper_settings, vocab_size=backend.vocab_size,
                         max_new_tokens=new_tokens(config, docs[0]), delta=config.delta,
                         group_counts=[len(d.rows.groups) for d in docs])


class _AllSettingsStep:
    """One step function over the sequences of several settings (setting-major, ``n`` documents each).

    Each setting's mechanism sees only its own documents and rows: logits ``# (Na, R, V)`` are
    split by setting, cut to the setting's row count, and the log-probs put back in order.
    """

    def __init__(self, bounds: Sequence[BoundMethod], n: int) -> None:
        self.bounds, self.n = list(bounds), n
        self.widths = [max(len(b.rows(d)) for d in b.docs) for b in self.bounds]

    def __call__(self, logits: torch.Tensor, docs: torch.Tensor, temperature: float) -> MechanismStep:
        out = torch.empty(logits.shape[0], logits.shape[-1], dtype=torch.float32, device=logits.device)  # (Na, V)
        which = torch.div(docs, self.n, rounding_mode="floor").cpu()  # (Na,) setting of each sequence
        for s, (bound, width) in enumerate(zip(self.bounds, self.widths)):
            rows = (which == s).nonzero().squeeze(-1)
            if len(rows):
                step = bound.step(logits[rows.to(logits.device), :width], docs[rows.to(docs.device)] % self.n,
                                  temperature)
                out[rows.to(logits.device)] = step.logprobs.float()
        return MechanismStep(out, {})


class _ReleaseProgress:
    """``on_token`` that shows how far a batched release is (tokens per rewrite so far, of T) on
    the bar, every 16 tokens: a full-length document's release takes minutes."""

    def __init__(self, bar: tqdm, rewrites: int, tokens: int) -> None:
        self.bar, self.rewrites, self.tokens, self.sampled = bar, rewrites, tokens, 0

    def __call__(self, doc: int, token: int) -> None:
        self.sampled += 1
        if self.sampled % (16 * self.rewrites) == 0:
            self.bar.set_postfix_str(f"releasing {self.rewrites} rewrites: {self.sampled // self.rewrites} "
                                     f"of up to {self.tokens} tokens each")


def _run_chunk(config: EvalConfig, backend: HFBackend, chunk: list[EvalDocument], seed: int | str,
               settings: Sequence[Setting], cache: ResultCache, records: dict, bar: tqdm) -> None:
    """Release every pending setting's rewrite of the chunk's documents in one batched generation
    (T: :func:`new_tokens` of the chunk, whose documents share it), then score each (document,
    setting) and cache it. ``seed`` names the chunk in the sampling seed."""
    for s in settings:
        for d in chunk:
            found = cache.get(s.key, d.doc_id)
            if found is not None:
                records[s.key, d.doc_id] = found
                bar.update(1)
    pending = [s for s in settings if any((s.key, d.doc_id) not in records for d in chunk)]
    if not pending:
        return
    tokens = new_tokens(config, chunk[0])
    bounds = [BoundMethod(s, [d.rows for d in chunk], vocab_size=backend.vocab_size,
                          max_new_tokens=tokens, delta=config.delta) for s in pending]
    views = {}  # the fusion methods read the same rows: one object each, which the backend prefills once
    sequences = [views.setdefault(("fusion" if b.setting.method in FUSION_METHODS else b.setting.method, d.doc_id),
                                  RowSequence.from_ids(b.rows(d.rows), public_prefix=d.rows.public_prefix))
                 for b in bounds for d in chunk]
    bar.set_postfix_str(f"releasing {len(sequences)} rewrites")
    released = generate(backend, sequences, _AllSettingsStep(bounds, len(chunk)),
                        max_new_tokens=tokens, generator=make_generator(_seed(config.seed, "release", seed)),
                        eos_ids=backend.eos_token_ids, stop_strings=backend.options.get("stop", []),
                        on_token=_ReleaseProgress(bar, len(sequences), tokens))
    for i, d in enumerate(chunk):
        bar.set_postfix_str("scoring")
        todo = [k for k, s in enumerate(pending) if (s.key, d.doc_id) not in records]
        ppl = _perplexities(backend, [bounds[k] for k in todo], i)
        for (nll, n), k in zip(ppl, todo):
            out = released[k * len(chunk) + i]
            record = {"doc": d.doc_id, "nll": nll, "tokens": n, "epsilon": bounds[k].epsilon(d.rows),
                      "groups": len(d.rows.groups), "max_new_tokens": tokens, "released_tokens": len(out.token_ids),
                      "attacks": _attack(backend, d, out.token_ids, config.min_k)}
            cache.put(pending[k].key, d.doc_id, record)
            records[pending[k].key, d.doc_id] = record
            bar.update(1)


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
                "max_new_tokens": config.max_new_tokens or "per document", "delta": config.delta})
    if config.max_new_tokens is None:  # each document's own T, and the fixed accounting's order chosen for it
        row["mean_max_new_tokens"] = sum(r["max_new_tokens"] for r in records) / len(records)
        if setting.method == "dp-fusion":
            row["params"].pop("alpha", None)
    return row
