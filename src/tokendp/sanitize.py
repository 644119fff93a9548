"""Document sanitization with DP-Fusion: tag, build contexts, generate, report.

``tokendp.sanitize(text, epsilon=8)`` rewrites a document so that, for every privacy group
i (by default one per span label: PERSON, DATETIME, ...), the rewrite is
(epsilon_i, delta)-DP with respect to the tokens of group i's spans (DP-Fusion, Thareja et
al., ICLR 2026; the per-token bound is :func:`tokendp.accounting.dp_fusion_rdp_per_token`,
its proof is in docs/privacy.md, "DP-Fusion (document sanitization)"). The certificate depends only on public parameters: alpha, beta_i,
the number m of groups in the document, T = max_new_tokens and delta:

    epsilon_i = dp_fusion_epsilon(alpha, beta_i, groups=m, max_tokens=T, delta)

T is fixed before generation and counted in full even when the rewrite stops early.

``method="original"`` rewrites the document with all spans visible (no privacy, for
comparison); ``method="public"`` reads only the public context (every span hidden), so the
output does not depend on any private token: epsilon 0 for every group.
"""

from __future__ import annotations

import math
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch

from tokendp.accounting import Ledger, dp_fusion_beta, dp_fusion_epsilon
from tokendp.backends import HFBackend, RowSequence, load_backend
from tokendp.drafts import PromptLookup
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.generation import Generated, generate, make_generator
from tokendp.logits_processors import PublicLogitsProcessor
from tokendp.mechanisms import DPFusion, MechanismStep
from tokendp.text.contexts import (DocumentContexts, GroupSpec, build_contexts, placeholder_id,
                                   prompt_template)
from tokendp.text.spans import Span

Method = Literal["dp-fusion", "original", "public"]
METHODS = ("dp-fusion", "original", "public")
Budget = float | Mapping[str, float] | None
DIAGNOSTICS_NOTE = ("data-dependent diagnostics, NOT part of the privacy guarantee; they are computed "
                    "from the private text, so do not publish them with the rewrite")


@dataclass(frozen=True)
class GroupReport:
    """One privacy group of a document: its spans, hidden tokens, beta and certified epsilon."""

    label: str
    n_spans: int
    n_tokens: int
    beta: float | None
    epsilon: float | None


@dataclass(frozen=True)
class SanitizeReport:
    """What a data-protection officer needs: parameters, the guarantee per group, diagnostics."""

    mechanism: str
    model: str
    alpha: float
    delta: float
    max_new_tokens: int
    tokens_generated: int
    stop_reason: str
    guarantee: str
    groups: tuple[GroupReport, ...]
    diagnostics: dict[str, Any] = field(default_factory=dict)
    decoding: dict[str, Any] = field(default_factory=dict)  # public decoding constraints applied to every row

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["groups"] = [asdict(g) for g in self.groups]
        return out


@dataclass(frozen=True)
class SanitizeResult:
    """The rewrite (generated text only) and its report."""

    text: str
    report: SanitizeReport

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "report": self.report.to_dict()}


# ---------------------------------------------------------------------------- parameters
def _check_params(method: str, alpha: float | None, delta: float, temperature: float,
                  beta: Budget, epsilon: Budget) -> None:
    if method not in METHODS:
        raise InvalidParameterError(f"method must be one of {METHODS}, got {method!r}")
    if alpha is not None and not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 1):
        raise InvalidParameterError(f"alpha (the Renyi order) must be a finite number > 1, got {alpha!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise InvalidParameterError(f"delta must be in (0, 1), for example 1e-5; got {delta!r}")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
        raise InvalidParameterError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if method == "dp-fusion":
        if (beta is None) == (epsilon is None):
            raise InvalidParameterError("DP-Fusion needs exactly one of beta= or epsilon= "
                                        "(epsilon per group, e.g. epsilon=8)")
        if temperature == 0:
            raise InvalidParameterError("temperature 0 (greedy decoding) gives no privacy guarantee; "
                                        "use temperature > 0, or method='original' for a greedy comparison")


def _per_group(value: Budget, names: Sequence[str], what: str) -> list[float]:
    """A scalar for every group, or a mapping that names each group of the document."""
    if isinstance(value, Mapping):
        missing = sorted(set(names) - set(value))
        if missing:
            raise InvalidInputError(f"{what} has no value for group(s) {missing}; give one per group")
        values = [value[n] for n in names]
    else:
        values = [value] * len(names)
    for n, v in zip(names, values):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise InvalidParameterError(f"{what} for group {n} must be a finite number >= 0, got {v!r}")
    return [float(v) for v in values]


def _check_known_groups(value: Budget, all_names: set[str], what: str) -> None:
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - all_names)
        if unknown:
            raise InvalidInputError(f"{what} names group(s) {unknown} that no document has; "
                                    f"the groups are {sorted(all_names)}")


def _betas(ctx: DocumentContexts, *, alpha: float, delta: float, max_tokens: int,
           beta: Budget, epsilon: Budget) -> list[float]:
    """beta_i per group: given, or the largest beta whose certified epsilon meets epsilon_i."""
    names, m = [g.name for g in ctx.groups], len(ctx.groups)
    if beta is not None:
        return _per_group(beta, names, "beta")
    return [0.0 if e == 0 else dp_fusion_beta(epsilon=e, alpha=alpha, groups=m, max_tokens=max_tokens, delta=delta)
            for e in _per_group(epsilon, names, "epsilon")]


ALPHA_GRID = (1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 24.0, 32.0, 64.0)
DEFAULT_ALPHA = 2.0


def choose_alpha(targets: Sequence[tuple[float, int, int]], *, delta: float) -> float:
    """The Renyi order that allows the largest beta for the tightest of ``targets``.

    ``targets`` holds (epsilon, m, T) per group and document. For small mixing weights,
    D_alpha(lambda P + (1-lambda) Q || Q) ~ alpha lambda^2 chi2(P||Q) / 2, so the cap
    alpha * beta admits lambda ~ sqrt(2 beta / chi2): the best order is the one with the
    largest calibrated beta (:func:`~tokendp.accounting.dp_fusion_beta`), a choice made from
    public parameters only. Orders whose conversion cost alone exceeds a target are skipped.
    """
    best, best_alpha = -1.0, None
    for a in ALPHA_GRID:
        try:
            beta = min(dp_fusion_beta(epsilon=e, alpha=a, groups=m, max_tokens=t, delta=delta)
                       for e, m, t in targets)
        except InvalidParameterError:
            continue
        if beta > best:
            best, best_alpha = beta, a
    if best_alpha is None:
        raise InvalidParameterError(
            f"no Renyi order in {ALPHA_GRID[0]}..{ALPHA_GRID[-1]} reaches epsilon "
            f"{min(e for e, _, _ in targets):g} at delta {delta:g}; raise epsilon or delta, or lower max_new_tokens")
    return best_alpha


# ---------------------------------------------------------------------------- the job
def _spans_of(text: str, spans: Sequence[Span | Mapping] | None, tagger: Any) -> list[Span]:
    if spans is None:
        return list(tagger.tag(text))
    try:
        return [s if isinstance(s, Span) else Span.from_dict(s) for s in spans]
    except (KeyError, TypeError, ValueError) as err:
        raise InvalidInputError(f"a span is malformed ({err}); spans are {{start, end, label}} "
                                "character offsets") from None


def _default_tokens(backend: HFBackend, ctx: DocumentContexts, requested: int | None) -> int:
    """T: the requested value (checked against the context), else 1.2x the document + 16."""
    if requested is not None:
        if not (isinstance(requested, int) and requested >= 1):
            raise InvalidParameterError(f"max_new_tokens must be an integer >= 1, got {requested!r}")
        backend.check_fits(ctx.length, requested)
        return requested
    tokens = math.ceil(1.2 * ctx.document_tokens) + 16
    room = (backend.max_context or ctx.length + tokens) - ctx.length
    if room < 1:
        backend.check_fits(ctx.length, 1)
    return min(tokens, room)


def sanitize(text: str, *, spans: Sequence[Span | Mapping] | None = None, **kwargs: Any) -> SanitizeResult:
    """Rewrite one document; see :func:`sanitize_batch` for every parameter."""
    return sanitize_batch([text], spans=None if spans is None else [spans], **kwargs)[0]


def sanitize_batch(
    texts: Sequence[str], *, spans: Sequence[Sequence[Span | Mapping] | None] | None = None,
    tagger: str | Any = "auto", model: str | Path | HFBackend | None = "rewriter", method: Method = "dp-fusion",
    alpha: float | None = None, beta: Budget = None, epsilon: Budget = None, delta: float = 1e-5,
    groups: GroupSpec = "by-label", max_new_tokens: int | None = None, temperature: float = 1.0,
    seed: int | None = None, instruction: str | None = None, template: str | None = None,
    placeholder: str | None = None, stop: Sequence[str] = (), on_overlap: Literal["merge", "error"] = "merge",
    device: str | None = None, dtype: str | None = None,
    on_token: Callable[[int, int], None] | None = None,
    no_repeat_ngram_size: int = 0, repetition_penalty: float = 1.0,
    speculative: bool | None = None, draft_tokens: int = 4,
) -> list[SanitizeResult]:
    """Rewrite many documents in one batch (one forward pass per generated token for all, or
    fewer with ``speculative``).

    Args:
        texts: the documents.
        spans: per document, its spans (``Span`` or ``{start, end, label}`` with character
            offsets), or None to run ``tagger`` on it.
        tagger: a tagger name for ``tokendp.text.taggers.get_tagger`` or an object with ``tag``.
        model: a name (``"rewriter"``, the default: SmolLM2-135M-Instruct with tokendp's
            rewriter adapter; ``"smollm2"``; ``"tiny"``, the embedded 4.5M model), a local model
            directory, a hub id (in the local cache), an ``HFBackend``, or None for ``tiny``.
        method: ``"dp-fusion"`` (private), ``"original"`` (no privacy), ``"public"`` (epsilon 0).
        alpha: the Renyi order of the DP-Fusion bound (> 1). Default: with ``epsilon``, the
            order that allows the largest beta (:func:`choose_alpha`); with ``beta``, 2.
        beta, epsilon: exactly one for DP-Fusion: per group (a number for all groups, or a
            mapping group -> value). With epsilon, beta_i is the largest beta meeting it.
        delta: the delta of every group's (epsilon, delta) guarantee.
        groups: ``"by-label"``, ``"single"`` or a mapping label -> group.
        max_new_tokens: T, fixed before generation (default: 1.2x the document's tokens + 16,
            within the model's context); the certificate counts all T tokens.
        temperature: sampling temperature (> 0; 0 = greedy, only for original/public).
        seed: seed for reproducible sampling; None seeds from the OS (``secrets``).
        instruction, template, placeholder: the paraphrase instruction, a plain template with
            ``{document}``, and the placeholder string (defaults: the model's tokendp.json).
        stop: extra stop strings (the model's tokendp.json "stop" always apply).
        on_overlap: spans of different labels that overlap are hidden in both groups' rows
            (``"merge"``) or rejected (``"error"``).
        device, dtype: where and how to run the model (defaults: GPU if any; float32 on CPU).
        on_token: streaming callback ``(document index, token id)``.
        no_repeat_ngram_size, repetition_penalty: public decoding constraints (0 and 1: off),
            computed from the released tokens only and applied alike to every row before the
            mechanism, so the guarantee is unchanged (docs/privacy.md, "Common ground").
        speculative, draft_tokens: verify up to ``draft_tokens`` tokens guessed from the public
            context (prompt lookup) in each forward pass; the rewrite has exactly the
            distribution, and the report exactly the guarantee, it has without (docs/privacy.md,
            "Speculative decoding"). False: one forward pass per token. None (default): on for
            one document, off for several, where a pass is as wide as the longest draft in
            the batch and was measured no faster on a CPU (docs/performance.md).
    """
    _check_params(method, alpha, delta, temperature, beta, epsilon)
    processor = PublicLogitsProcessor(repetition_penalty=repetition_penalty, no_repeat_ngram_size=no_repeat_ngram_size)
    if isinstance(texts, str):
        raise InvalidInputError("sanitize_batch takes a list of documents; use sanitize() for one")
    if spans is not None and len(spans) != len(texts):
        raise InvalidInputError(f"got {len(spans)} span lists for {len(texts)} documents; give one per document")
    if spans is None or any(s is None for s in spans):
        # Before the model: a tagger whose package is missing fails at once (MissingDependencyError).
        from tokendp.text.taggers import get_tagger

        tagger = get_tagger(tagger) if isinstance(tagger, str) else tagger
    backend = load_backend(model, device=device, dtype=dtype)
    tok, opts = backend.tokenizer, backend.options
    tpl = prompt_template(tok, options=opts, instruction=instruction, template=template)
    ph = placeholder_id(tok, options=opts, placeholder=placeholder)
    contexts = [build_contexts(t, _spans_of(t, None if spans is None else spans[i], tagger), tok,
                               template=tpl, placeholder=ph, groups=groups, on_overlap=on_overlap)
                for i, t in enumerate(texts)]
    all_names = {g.name for c in contexts for g in c.groups}
    _check_known_groups(beta, all_names, "beta")
    _check_known_groups(epsilon, all_names, "epsilon")
    limits = [_default_tokens(backend, c, max_new_tokens) for c in contexts]
    if alpha is None:
        targets = [] if method != "dp-fusion" or epsilon is None else [
            (e, len(c.groups), t) for c, t in zip(contexts, limits)
            for e in _per_group(epsilon, [g.name for g in c.groups], "epsilon") if e > 0]
        alpha = choose_alpha(targets, delta=delta) if targets else DEFAULT_ALPHA
    job = _Job(method, alpha, delta, contexts, limits, beta, epsilon)
    eos = backend.eos_token_ids
    outputs = generate(backend, job.sequences(), job.step, max_new_tokens=limits,
                       temperature=temperature, generator=make_generator(seed, backend.device),
                       eos_ids=eos, stop_strings=[*opts.get("stop", []), *stop],
                       charge=job.charge, on_token=on_token, logits_processor=processor,
                       drafter=_drafter(speculative, draft_tokens, len(texts), ph))
    decoding = {"no_repeat_ngram_size": no_repeat_ngram_size, "repetition_penalty": repetition_penalty}
    return [SanitizeResult(out.text, replace(job.report(i, out, backend.name), decoding=decoding))
            for i, out in enumerate(outputs)]


def _drafter(speculative: bool | None, draft_tokens: int, documents: int, placeholder: int) -> PromptLookup | None:
    """Prompt lookup on the public row (never guessing the placeholder), or None for one token
    per pass; ``speculative=None`` is on for one document only."""
    if not (speculative if speculative is not None else documents == 1):
        return None
    return PromptLookup(max_tokens=draft_tokens, exclude=frozenset({placeholder}))


class _Job:
    """One batch of documents under one method: rows, the bound mechanism, ledgers, reports."""

    def __init__(self, method: str, alpha: float, delta: float, contexts: list[DocumentContexts],
                 limits: list[int], beta: Budget, epsilon: Budget) -> None:
        self.method, self.alpha, self.delta = method, float(alpha), float(delta)
        self.contexts, self.limits = contexts, limits
        self.betas = [_betas(c, alpha=alpha, delta=delta, max_tokens=t, beta=beta, epsilon=epsilon)
                      if method == "dp-fusion" else None for c, t in zip(contexts, limits)]
        self.ledgers = [self._ledger(c, b, t) for c, b, t in zip(contexts, self.betas, limits)]
        self.mechanism = DPFusion(alpha=alpha) if method == "dp-fusion" else None
        self.events = [self.mechanism.event(betas={g.name: x for g, x in zip(c.groups, b)}) if b else {}
                       for c, b in zip(contexts, self.betas)]
        width = max(max(len(c.groups) for c in contexts), 1)
        self.beta_t = torch.zeros((len(contexts), width), dtype=torch.float32)  # (N, m_max)
        self.mask_t = torch.zeros((len(contexts), width), dtype=torch.bool)  # (N, m_max)
        for i, b in enumerate(self.betas):
            if b:
                self.beta_t[i, :len(b)] = torch.tensor(b)
                self.mask_t[i, :len(b)] = True
        self.padded = not bool(self.mask_t.all())  # else the mechanism needs no group mask

    def epsilons(self, i: int) -> list[float | None]:
        c, b = self.contexts[i], self.betas[i]
        if self.method == "original":
            return [None] * len(c.groups)
        if self.method == "public":
            return [0.0] * len(c.groups)
        return [dp_fusion_epsilon(alpha=self.alpha, beta=x, groups=len(c.groups), max_tokens=self.limits[i],
                                  delta=self.delta) for x in b]

    def _ledger(self, c: DocumentContexts, betas: list[float] | None, limit: int) -> Ledger | None:
        if betas is None or not c.groups:
            return None
        budgets = {g.name: dp_fusion_epsilon(alpha=self.alpha, beta=b, groups=len(c.groups), max_tokens=limit,
                                             delta=self.delta) for g, b in zip(c.groups, betas)}
        return Ledger(budgets, delta=self.delta)

    def sequences(self) -> list[RowSequence]:
        if self.method == "original":
            return [RowSequence.from_ids([c.original]) for c in self.contexts]
        if self.method == "public":
            return [RowSequence.from_ids([c.rows[0]]) for c in self.contexts]
        return [RowSequence.from_ids(c.rows) for c in self.contexts]

    def step(self, logits: torch.Tensor, docs: torch.Tensor, temperature: float) -> Any:
        """logits ``# (Na, R, V)`` -> the mechanism's step for the active documents ``docs``."""
        if self.mechanism is None:  # original / public: the one row's own distribution
            return MechanismStep(torch.log_softmax(logits[:, 0].float() / temperature, -1), {})  # (Na, V)
        d = docs.to(self.beta_t.device)
        betas = self.beta_t[d][:, :logits.shape[1] - 1].to(logits.device)  # (Na, m)
        mask = self.mask_t[d][:, :logits.shape[1] - 1].to(logits.device)  # (Na, m)
        return self.mechanism.step(logits, betas=betas, group_mask=mask if self.padded else None, temperature=temperature)

    def charge(self, docs: list[int]) -> None:
        """Charge each active document's ledger for one token, before it is sampled."""
        for i in docs:
            if self.ledgers[i] is not None:
                self.ledgers[i].charge(self.events[i])

    def report(self, i: int, out: Generated, model_name: str) -> SanitizeReport:
        c = self.contexts[i]
        eps = self.epsilons(i)
        betas = self.betas[i] or [0.0 if self.method == "public" else None] * len(c.groups)
        groups = tuple(GroupReport(g.name, g.n_spans, g.n_tokens, b, e)
                       for g, b, e in zip(c.groups, betas, eps))
        return SanitizeReport(self.method, model_name, self.alpha, self.delta, self.limits[i],
                              len(out.token_ids), out.stop_reason, _guarantee(self.method, self.limits[i]),
                              groups, self._diagnostics(c, out))

    def _diagnostics(self, c: DocumentContexts, out: Generated) -> dict[str, Any]:
        if self.method != "dp-fusion" or not out.diagnostics:
            return {}
        diag: dict[str, Any] = {"note": DIAGNOSTICS_NOTE}
        for key, name in (("lam", "mean_lambda"), ("divergence", "mean_divergence")):
            if key in out.diagnostics:
                diag[name] = {g.name: float(out.diagnostics[key][j]) for j, g in enumerate(c.groups)}
        return diag


def _guarantee(method: str, limit: int) -> str:
    if method == "original":
        return "none: the original document was read with every span visible"
    if method == "public":
        return "epsilon 0 for every group: only the public context (every span hidden) was read"
    return (f"(epsilon_i, delta)-DP per privacy group i, for documents that differ only in group i's "
            f"span tokens, over all {limit} possible generated tokens (DP-Fusion's RDP bound: "
            "tokendp.accounting.dp_fusion_epsilon, proof in docs/privacy.md)")


class _CallableModule(types.ModuleType):
    """``tokendp.sanitize`` is both this module and the function: importing the module as an
    attribute of the package (which Python does on first import) must not break the call."""

    def __call__(self, text: str, **kwargs: Any) -> SanitizeResult:
        return sanitize(text, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
