"""``evaluate_prediction``: test perplexity of PMixED's released next-token distributions beside
the public model, the non-private ensemble and fine-tuned adapters (``tokendp eval predict``).

Protocol (docs/predict.md, "Evaluation"). The held-out text (a UTF-8 file read whole, e.g.
WikiText-2's ``test.txt``) is tokenised once as one stream. T = ``queries`` positions are
scored, in W = ceil(T / L) windows of L = ``window`` scored tokens (the last window takes
what is left of T). Window k starts at offset o_k = floor(k (S - L - 1) / (W - 1)) of the
stream of S tokens (evenly spread, public, the same for every method) and holds tokens
x_0 .. x_L; position t = 1 .. L is predicted from x_<t of its window (teacher forcing). Every
method m is scored at the same T positions:

    PPL_m = exp(-(1/T) sum_t log p_m(x_t | x_<t)).

Methods, each one next-token distribution per position:

* ``public``: the base model (epsilon 0: it never saw the private corpus);
* ``ensemble``: the non-private average (1/N) sum_j p_j of the N members (no guarantee);
* ``pmixed``: PMixED's released distribution, :class:`tokendp.mechanisms.PMixED` at the beta
  that ``pmixed_beta`` calibrates for epsilon per shard over the T queries (at order alpha, by
  default ``pmixed_alpha``), with a fresh Poisson sample of the ensemble at every position, as
  ``tokendp predict`` draws one per token (the positions of a window are then released in
  groups of similar |S|, which changes only the work). An adapter whose B matrices are 0 reads the base
  model, as in ``predict``;
* adapters (``adapters``: name, directory, certified epsilon or None): one LoRA adapter alone,
  e.g. a single non-private fine-tune on the whole corpus, or a DP-SGD fine-tune.

One mixed-adapter forward pass per window gives the logits of every row (base, members,
adapters; :func:`tokendp.eval.scoring.continuation_logits`); the methods are then vectorised
over positions. Each window's negative log-likelihoods are cached as JSON in
``out/cache/<run-hash>/`` (numbers only, no text), so a killed run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from tokendp.accounting import pmixed_alpha, pmixed_beta, pmixed_epsilon
from tokendp.backends import HFBackend, load_model
from tokendp.backends.hf import BASE_ADAPTER
from tokendp.ensemble import Manifest, read_manifest
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.eval.metrics import target_logprobs
from tokendp.eval.scoring import continuation_logits
from tokendp.mechanisms import PMixED
from tokendp.text.documents import read_text_file

METHODS = ("public", "ensemble", "pmixed")
PAPER_SAMPLED = 0.03 * 80
"""The PMixED paper's expected sample size N q (N = 80, q = 0.03); the default q keeps it."""
POSITIONS_PER_STEP = 16
"""Positions per call of PMixED's step: bounds the float64 working set (about 16 (1 + N) V
values per buffer)."""


@dataclass(frozen=True)
class AdapterMethod:
    """A LoRA adapter scored alone: ``name`` labels its row; ``epsilon`` is its certified
    guarantee when it has one (e.g. DP-SGD), else None (non-private); ``unit`` is what that
    epsilon protects when known (``record`` for a ``tokendp finetune`` run)."""

    name: str
    path: str
    epsilon: float | None = None
    unit: str | None = None


FINETUNE_REPORT = "finetune.json"
"""The report ``tokendp finetune`` writes beside its ``adapter/`` directory."""


def certified_adapter(adapter: AdapterMethod, delta: float) -> AdapterMethod:
    """The adapter with the guarantee of its ``tokendp finetune`` report, when its directory is
    a run's ``OUT/adapter`` (``OUT/finetune.json`` beside it): its row then shows the epsilon
    the accountant certified, per record, never a number typed by hand. Refused: an epsilon for
    a run trained without DP, an epsilon below the certified one, and a certificate at a delta
    above the evaluation's (the table states one delta for every row). Any other directory is
    taken as given (``NAME=DIR`` no guarantee, ``NAME@EPS=DIR`` the caller's epsilon)."""
    path = Path(adapter.path).parent / FINETUNE_REPORT
    if not path.is_file():
        return adapter
    report = json.loads(path.read_text(encoding="utf-8"))
    privacy = report.get("privacy")
    if privacy is None:
        if adapter.epsilon is not None:
            raise InvalidParameterError(f"--adapter {adapter.name}: {path} says it was trained without DP "
                                        f"(method {report.get('method')}); drop @{adapter.epsilon:g}")
        return adapter
    certified, at = float(privacy["epsilon"]), float(privacy["delta"])
    if at > delta:
        raise InvalidParameterError(f"--adapter {adapter.name}: certified at delta {at:g}, above this evaluation's "
                                    f"--delta {delta:g}; evaluate at --delta {at:g} or train at a smaller delta")
    if adapter.epsilon is not None and adapter.epsilon < certified * (1 - 1e-9):
        raise InvalidParameterError(f"--adapter {adapter.name}@{adapter.epsilon:g}: {path} certifies epsilon "
                                    f"{certified:.6g}, more than the {adapter.epsilon:g} claimed")
    return AdapterMethod(adapter.name, adapter.path, certified, "record")


@dataclass(frozen=True)
class PredictEvalConfig:
    """Everything that determines an evaluation run (and its cache)."""

    data: str
    ensemble: str
    base: str | None = None
    methods: tuple[str, ...] = METHODS
    epsilons: tuple[float, ...] = (1.0, 3.0, 8.0)
    sample_rates: tuple[float, ...] | None = None  # None: N q = PAPER_SAMPLED (capped at q = 1)
    alpha: float | None = None  # None: pmixed_alpha for each (epsilon, q)
    queries: int = 1024
    window: int = 128
    delta: float = 1e-5
    seed: int = 0
    adapters: tuple[AdapterMethod, ...] = ()

    def check(self) -> PredictEvalConfig:
        unknown = sorted(set(self.methods) - set(METHODS))
        if unknown:
            raise InvalidParameterError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)} "
                                        "(adapters are added with --adapter NAME=DIR)")
        if not self.methods and not self.adapters:
            raise InvalidParameterError("nothing to evaluate: give --methods or --adapter")
        for name in ("queries", "window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")
        if "pmixed" in self.methods and not self.epsilons:
            raise InvalidParameterError("pmixed needs at least one epsilon (--epsilon 1,3,8)")
        if not (isinstance(self.delta, (int, float)) and 0 < self.delta < 1):
            raise InvalidParameterError(f"delta must be in (0, 1), got {self.delta!r}")
        rows = [(a.name, a.epsilon) for a in self.adapters]  # one name at several epsilons: one line of the plot
        if len(set(rows)) != len(rows) or {a.name for a in self.adapters} & set(METHODS):
            raise InvalidParameterError("adapter rows must be distinct (a name repeats only at other epsilons, as in "
                                        f"dp-sgd@8=... dp-sgd@3=...) and not named {', '.join(METHODS)}")
        return self


@dataclass(frozen=True)
class Setting:
    """One result row: a method and its public parameters."""

    method: str
    name: str
    epsilon: float | None  # certified per shard over the T queries; 0 = reads no private data; None = no guarantee
    adapter: str | None = None  # peft adapter name of an adapter row
    source: str | None = None  # an adapter row's weights file, size and time (a new adapter is a new setting)
    alpha: float | None = None
    beta: float | None = None
    sample_rate: float | None = None

    @property
    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def make_settings(config: PredictEvalConfig, ensemble_size: int) -> list[Setting]:
    """The rows to evaluate, in table order: public, ensemble, PMixED by q and epsilon, adapters."""
    out = []
    if "public" in config.methods:
        out.append(Setting("public", "base model", 0.0))
    if "ensemble" in config.methods:
        out.append(Setting("ensemble", f"average of {ensemble_size} (non-private)", None))
    if "pmixed" in config.methods:
        rates = config.sample_rates or (min(1.0, PAPER_SAMPLED / ensemble_size),)
        for q in rates:
            for eps in sorted(config.epsilons):
                alpha = config.alpha or pmixed_alpha(epsilon=eps, ensemble_size=ensemble_size, sample_rate=q,
                                                     max_tokens=config.queries, delta=config.delta)
                beta = pmixed_beta(epsilon=eps, alpha=alpha, ensemble_size=ensemble_size, sample_rate=q,
                                   max_tokens=config.queries, delta=config.delta)
                certified = pmixed_epsilon(alpha=alpha, beta=beta, ensemble_size=ensemble_size, sample_rate=q,
                                           max_tokens=config.queries, delta=config.delta)
                out.append(Setting(f"pmixed q={q:g}", f"eps {eps:g}", certified, alpha=alpha, beta=beta,
                                   sample_rate=q))
    for i, a in enumerate(config.adapters):
        out.append(Setting(a.name, a.name + _guarantee_label(a), a.epsilon,
                           adapter=adapter_name(i), source=_stamp(Path(a.path) / "adapter_model.safetensors")))
    return out


def _recorded_base(adapter_dir: Path) -> str | None:
    """The base model an adapter was trained on, as peft recorded it (None when unrecorded)."""
    config = Path(adapter_dir) / "adapter_config.json"
    recorded = json.loads(config.read_text(encoding="utf-8")).get("base_model_name_or_path") if config.is_file() else None
    return str(Path(recorded).resolve()) if recorded and Path(recorded).is_dir() else recorded


def check_same_base(members: dict[str, Path], adapters: Sequence[AdapterMethod]) -> None:
    """Refuse an adapter whose recorded base model differs from the ensemble members': its
    LoRA deltas would be read on weights it was not trained on (same shapes, wrong numbers)."""
    bases = {b for b in map(_recorded_base, members.values()) if b}
    for a in adapters:
        own = _recorded_base(Path(a.path))
        if own and bases and own not in bases:
            raise InvalidInputError(f"--adapter {a.name}: trained on base model {own}, the ensemble on "
                                    f"{', '.join(sorted(bases))}; train both on the same base")


def _guarantee_label(adapter: AdapterMethod) -> str:
    """" (eps 8)", " (eps 8 per record)" or "" (no guarantee), for an adapter row's setting."""
    if adapter.epsilon is None:
        return ""
    return f" (eps {adapter.epsilon:.3g}" + (f" per {adapter.unit})" if adapter.unit else ")")


def _stamp(path: Path) -> str:
    """A file's identity for the cache: its path, size and modification time."""
    stat = path.stat() if path.is_file() else None
    return f"{path.resolve()}:{stat.st_size if stat else 0}:{stat.st_mtime_ns if stat else 0}"


def adapter_name(i: int) -> str:
    """The peft name under which the i-th adapter method is loaded beside the shards."""
    return f"eval-adapter-{i}"


# ---------------------------------------------------------------------------- windows
def windows(stream_length: int, *, queries: int, window: int) -> list[tuple[int, int]]:
    """(offset, scored tokens) of each window: W = ceil(T / L) windows, L scored tokens each but
    the last (T in all), at evenly spread offsets o_k = floor(k (S - L - 1) / (W - 1))."""
    count = math.ceil(queries / window)
    span = stream_length - window - 1
    if span < 0:
        raise InvalidInputError(f"the held-out text has {stream_length} tokens, fewer than one window of "
                                f"{window + 1}: give more text or a smaller --window")
    sizes = [window] * (count - 1) + [queries - window * (count - 1)]
    return [((k * span) // max(count - 1, 1), size) for k, size in enumerate(sizes)]


def _window_nll(backend: HFBackend, ids: Sequence[int], settings: Sequence[Setting], members: Sequence[str],
                zero: set[str], seeds: Sequence[int]) -> dict[str, dict[str, float]]:
    """{setting key: {"nll", "tokens", and for PMixED "lam_sum", "sampled_sum"}} of one window.

    Runs the rows the ``settings`` read, once each: the base model, the ``members`` when a setting
    mixes them, the adapters of adapter settings; a member in ``zero`` (B = 0) reads the base row."""
    wanted = [*(members if any(s.adapter is None and s.method != "public" for s in settings) else ()),
              *(s.adapter for s in settings if s.adapter is not None)]
    index, rows = {BASE_ADAPTER: 0}, [BASE_ADAPTER]
    for name in wanted:
        index[name] = 0 if name in zero else len(rows)
        if name not in zero:
            rows.append(name)
    logits = continuation_logits(backend, [ids[:1]] * len(rows), ids[1:], adapters=rows)  # (R, n, V)
    target = torch.tensor(ids[1:], device=logits.device)  # (n,)
    n = target.shape[0]
    member_rows = torch.tensor([index.get(m, 0) for m in members], device=logits.device)  # (N,)
    out = {}
    for setting, seed in zip(settings, seeds):
        record: dict[str, float] = {"tokens": n}
        if setting.method == "public" or setting.adapter is not None:
            row = logits[index[setting.adapter or BASE_ADAPTER]]  # (n, V)
            lp = target_logprobs(torch.log_softmax(row.double(), -1), target)  # (n,)
        elif setting.method == "ensemble":
            each = torch.log_softmax(logits[member_rows].double(), -1)  # (N, n, V)
            lp = target_logprobs(torch.logsumexp(each, 0) - math.log(len(members)), target)  # (n,)
        else:
            mechanism = PMixED(alpha=setting.alpha, sample_rate=setting.sample_rate, beta=setting.beta)
            generator = torch.Generator(device=logits.device).manual_seed(seed)
            ordered = torch.cat([torch.zeros(1, dtype=torch.long, device=logits.device), member_rows])  # (1+N,)
            rows_pm = logits[ordered].transpose(0, 1)  # (n, 1+N, V): the public row, then the members
            sampled = mechanism.sample((n, len(members)), generator=generator).to(logits.device)  # (n, N)
            # Positions with similar |S| go together: the release searches only the sampled rows, up
            # to the largest |S| of a call.
            by_size = torch.argsort(sampled.sum(-1), stable=True)  # (n,)
            lp = torch.empty(n, dtype=torch.float64, device=logits.device)
            lam_sum = 0.0
            for start in range(0, n, POSITIONS_PER_STEP):
                at = by_size[start:start + POSITIONS_PER_STEP]  # (c,)
                step = mechanism.release(rows_pm[at], sampled[at])  # (c, 1+N, V) -> (c, V)
                lp[at] = target_logprobs(step.logprobs, target[at]).double()
                lam_sum += float(step.diagnostics["lam"].double().sum())
            record.update(lam_sum=lam_sum, sampled_sum=float(sampled.sum()))
        record["nll"] = float(-lp.double().sum())
        out[setting.key] = record
    return out


def _run_hash(config: PredictEvalConfig, manifest: Manifest, base: str) -> str:
    """What changes every window's numbers: the text, the ensemble (its manifest and adapter
    files), the base model, T, L and the seed (not the settings, adapter rows included: each
    is cached by its key)."""
    stamp = [_stamp(Path(config.ensemble) / s.name / "adapter_model.safetensors") for s in manifest.shards]
    blob = json.dumps({"data": hashlib.sha256(Path(config.data).read_bytes()).hexdigest(),
                       "manifest": manifest.to_dict(), "base": base, "adapters": stamp, "queries": config.queries,
                       "window": config.window, "seed": config.seed}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def evaluate_prediction(config: PredictEvalConfig, out_dir: str | Path, *, backend: HFBackend | None = None,
                        device: str | None = None, dtype: str | None = None,
                        progress: bool = True) -> list[dict[str, Any]]:
    """Run the evaluation (resuming from ``out_dir``'s cache); one result row per setting.

    ``backend``: an HFBackend with the ensemble's shards and the adapters loaded under their
    names (``shard-000`` ..., ``eval-adapter-0`` ...); by default the base model of the manifest
    (or ``config.base``) is loaded on ``device`` in ``dtype`` with them.
    """
    started = time.perf_counter()
    config = config.check()
    config = replace(config, adapters=tuple(certified_adapter(a, config.delta) for a in config.adapters))
    manifest = read_manifest(config.ensemble)
    shards = manifest.shard_names
    settings = make_settings(config, len(shards))
    extra = {adapter_name(i): Path(a.path) for i, a in enumerate(config.adapters)}
    check_same_base(manifest.adapter_dirs(config.ensemble), config.adapters)
    if backend is None:
        backend = load_model(config.base or manifest.base_model, device=device, dtype=dtype,
                             adapters={**manifest.adapter_dirs(config.ensemble), **extra})
    missing = sorted((set(shards) | set(extra)) - set(backend.adapters))
    if missing:
        raise InvalidInputError(f"unknown adapter(s) {', '.join(missing)}: the backend lacks them")
    zero = set(backend.zero_adapters())  # trained on nothing: the base model itself, as predict reads them
    stream = backend.tokenizer(read_text_file(config.data), add_special_tokens=False)["input_ids"]
    spans = windows(len(stream), queries=config.queries, window=config.window)
    cache = Path(out_dir) / "cache" / _run_hash(config, manifest, str(config.base or manifest.base_model))
    cache.mkdir(parents=True, exist_ok=True)
    records = []
    for k, (offset, size) in enumerate(tqdm(spans, desc="eval predict", unit="window", disable=not progress)):
        path = cache / f"window-{k:04d}.json"
        record = json.loads(path.read_text()) if path.is_file() else {}
        todo = [s for s in settings if s.key not in record]
        if todo:
            seeds = [zlib.crc32(f"{config.seed}:{k}:{s.key}".encode()) for s in todo]
            record.update(_window_nll(backend, stream[offset:offset + size + 1], todo, shards, zero, seeds))
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(record))
            tmp.replace(path)
        records.append(record)
    seconds = round(time.perf_counter() - started, 1)
    return [summarise(s, [r[s.key] for r in records], config, manifest, seconds) for s in settings]


def summarise(setting: Setting, records: Sequence[dict[str, float]], config: PredictEvalConfig,
              manifest: Manifest, seconds: float) -> dict[str, Any]:
    """One result row: pooled perplexity over the T positions, the public parameters, and for
    PMixED the mean lambda and mean |S| (data-dependent diagnostics, never the guarantee)."""
    nll, tokens = sum(r["nll"] for r in records), int(sum(r["tokens"] for r in records))
    row: dict[str, Any] = {"method": setting.method, "setting": setting.name, "epsilon": setting.epsilon,
                           "ppl": math.exp(nll / tokens), "tokens": tokens, "alpha": setting.alpha,
                           "beta": setting.beta, "sample_rate": setting.sample_rate,
                           "ensemble_size": manifest.ensemble_size, "queries": config.queries,
                           "window": config.window, "delta": config.delta, "seconds_total": seconds}
    if setting.method.startswith("pmixed"):
        sampled = sum(r["sampled_sum"] for r in records)
        row["mean_sampled"] = sampled / tokens
        row["mean_lambda"] = sum(r["lam_sum"] for r in records) / sampled if sampled else None
    return row
