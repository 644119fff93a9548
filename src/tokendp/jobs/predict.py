"""Private next-token prediction from an ensemble: PMixED (Flemings et al., NAACL 2024), with
the sound per-token bound of :mod:`tokendp.mechanisms.pmixed`.

``tokendp.predict(prompts, ensemble=DIR, queries=T, epsilon=8, delta=1e-5)`` answers prompts
with an ensemble of N LoRA adapters fine-tuned on disjoint shards of a private corpus
(``tokendp ensemble train``). The guarantee is per shard: everything released (the tokens, and
the report's parameters) is (epsilon, delta)-DP with respect to the data of any one shard.

How a prompt is answered. Each prompt becomes one sequence of 1 + N rows with the same token
ids: row 0 read by the base model (public), row j by shard j's adapter. The backend runs all
rows of all prompts in one mixed-adapter forward pass per step (KV-cached). Per token, PMixED
samples each member with probability q, mixes each sampled member's distribution toward the
public one within the cap beta, and averages (docs/privacy.md, "PMixED").

Budget. T = ``queries`` is the total number of tokens predicted over all prompts, fixed before
anything is generated; every shard's ledger budget is the epsilon of T tokens,

    epsilon = pmixed_epsilon(alpha, beta, N, q, T, delta)

from public parameters only, and each token is charged to every shard (check, then commit)
before it is sampled. When T tokens have been released, the next charge is refused: generation
stops, the tokens released so far are returned, and ``PredictResult.stopped`` says why.
Calibration: given epsilon, beta = pmixed_beta(epsilon, alpha, N, q, T, delta).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from tokendp.accounting import Ledger, pmixed_alpha, pmixed_beta, pmixed_epsilon
from tokendp.backends import HFBackend, Row, RowSequence, is_model_object, load_model
from tokendp.ensemble import Manifest, read_manifest
from tokendp.errors import BudgetExceededError, InvalidInputError, InvalidParameterError
from tokendp.generation import generate, make_generator
from tokendp.params import check_temperature
from tokendp.jobs._renamed import renamed_keywords
from tokendp.mechanisms import MechanismStep, PMixED

DIAGNOSTICS_NOTE = ("data-dependent diagnostics, NOT part of the privacy guarantee; they are computed "
                    "from the ensemble's private training data, so do not publish them with the answers")


DEFAULT_ALPHA = 3.0
"""The order when alpha is not given and beta is (PMixED's paper uses 3)."""

@dataclass(frozen=True)
class Answer:
    """One prompt's predicted continuation (generated text only)."""

    index: int
    text: str
    token_ids: tuple[int, ...]
    stop_reason: str  # "eos", "max_new_tokens", "budget" (the T tokens were spent) or "not_started"


@dataclass(frozen=True)
class PredictReport:
    """The certificate: public parameters only, and what the released tokens determine."""

    mechanism: str
    model: str
    ensemble_size: int
    shards: tuple[str, ...]
    alpha: float
    beta: float
    sample_rate: float
    queries: int
    delta: float
    epsilon: float  # per shard, for all T tokens
    tokens_released: int
    guarantee: str
    temperature: float = 1.0  # public; stated in every report since its default differs between commands

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["shards"] = list(self.shards)
        out["epsilon_per_shard"] = {s: self.epsilon for s in self.shards}
        return out


@dataclass(frozen=True)
class PredictResult:
    """The answers and the report (the release, :meth:`to_dict`); ``diagnostics``, only when asked
    for, are the mean sampled-set size and mean lambda: data-dependent, NOT covered by the
    guarantee, and never in the report or ``to_dict``."""

    answers: tuple[Answer, ...]
    report: PredictReport
    stopped: str | None = None  # why generation stopped before every prompt was answered (budget)
    diagnostics: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"answers": [{**asdict(a), "token_ids": list(a.token_ids)} for a in self.answers],
                "report": self.report.to_dict(), "stopped": self.stopped}


# ---------------------------------------------------------------------------- parameters
def _check_params(epsilon: float | None, beta: float | None, delta: float, queries: int, alpha: float,
                  sample_rate: float, temperature: float, max_new_tokens: int | None, concurrency: int) -> None:
    if (epsilon is None) == (beta is None):
        raise InvalidParameterError("give exactly one of epsilon (per shard; beta is calibrated) or beta (the cap per member)")
    if epsilon is not None and not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise InvalidParameterError(f"epsilon (per shard) must be a finite number > 0, got {epsilon!r}")
    if beta is not None and not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta >= 0):
        raise InvalidParameterError(f"beta (the divergence cap per member) must be a finite number >= 0, got {beta!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise InvalidParameterError(f"delta must be in (0, 1), for example 1e-5; got {delta!r}")
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 1):
        raise InvalidParameterError(f"alpha (the Renyi order) must be a finite number > 1, got {alpha!r}")
    if not (isinstance(sample_rate, (int, float)) and 0 < sample_rate <= 1):
        raise InvalidParameterError(f"sample_rate (q, the probability that a member joins a token's sample) "
                                    f"must be in (0, 1], got {sample_rate!r}")
    check_temperature(temperature, greedy=False)
    for name, value in (("queries", queries), ("max_new_tokens", max_new_tokens), ("concurrency", concurrency)):
        if value is None and name == "max_new_tokens":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")


def _check_prompts(prompts: Sequence[str] | str) -> list[str]:
    items = [prompts] if isinstance(prompts, str) else list(prompts)
    if not items:
        raise InvalidInputError("no prompts: give at least one prompt")
    for i, p in enumerate(items):
        if not isinstance(p, str) or not p.strip():
            raise InvalidInputError(f"prompt {i} is empty or not a string; every prompt must be a non-empty text")
    return items


def calibrate(*, epsilon: float | None, beta: float | None, alpha: float, ensemble_size: int, sample_rate: float,
              queries: int, delta: float) -> tuple[float, float]:
    """(beta, certified epsilon per shard) for T = ``queries`` tokens, from public parameters only."""
    if beta is None:
        beta = pmixed_beta(epsilon=epsilon, alpha=alpha, ensemble_size=ensemble_size, sample_rate=sample_rate,
                           max_tokens=queries, delta=delta)
    eps = pmixed_epsilon(alpha=alpha, beta=beta, ensemble_size=ensemble_size, sample_rate=sample_rate,
                         max_tokens=queries, delta=delta)
    return float(beta), eps


# ---------------------------------------------------------------------------- the job
def prompt_rows(ids: Sequence[int], shards: Sequence[str], base_members: Sequence[str] = ()) -> RowSequence:
    """The 1 + N rows of one prompt: the public row (base model), then one row per member.

    A member in ``base_members`` (an adapter whose B matrices are all 0, i.e. trained on nothing)
    reads the base model: its row is the public row's twin, so the decoding loop gives it row 0's
    logits exactly. That is the neighbour of the proof (docs/privacy.md, "PMixED": a shard
    without data gives the base model), computed as the proof assumes and not merely up to the
    rounding of a LoRA row with B = 0."""
    ids = tuple(int(t) for t in ids)
    return RowSequence((Row(ids), *(Row(ids, None if s in base_members else s) for s in shards)))


class _Job:
    """PMixED bound to its parameters, one ledger unit per shard, the step and the charge."""

    def __init__(self, mechanism: PMixED, shards: Sequence[str], budget: float, delta: float, queries: int,
                 generator: torch.Generator) -> None:
        self.mechanism, self.generator, self.queries = mechanism, generator, queries
        self.events = mechanism.event(shards=list(shards))
        self.ledger = Ledger({s: budget for s in shards}, delta=delta)
        self.released = 0
        self.lam_sum = self.sampled_sum = self.steps = None

    def step(self, logits: torch.Tensor, docs: torch.Tensor, temperature: float) -> MechanismStep:
        """logits ``# (Na, 1+N, V)`` -> next-token log-probs ``# (Na, V)``; diagnostics kept here."""
        out = self.mechanism.step(logits, generator=self.generator, temperature=temperature)
        lam, sampled = out.diagnostics["lam"].double(), out.diagnostics["sampled"].double()  # (Na, N), (Na, 1)
        add = (lam.sum(), sampled.sum(), torch.tensor(float(lam.shape[0]), dtype=torch.float64))
        if self.lam_sum is None:
            self.lam_sum, self.sampled_sum, self.steps = add
        else:
            self.lam_sum, self.sampled_sum, self.steps = self.lam_sum + add[0], self.sampled_sum + add[1], self.steps + add[2]
        return out

    def charge(self, docs: list[int]) -> None:
        """Charge every shard one token per document about to sample, before sampling; refuses
        (BudgetExceededError, nothing committed) past the T tokens fixed up front."""
        if self.released + len(docs) > self.queries:
            raise BudgetExceededError(
                f"the budget of {self.queries} predicted tokens (queries) is spent: {self.released} released")
        for _ in docs:
            self.ledger.charge(self.events)
            self.released += 1

    def diagnostics(self) -> dict[str, Any]:
        if self.steps is None:
            return {"note": DIAGNOSTICS_NOTE}
        sampled = float(self.sampled_sum)
        return {"note": DIAGNOSTICS_NOTE, "mean_sampled_members": sampled / float(self.steps),
                "mean_lambda": float(self.lam_sum) / sampled if sampled else None}


@renamed_keywords(base="model")
def load_ensemble(ensemble: str | Path, *, model: str | Path | Any | None = None, tokenizer: Any = None,
                  device: str | None = None, dtype: str | None = None) -> tuple[Manifest, HFBackend]:
    """The manifest and a backend holding the base model (``model`` overrides the manifest's: a
    registered name such as ``smollm2``, a directory, a cached hub id, or a transformers causal LM
    or peft model object with its ``tokenizer``) with every shard's adapter loaded.

    A model object is used in place: the shards' adapters it lacks are loaded into it (peft
    injects their LoRA layers into the model's modules; pass a copy to keep the object as it was),
    and rows without an adapter (the public row) read its base model."""
    manifest = read_manifest(ensemble)
    adapters = manifest.adapter_dirs(ensemble)
    if is_model_object(model):
        backend = HFBackend.from_model(model, tokenizer, device=device, dtype=dtype, as_given=False)
        backend.add_adapters({name: path for name, path in adapters.items() if name not in backend.adapters})
    else:
        if tokenizer is not None:
            raise InvalidParameterError("tokenizer= goes with a model object given as model=")
        backend = load_model(model or manifest.base_model, device=device, dtype=dtype, adapters=adapters)
    return manifest, backend


@renamed_keywords(base="model")
def predict(
    prompts: Sequence[str] | str, *, ensemble: str | Path, queries: int, delta: float, epsilon: float | None = None,
    beta: float | None = None, alpha: float | None = None, sample_rate: float = 1.0, temperature: float = 1.0,
    max_new_tokens: int | None = None, seed: int | None = None, model: str | Path | Any | None = None,
    tokenizer: Any = None, backend: HFBackend | None = None, concurrency: int = 1, device: str | None = None, dtype: str | None = None,
    on_token: Callable[[int, int], None] | None = None, diagnostics: bool = False,
) -> PredictResult:
    """Answer ``prompts`` with PMixED over the ensemble in ``ensemble`` (see the module docstring).

    Args:
        prompts: one prompt or a list; each is continued by the ensemble.
        ensemble: the directory written by ``tokendp ensemble train`` (manifest + adapters).
        queries: T, the total number of tokens predicted over all prompts, fixed up front.
        delta: the delta of the guarantee.
        epsilon: the guarantee per shard for all T tokens (beta is calibrated); or give ``beta``.
        beta: the divergence cap per member (epsilon is then computed).
        alpha: the Renyi order of the mollifier and the accounting; None: with ``epsilon``, the
            order that allows the largest beta (:func:`~tokendp.accounting.pmixed_alpha`, from
            epsilon, delta, N, q and T: public parameters only), with ``beta``, 3.
        sample_rate: q, the probability that each member joins a token's sample.
        temperature: sampling temperature (>= 0.001).
        max_new_tokens: the most tokens per prompt (default: all that are left of T).
        seed: reproducible sampling; None seeds from the OS.
        model: the base model instead of the manifest's: a name, a directory, a hub id, or a
            transformers causal LM or peft model object on any device and in any dtype, which gets
            the shards' adapters loaded into it in place (:func:`load_ensemble`). Was ``base``,
            still accepted with a FutureWarning.
        tokenizer: the tokenizer of a model object given as ``model``.
        backend: an HFBackend with the ensemble's adapters loaded already (``model`` is then unused).
        concurrency: prompts generated together in one batch (default 1: one prompt after the
            other, each allowed what is left of T, so the budget is never refused mid-step; with
            more, a step that needs more tokens than are left is refused and nothing of it released).
        on_token: streaming callback ``(prompt index, token id)``.
        diagnostics: also return, as ``result.diagnostics``, the mean size of the sampled set and
            the mean lambda: data-dependent (the set S must stay secret, the lambdas depend on the
            shards' data), NOT covered by the guarantee, so kept apart from the answers.
    """
    _check_params(epsilon, beta, delta, queries, DEFAULT_ALPHA if alpha is None else alpha, sample_rate, temperature,
                  max_new_tokens, concurrency)
    items = _check_prompts(prompts)
    manifest = read_manifest(ensemble)
    shards = manifest.shard_names
    if alpha is None:
        alpha = DEFAULT_ALPHA if epsilon is None else pmixed_alpha(
            epsilon=epsilon, ensemble_size=len(shards), sample_rate=sample_rate, max_tokens=queries, delta=delta)
    beta, eps = calibrate(epsilon=epsilon, beta=beta, alpha=alpha, ensemble_size=len(shards),
                          sample_rate=sample_rate, queries=queries, delta=delta)
    if backend is None:
        manifest, backend = load_ensemble(ensemble, model=model, tokenizer=tokenizer, device=device, dtype=dtype)
    else:
        missing = sorted(set(shards) - set(backend.adapters))
        if missing:
            raise InvalidInputError(f"unknown adapter(s) {', '.join(missing)}: the backend lacks these shards' adapters")
    tok = backend.tokenizer
    zero = backend.zero_adapters()
    ids = [tuple(tok(p)["input_ids"]) for p in items]
    if any(len(i) == 0 for i in ids):
        raise InvalidInputError("a prompt has no tokens")
    limit = queries if max_new_tokens is None else min(max_new_tokens, queries)
    backend.check_fits(max(len(i) for i in ids), limit)
    generator = make_generator(seed, backend.device)
    job = _Job(PMixED(alpha=alpha, sample_rate=sample_rate, beta=beta), shards, eps, delta, queries, generator)
    released: dict[int, list[int]] = {}
    answers: list[Answer] = []
    stopped: bool | str | None = None
    start = 0
    while start < len(items):
        left = queries - job.released
        if left == 0 or stopped:
            answers += [Answer(i, "", (), "not_started") for i in range(start, len(items))]
            break
        chunk = list(range(start, min(start + concurrency, start + left, len(items))))

        def stream(d: int, t: int, s: int = start) -> None:
            released.setdefault(s + d, []).append(t)
            if on_token is not None:
                on_token(s + d, t)

        try:
            outs = generate(backend, [prompt_rows(ids[i], shards, zero) for i in chunk], job.step,
                            max_new_tokens=min(limit, left), generator=generator, temperature=temperature,
                            eos_ids=backend.eos_token_ids, charge=job.charge, on_token=stream)
            cut = left < limit and job.released == queries  # the budget, not max_new_tokens, ended them
            answers += [Answer(i, o.text, o.token_ids, "budget" if cut and o.stop_reason == "max_new_tokens"
                               else o.stop_reason) for i, o in zip(chunk, outs)]
        except BudgetExceededError:
            stopped = True
            eos = set(backend.eos_token_ids)
            for i in chunk:
                got = released.get(i, [])
                done = bool(got) and got[-1] in eos
                answers.append(Answer(i, tok.decode(got[:-1] if done else got, skip_special_tokens=True),
                                      tuple(got[:-1] if done else got), "eos" if done else "budget"))
        start = chunk[-1] + 1
    unfinished = sum(a.stop_reason in ("budget", "not_started") for a in answers)
    stopped = _stop_message(queries, len(items) - unfinished, len(items)) if unfinished else None
    report = PredictReport("pmixed", backend.name, len(shards), shards, float(alpha), beta, float(sample_rate),
                           queries, float(delta), eps, job.released,
                           f"({eps:.4g}, {delta:g})-DP per shard for all {queries} predicted tokens "
                           f"(RDP at alpha {alpha:g}, from public parameters only)", float(temperature))
    return PredictResult(tuple(answers), report, stopped, job.diagnostics() if diagnostics else None)


def _stop_message(queries: int, answered: int, total: int) -> str:
    return (f"budget exhausted: all {queries} predicted tokens (queries) are spent; {answered} of {total} "
            "prompts were answered in full, the rest are cut where the budget ran out. Another run spends "
            "another epsilon per shard on top of this one (guarantees compose): plan a larger --queries up front.")
