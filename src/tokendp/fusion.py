"""The DP-Fusion job core that ``sanitize`` and ``generate`` share: budgets, order, ledgers, step.

A job hands over the contexts of its documents (:class:`~tokendp.text.contexts.DocumentContexts`:
row 0 public, row i showing only privacy group i) and T per document; :func:`prepare_documents`
fixes everything the guarantee depends on before the first token, from public parameters only
(:class:`PreparedDocument`):

    beta_i     given, or dp_fusion_beta(epsilon_i, alpha, m, T, delta) (the largest beta meeting it)
    epsilon_i  dp_fusion_epsilon(alpha, beta_i, groups=m, max_tokens=T, delta)

with m the number of groups of the document (docs/privacy.md, "DP-Fusion (document
sanitization)"). A :class:`PreparedFusion` holds the prepared documents with the backend and the
decoding settings: what a job will certify is known, and every parameter checked, before it
runs (the service reserves a request's budget from it: docs/service.md). :func:`run_fusion`
then builds a :class:`FusionJob` from the prepared documents, unchanged: one
:class:`~tokendp.accounting.Ledger` per document holding epsilon_i per group, the sequences for
the engine, the step (the bound :class:`~tokendp.mechanisms.DPFusion` over the active documents,
padded groups masked) and the charge (every group of every active document, before the token is
sampled).

``method="original"`` reads the row with everything visible (no privacy, for comparison);
``method="public"`` reads row 0 only, so the output does not depend on any group: epsilon 0.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch

from tokendp.accounting import Ledger, dp_fusion_beta, dp_fusion_epsilon, dp_fusion_rdp_per_token
from tokendp.accounting.mechanisms import DP_FUSION_ORDERS, dp_fusion_alpha
from tokendp.backends import HFBackend, RowSequence
from tokendp.drafts import PromptLookup
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.generation import Generated, check_temperature, generate, make_generators
from tokendp.logits_processors import PublicLogitsProcessor
from tokendp.mechanisms import DPFusion, MechanismStep
from tokendp.text.contexts import DocumentContexts, Placeholders
from tokendp.text.spans import Span

Method = Literal["dp-fusion", "original", "public"]
METHODS = ("dp-fusion", "original", "public")
Budget = float | Mapping[str, float] | None
DIAGNOSTICS_NOTE = ("data-dependent diagnostics, NOT part of the privacy guarantee; they are computed "
                    "from the private text, so do not publish them with the output")
ALPHA_GRID = DP_FUSION_ORDERS
DEFAULT_ALPHA = 2.0
MAX_ALPHA = 1024.0  # above this, alpha * beta and (alpha - 1) * divergence leave float64's useful range


@dataclass(frozen=True)
class TextResult:
    """Generated text (only what was generated) and its report (a dataclass with ``to_dict``):
    the release, which :meth:`to_dict` returns. ``diagnostics``: data-dependent quantities (the
    mean lambda and divergence per group), NOT covered by the guarantee, present only when the
    job was asked for them (``diagnostics=True``) and never part of the report or ``to_dict``."""

    text: str
    report: Any
    diagnostics: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "report": self.report.to_dict()}


@dataclass(frozen=True)
class GroupReport:
    """One privacy group of a document: its spans, hidden tokens, beta and certified epsilon."""

    label: str
    n_spans: int
    n_tokens: int
    beta: float | None
    epsilon: float | None


@dataclass(frozen=True)
class FusionReport:
    """What a data-protection officer needs: the parameters and the guarantee per group. It holds
    public quantities only: the parameters, the certificate, and what the released tokens
    determine (how many, why they stopped); data-dependent diagnostics are never in it
    (:class:`TextResult`, docs/privacy.md "Common ground")."""

    mechanism: str
    model: str
    alpha: float
    delta: float
    max_new_tokens: int
    tokens_generated: int
    stop_reason: str
    guarantee: str
    groups: tuple[GroupReport, ...]
    decoding: dict[str, Any]  # public decoding constraints applied to every row

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["groups"] = [asdict(g) for g in self.groups]
        return out


# ---------------------------------------------------------------------------- parameters
def check_params(method: str, alpha: float | None, delta: float, temperature: float,
                 beta: Budget, epsilon: Budget) -> None:
    """Validate a job's privacy parameters; messages name the parameter and what to do."""
    if method not in METHODS:
        raise InvalidParameterError(f"method must be one of {METHODS}, got {method!r}")
    if alpha is not None and not (_is_number(alpha) and 1 < alpha <= MAX_ALPHA):
        raise InvalidParameterError(f"alpha (the Renyi order) must be a number in (1, {MAX_ALPHA:g}], got {alpha!r}; "
                                    "typical choices are 2 to 10, or leave it out to let tokendp choose")
    if not (_is_number(delta) and 0 < delta < 1):
        raise InvalidParameterError(f"delta must be in (0, 1), for example 1e-5; got {delta!r}")
    check_temperature(temperature)
    if method == "dp-fusion":
        if (beta is None) == (epsilon is None):
            raise InvalidParameterError("DP-Fusion needs exactly one of beta= or epsilon= "
                                        "(epsilon per group, e.g. epsilon=8)")
        if temperature == 0:
            raise InvalidParameterError("temperature 0 (greedy decoding) gives no privacy guarantee; "
                                        "use temperature > 0, or method='original' for a greedy comparison")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def per_group(value: Budget, names: Sequence[str], what: str) -> list[float]:
    """A scalar for every group, or a mapping that names each group of the document (names of
    groups the document lacks are ignored: a corpus-wide mapping is checked per document, so a
    document's result never depends on its batch)."""
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


def group_betas(ctx: DocumentContexts, *, alpha: float, delta: float, max_tokens: int,
                beta: Budget, epsilon: Budget) -> list[float]:
    """beta_i per group: given, or the largest beta whose certified epsilon meets epsilon_i."""
    names, m = [g.name for g in ctx.groups], len(ctx.groups)
    if beta is not None:
        return per_group(beta, names, "beta")
    return [0.0 if e == 0 else dp_fusion_beta(epsilon=e, alpha=alpha, groups=m, max_tokens=max_tokens, delta=delta)
            for e in per_group(epsilon, names, "epsilon")]


def check_known_groups(value: Budget, all_names: set[str], what: str) -> None:
    """A mapping budget may name only groups that some document has (for jobs whose groups the
    caller sets, such as ``generate``'s untrusted chunks, where another name is a mistake)."""
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - all_names)
        if unknown:
            raise InvalidInputError(f"{what} names group(s) {unknown} that no document has; "
                                    f"the groups are {sorted(all_names)}")


def choose_alpha(targets: Sequence[tuple[float, int, int]], *, delta: float) -> float:
    """The Renyi order that allows the largest beta for the tightest of ``targets`` ((epsilon, m, T)
    per group and document), from public parameters only: :func:`tokendp.accounting.mechanisms.dp_fusion_alpha`
    over :data:`ALPHA_GRID` (the reasoning is there; ``tokendp account dp-fusion`` uses it too)."""
    return dp_fusion_alpha(targets, delta=delta, orders=ALPHA_GRID)


def resolve_alphas(method: str, alpha: float | None, contexts: Sequence[DocumentContexts], limits: Sequence[int],
                   epsilon: Budget, *, delta: float) -> list[float]:
    """The Renyi order of each document: ``alpha`` if given; else, for DP-Fusion with epsilon
    targets, :func:`choose_alpha` over the document's own targets (never its batchmates', so a
    document's guarantee and output do not depend on the batch); else 2."""
    if alpha is not None:
        return [float(alpha)] * len(contexts)
    if method != "dp-fusion" or epsilon is None:
        return [DEFAULT_ALPHA] * len(contexts)
    targets = [[(e, len(c.groups), t) for e in per_group(epsilon, [g.name for g in c.groups], "epsilon") if e > 0]
               for c, t in zip(contexts, limits)]
    return [choose_alpha(tg, delta=delta) if tg else DEFAULT_ALPHA for tg in targets]


def spans_of(text: str, spans: Sequence[Span | Mapping] | None, tagger: Any) -> list[Span]:
    """The spans given (``Span`` or ``{start, end, label}``), or ``tagger``'s when None."""
    if spans is None:
        return list(tagger.tag(text))
    try:
        return [s if isinstance(s, Span) else Span.from_dict(s) for s in spans]
    except (KeyError, TypeError, ValueError) as err:
        raise InvalidInputError(f"a span is malformed ({err}); spans are {{start, end, label}} "
                                "character offsets") from None


# ---------------------------------------------------------------------------- preparation
@dataclass(frozen=True)
class PreparedDocument:
    """One document ready to decode: its rows, T, the order alpha and, per group, beta_i and the
    certified epsilon_i, all fixed from public parameters before the first token."""

    context: DocumentContexts
    max_new_tokens: int
    alpha: float
    betas: tuple[float, ...] | None  # None: original or public, which run no mechanism
    groups: tuple[GroupReport, ...]  # the certificate, one entry per group of ``context``
    private_labels: tuple[str, ...] | None = None  # sanitize's chosen labels (None: every label)

    def rdp(self) -> tuple[float | None, ...]:
        """Per group, the Renyi divergence at order alpha that all T tokens may cost it:
        T r_i (:func:`~tokendp.accounting.dp_fusion_rdp_per_token`); 0 when no token reads the
        group (``public``), None when there is no guarantee (``original``)."""
        if self.betas is None:
            return tuple(None if g.epsilon is None else 0.0 for g in self.groups)
        m = len(self.betas)
        return tuple(self.max_new_tokens * dp_fusion_rdp_per_token(alpha=self.alpha, beta=b, groups=m)
                     for b in self.betas)


def prepare_documents(method: str, alpha: float | None, delta: float, contexts: Sequence[DocumentContexts],
                      limits: Sequence[int], *, beta: Budget, epsilon: Budget) -> list[PreparedDocument]:
    """Each document's order, betas and certificate (module docstring); every value the
    guarantee rests on is checked here, before anything runs."""
    alphas = resolve_alphas(method, alpha, contexts, limits, epsilon, delta=delta)
    return [_prepare(method, a, delta, c, t, beta, epsilon) for c, a, t in zip(contexts, alphas, limits)]


def _prepare(method: str, alpha: float, delta: float, ctx: DocumentContexts, t: int, beta: Budget,
             epsilon: Budget) -> PreparedDocument:
    if method != "dp-fusion":
        value = 0.0 if method == "public" else None
        reports = tuple(GroupReport(g.name, g.n_spans, g.n_tokens, value, value) for g in ctx.groups)
        return PreparedDocument(ctx, t, float(alpha), None, reports)
    betas = group_betas(ctx, alpha=alpha, delta=delta, max_tokens=t, beta=beta, epsilon=epsilon)
    m = len(ctx.groups)
    epsilons = [dp_fusion_epsilon(alpha=alpha, beta=b, groups=m, max_tokens=t, delta=delta) for b in betas]
    if not all(math.isfinite(e) for e in epsilons):
        raise InvalidParameterError(f"alpha {alpha:g} with these betas certifies no finite epsilon; "
                                    "lower beta or choose alpha between 1.25 and 64")
    reports = tuple(GroupReport(g.name, g.n_spans, g.n_tokens, b, e) for g, b, e in zip(ctx.groups, betas, epsilons))
    return PreparedDocument(ctx, t, float(alpha), tuple(betas), reports)


@dataclass(frozen=True)
class Decoding:
    """How a job decodes, the same for every document of a batch: public settings that do not
    change the certificate (temperature enters the mechanism's input, not its bound)."""

    temperature: float
    stop: tuple[str, ...] = ()
    no_repeat_ngram_size: int = 0
    repetition_penalty: float = 1.0
    speculative: bool | None = None
    draft_tokens: int = 4

    def __post_init__(self) -> None:
        self.processor()  # it validates its own two settings, before anything loads

    def processor(self) -> PublicLogitsProcessor:
        """The public decoding constraints as the decoding loop applies them to every row."""
        return PublicLogitsProcessor(repetition_penalty=self.repetition_penalty,
                                     no_repeat_ngram_size=self.no_repeat_ngram_size)

    def constraints(self) -> dict[str, Any]:
        """The public decoding settings, as the report lists them: the temperature (whose default
        differs between sanitize and generate, so every report states it) and the constraints."""
        return {"temperature": self.temperature, "no_repeat_ngram_size": self.no_repeat_ngram_size,
                "repetition_penalty": self.repetition_penalty}


@dataclass(frozen=True)
class PreparedFusion:
    """A DP-Fusion job that has passed every check and whose certificate is fixed: run it with
    :func:`run_fusion`. Jobs with equal :meth:`settings` can run as one batch (:meth:`concat`)."""

    method: str
    delta: float
    backend: HFBackend
    documents: tuple[PreparedDocument, ...]
    decoding: Decoding
    placeholder: int | Placeholders  # the token(s) that hide a private token (never guessed by the drafter)

    def settings(self) -> tuple:
        """Everything but the documents: equal settings may share a batch."""
        return (type(self), self.method, self.delta, id(self.backend), self.decoding, self.placeholder)

    @classmethod
    def concat(cls, jobs: Sequence[PreparedFusion]) -> PreparedFusion:
        """One job over the documents of ``jobs`` (equal settings), each document unchanged."""
        if len({j.settings() for j in jobs}) != 1:
            raise ValueError("only prepared jobs with equal settings can share a batch")
        return dataclasses.replace(jobs[0], documents=tuple(d for j in jobs for d in j.documents))


def run_fusion(prepared: PreparedFusion, *, seed: int | Sequence[int] | None = None,
               on_token: Callable[[int, int], None] | None = None) -> tuple[FusionJob, list[Generated]]:
    """Decode the prepared documents; the job (its ledgers and diagnostics) and the outputs."""
    backend, d, n = prepared.backend, prepared.decoding, len(prepared.documents)
    job = FusionJob(prepared.method, prepared.delta, prepared.documents)
    outputs = generate(backend, job.sequences(), job.step, max_new_tokens=[doc.max_new_tokens for doc in job.documents],
                       temperature=d.temperature, generator=make_generators(seed, n), eos_ids=backend.eos_token_ids,
                       stop_strings=[*backend.options.get("stop", []), *d.stop], charge=job.charge, on_token=on_token,
                       logits_processor=d.processor(),
                       drafter=drafter(d.speculative, d.draft_tokens, n, prepared.placeholder))
    return job, outputs


def check_fits_untagged(backend: HFBackend, text: str, around: int = 0) -> None:
    """Refuse a document that cannot fit the model's context (with ``around`` tokens of prompt)
    before a tagger reads it: tagging is slow, and the context bounds what it may be asked to read."""
    if not isinstance(text, str):
        raise InvalidInputError("a document is not a string")
    backend.check_fits(around + len(backend.tokenizer(text, add_special_tokens=False)["input_ids"]), 1)


# ---------------------------------------------------------------------------- the job
class FusionJob:
    """One batch of prepared documents under one method: rows, the bound mechanisms, ledgers.

    Document i has its own Renyi order; the documents of one order share one
    :class:`~tokendp.mechanisms.DPFusion`, and a step runs each order's mechanism on its documents.
    """

    def __init__(self, method: str, delta: float, documents: Sequence[PreparedDocument]) -> None:
        self.method, self.delta, self.documents = method, float(delta), tuple(documents)
        self.alphas = [d.alpha for d in self.documents]
        self.contexts = [d.context for d in self.documents]
        self.ledgers = [self._ledger(d) for d in self.documents]
        orders = sorted(set(self.alphas))
        self.mechanisms = [DPFusion(alpha=a) for a in orders] if method == "dp-fusion" else []
        self.order_of = torch.tensor([orders.index(a) for a in self.alphas])  # (N,): index into mechanisms
        self.events = [self.mechanisms[int(k)].event(betas={g.name: x for g, x in zip(d.context.groups, d.betas)})
                       if d.betas else {} for d, k in zip(self.documents, self.order_of)]
        width = max(max(len(c.groups) for c in self.contexts), 1)
        # float64, the accountant's beta exactly: a float32 beta can round up, above the charged cap
        self.beta_t = torch.zeros((len(self.documents), width), dtype=torch.float64)  # (N, m_max)
        self.mask_t = torch.zeros((len(self.documents), width), dtype=torch.bool)  # (N, m_max)
        for i, d in enumerate(self.documents):
            if d.betas:
                self.beta_t[i, :len(d.betas)] = torch.tensor(d.betas, dtype=torch.float64)
                self.mask_t[i, :len(d.betas)] = True
        self.padded = not bool(self.mask_t.all())  # else the mechanism needs no group mask
        self._tables: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}  # beta_t, mask_t per device
        self._parts: tuple[weakref.ref, list[tuple[int, torch.Tensor]]] | None = None  # see _partition

    def _ledger(self, doc: PreparedDocument) -> Ledger | None:
        """A document's ledger, holding its certified epsilon per group."""
        if doc.betas is None or not doc.groups:
            return None
        return Ledger({g.label: g.epsilon for g in doc.groups}, delta=self.delta)

    def sequences(self) -> list[RowSequence]:
        if self.method == "original":
            return [RowSequence.from_ids([c.original]) for c in self.contexts]
        if self.method == "public":
            return [RowSequence.from_ids([c.rows[0]]) for c in self.contexts]
        return [RowSequence.from_ids(c.rows, public_prefix=c.public_prefix, public_length=c.public_length)
                for c in self.contexts]

    def step(self, logits: torch.Tensor, docs: torch.Tensor, temperature: float) -> Any:
        """logits ``# (Na, R, V)`` -> the mechanism's step for the active documents ``docs``."""
        if not self.mechanisms:  # original / public: the one row's own distribution
            return MechanismStep(torch.log_softmax(logits[:, 0].float() / temperature, -1), {})  # (Na, V)
        if logits.shape[1] == 1:  # only documents without groups: one masked stand-in row, so p_pub
            logits = logits.expand(-1, 2, -1)  # comes out of the mechanism exactly as in a wider batch
        if docs.device not in self._tables:  # copied once per device, not per step (no host read)
            self._tables[docs.device] = (self.beta_t.to(docs.device), self.mask_t.to(docs.device))
        beta_t, mask_t = self._tables[docs.device]
        betas = beta_t[docs][:, :logits.shape[1] - 1].to(logits.device)  # (Na, m)
        mask = mask_t[docs][:, :logits.shape[1] - 1].to(logits.device)  # (Na, m)
        if len(self.mechanisms) == 1:
            return self.mechanisms[0].step(logits, betas=betas, group_mask=mask if self.padded else None,
                                           temperature=temperature)
        parts = [(rows, self.mechanisms[k].step(logits[rows], betas=betas[rows], group_mask=mask[rows],
                                                temperature=temperature))
                 for k, rows in self._partition(docs, logits.device)]
        return _gather_steps(parts, len(docs))

    def _partition(self, docs: torch.Tensor, device: torch.device) -> list[tuple[int, torch.Tensor]]:
        """(mechanism index, positions in ``docs`` # (n_k,) on ``device``) for each order among
        the active documents. Read from the device once per ``docs`` tensor: the decoding loop
        passes the same tensor while the set of active documents stays (held by a weak
        reference, so a new tensor is never mistaken for it)."""
        if self._parts is None or self._parts[0]() is not docs:
            order = self.order_of[docs.cpu()]  # (Na,): a host read, once per set of documents
            self._parts = (weakref.ref(docs), [(k, (order == k).nonzero().flatten().to(device))
                                               for k in order.unique().tolist()])
        return self._parts[1]

    def charge(self, docs: list[int]) -> None:
        """Charge each active document's ledger for one token, before it is sampled."""
        for i in docs:
            if self.ledgers[i] is not None:
                self.ledgers[i].charge(self.events[i])

    def diagnostics(self, i: int, sums: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """Mean lambda and divergence per group of document i, labelled as not a guarantee (for
        :attr:`TextResult.diagnostics`, only when asked for)."""
        if self.method != "dp-fusion" or not sums:
            return {}
        c = self.contexts[i]
        diag: dict[str, Any] = {"note": DIAGNOSTICS_NOTE}
        for key, name in (("lam", "mean_lambda"), ("divergence", "mean_divergence")):
            if key in sums:
                diag[name] = {g.name: float(sums[key][j]) for j, g in enumerate(c.groups)}
        return diag


def _gather_steps(parts: Sequence[tuple[torch.Tensor, MechanismStep]], n: int) -> MechanismStep:
    """One step for ``n`` documents from steps on disjoint subsets ``rows # (n_k,)`` of them."""
    first = parts[0][1]
    logprobs = first.logprobs.new_empty((n, first.logprobs.shape[-1]))  # (Na, V)
    diagnostics = {key: value.new_zeros((n, *value.shape[1:])) for key, value in first.diagnostics.items()}
    for rows, part in parts:
        logprobs[rows] = part.logprobs
        for key, value in part.diagnostics.items():
            diagnostics[key][rows] = value
    return MechanismStep(logprobs, diagnostics)


def drafter(speculative: bool | None, draft_tokens: int, documents: int,
            placeholder: int | Placeholders) -> PromptLookup | None:
    """Prompt lookup on the public row (never guessing a placeholder, typed ones included), or
    None for one token per pass; ``speculative=None`` is on for one document only (docs/performance.md)."""
    if not (speculative if speculative is not None else documents == 1):
        return None
    exclude = placeholder.ids if isinstance(placeholder, Placeholders) else frozenset({placeholder})
    return PromptLookup(max_tokens=draft_tokens, exclude=exclude)
