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
import itertools
import math
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch

from tokendp.accounting import Ledger, dp_fusion_beta, dp_fusion_epsilon, dp_fusion_rdp_per_token
from tokendp.accounting.mechanisms import DP_FUSION_ORDERS, dp_fusion_alpha
from tokendp.backends import HFBackend, RowSequence
from tokendp.drafts import PromptLookup
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.generation import (Generated, Pending, check_temperature, generate, generate_continuous, make_generator,
                                make_generators)
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
    draft_tokens: int = 8

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
               on_token: Callable[[int, int], None] | None = None,
               on_finish: Callable[[FusionJob, int, Generated], None] | None = None
               ) -> tuple[FusionJob, list[Generated]]:
    """Decode the prepared documents; the job (its ledgers and diagnostics) and the outputs.
    ``on_finish(job, i, output)``: document i's output as soon as it finishes."""
    backend, d, n = prepared.backend, prepared.decoding, len(prepared.documents)
    job = FusionJob(prepared.method, prepared.delta, prepared.documents)
    finished = None if on_finish is None else (lambda i, out: on_finish(job, i, out))
    outputs = generate(backend, job.sequences(), job.step, max_new_tokens=[doc.max_new_tokens for doc in job.documents],
                       temperature=d.temperature, generator=make_generators(seed, n), eos_ids=backend.eos_token_ids,
                       stop_strings=[*backend.options.get("stop", []), *d.stop], charge=job.charge, on_token=on_token,
                       logits_processor=d.processor(),
                       drafter=drafter(d.speculative, d.draft_tokens, n, prepared.placeholder), on_finish=finished)
    return job, outputs


def document_rows(method: str, context: DocumentContexts) -> RowSequence:
    """The rows a document decodes with: all of them (DP-Fusion), the original (every span
    visible) or the public row alone."""
    if method == "original":
        return RowSequence.from_ids([context.original])
    if method == "public":
        return RowSequence.from_ids([context.rows[0]])
    return RowSequence.from_ids(context.rows, public_prefix=context.public_prefix, public_length=context.public_length)


@dataclass(frozen=True)
class Chunk:
    """Prepared documents for :func:`run_fusion_stream`: the job, a key per document (returned
    with its output: a corpus id) and a seed per document (None: from the OS)."""

    prepared: PreparedFusion
    keys: tuple[Any, ...]
    seeds: tuple[int | None, ...]


@dataclass(frozen=True)
class Finished:
    """One document of :func:`run_fusion_stream` done: its key, the prepared job it came in and
    its prepared document (certificate included), its output, and its diagnostics as
    :meth:`FusionJob.diagnostics` gives them."""

    key: Any
    prepared: PreparedFusion
    document: PreparedDocument
    output: Generated
    diagnostics: dict[str, Any]


def length_order(method: str, documents: Sequence[PreparedDocument], bucket: int) -> list[int]:
    """The order in which a chunk's documents join a continuous batch: by bucket of their layout
    length (``RowSequence.layout_length // bucket``: public, the rows' token counts under
    DP-Fusion's adjacency), in input order within a bucket, so that rows that decode together
    need little padding. Never a function of the rows' tokens."""
    if isinstance(bucket, bool) or not isinstance(bucket, int) or bucket < 1:
        raise InvalidParameterError(f"bucket must be an integer >= 1, got {bucket!r}")
    lengths = [document_rows(method, d.context).layout_length for d in documents]
    return sorted(range(len(documents)), key=lambda i: (lengths[i] // bucket, i))


def run_fusion_stream(chunks: Iterable[Chunk], *, slots: int, bucket: int = 64,
                      on_token: Callable[[Any, int], None] | None = None) -> Iterator[Finished]:
    """Decode the documents of ``chunks`` with continuous batching
    (:func:`tokendp.generation.generate_continuous`): at most ``slots`` at once, a finished
    document's slot refilled at once; each :class:`Finished` as it comes (completion order).

    A chunk is prepared before any of its documents decodes (every certificate fixed, every
    check passed) and read only when the documents before it have all joined; within a chunk,
    documents join by :func:`length_order`. All chunks share one job's settings (the first's
    backend, method, delta and decoding). Each document gets a fresh ledger holding its own
    certificate when it takes a slot, charged once per released token before it is sampled,
    exactly as in :func:`run_fusion`, and its own stream ``make_generator(seed)``, so with a seed
    its output does not depend on its slot or its batchmates (up to float32 rounding,
    docs/design.md "Determinism"). No speculative decoding (one position per pass).
    """
    chunks = iter(chunks)
    first = next(chunks, None)
    if first is None:
        return
    settings, p = first.prepared.settings(), first.prepared
    job = FusionJob(p.method, p.delta, (), size=slots)
    seated: dict[int, int] = {}  # pending index -> slot
    documents: dict[int, tuple[Any, PreparedFusion, PreparedDocument]] = {}  # pending index -> ..., until done
    counter = itertools.count()

    def pending() -> Iterator[Pending]:
        for chunk in itertools.chain([first], chunks):
            if chunk.prepared.settings() != settings:
                raise ValueError("every chunk of a continuous run must share the first chunk's settings")
            if not (len(chunk.keys) == len(chunk.seeds) == len(chunk.prepared.documents)):
                raise ValueError("a chunk needs one key and one seed per document")
            docs = chunk.prepared.documents
            for i in length_order(p.method, docs, bucket):
                n = next(counter)
                documents[n] = (chunk.keys[i], chunk.prepared, docs[i])
                yield Pending(document_rows(p.method, docs[i].context), docs[i].max_new_tokens,
                              make_generator(chunk.seeds[i]), n)

    def admit(slot: int, doc: Pending) -> None:
        seated[doc.key] = slot
        job.admit(slot, documents[doc.key][2])

    stream = None if on_token is None else (lambda n, tok: on_token(documents[n][0], tok))
    d = p.decoding
    for n, out in generate_continuous(p.backend, pending(), job.step, slots=slots, admit=admit,
                                      temperature=d.temperature, eos_ids=p.backend.eos_token_ids,
                                      stop_strings=[*p.backend.options.get("stop", []), *d.stop],
                                      charge=job.charge, on_token=stream, logits_processor=d.processor()):
        key, prepared, doc = documents.pop(n)
        yield Finished(key, prepared, doc, out, job.diagnostics(seated.pop(n), out.diagnostics))


def check_fits_untagged(backend: HFBackend, text: str, around: int = 0) -> None:
    """Refuse a document that cannot fit the model's context (with ``around`` tokens of prompt)
    before a tagger reads it: tagging is slow, and the context bounds what it may be asked to read."""
    if not isinstance(text, str):
        raise InvalidInputError("a document is not a string")
    backend.check_fits(around + len(backend.tokenizer(text, add_special_tokens=False)["input_ids"]), 1)


# ---------------------------------------------------------------------------- the job
class FusionJob:
    """One batch of prepared documents under one method: rows, the bound mechanisms, ledgers.
    Under continuous batching (``size``: that many places, :meth:`admit` seats a document in
    one), place i holds the document decoding in slot i.

    Document i has its own Renyi order; the documents of one order share one
    :class:`~tokendp.mechanisms.DPFusion`, and a step runs each order's mechanism on its documents.
    """

    def __init__(self, method: str, delta: float, documents: Sequence[PreparedDocument], *,
                 size: int | None = None) -> None:
        self.method, self.delta = method, float(delta)
        n = len(documents) if size is None else max(size, len(documents))  # size: places (slots)
        self.documents: list[PreparedDocument | None] = [None] * n
        self.alphas: list[float] = [DEFAULT_ALPHA] * n
        self.contexts: list[DocumentContexts | None] = [None] * n
        self.ledgers: list[Ledger | None] = [None] * n
        self.events: list[dict] = [{}] * n
        # one mechanism per distinct order, in sorted order (admit adds the orders of later documents)
        orders = sorted({d.alpha for d in documents})
        self.mechanisms = [DPFusion(alpha=a) for a in orders] if method == "dp-fusion" else []
        self.order_of = torch.zeros(n, dtype=torch.long)  # (N,): index into mechanisms
        width = max([1, *(len(d.context.groups) for d in documents)])
        # float64, the accountant's beta exactly: a float32 beta can round up, above the charged cap
        self.beta_t = torch.zeros((n, width), dtype=torch.float64)  # (N, m_max)
        self.mask_t = torch.zeros((n, width), dtype=torch.bool)  # (N, m_max)
        self.padded = True
        for i, d in enumerate(documents):
            self.admit(i, d)

    def admit(self, i: int, doc: PreparedDocument) -> None:
        """Seat ``doc`` in place i (its slot, under continuous batching): its order, a fresh ledger
        holding its certificate, its event and betas. Nothing of the document it replaces stays."""
        self.documents[i], self.alphas[i], self.contexts[i] = doc, doc.alpha, doc.context
        self.ledgers[i] = self._ledger(doc)
        if self.method == "dp-fusion":
            known = [mech.alpha for mech in self.mechanisms]
            if doc.alpha not in known:
                self.mechanisms.append(DPFusion(alpha=doc.alpha))
                known.append(doc.alpha)
            self.order_of[i] = known.index(doc.alpha)
        self.events[i] = (self.mechanisms[int(self.order_of[i])].event(
            betas={g.name: x for g, x in zip(doc.context.groups, doc.betas)}) if doc.betas else {})
        m = len(doc.betas or ())
        if m > self.beta_t.shape[1]:
            self.beta_t = torch.nn.functional.pad(self.beta_t, (0, m - self.beta_t.shape[1]))
            self.mask_t = torch.nn.functional.pad(self.mask_t, (0, m - self.mask_t.shape[1]))
        self.beta_t[i], self.mask_t[i] = 0.0, False
        if doc.betas:
            self.beta_t[i, :m] = torch.tensor(doc.betas, dtype=torch.float64)
            self.mask_t[i, :m] = True
        self.padded = not bool(self.mask_t.all())  # else the mechanism needs no group mask
        self._tables: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}  # beta_t, mask_t per device
        self._parts: tuple[weakref.ref, list[tuple[int, torch.Tensor]]] | None = None  # see _partition

    def _ledger(self, doc: PreparedDocument) -> Ledger | None:
        """A document's ledger, holding its certified epsilon per group."""
        if doc.betas is None or not doc.groups:
            return None
        return Ledger({g.label: g.epsilon for g in doc.groups}, delta=self.delta)

    def sequences(self) -> list[RowSequence]:
        return [document_rows(self.method, c) for c in self.contexts]

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
        orders = [(0, docs)] if len(self.mechanisms) == 1 else self._partition(docs, logits.device)
        if len(orders) == 1:  # one order among the active documents: one call, nothing to gather
            return self.mechanisms[orders[0][0]].step(logits, betas=betas, group_mask=mask if self.padded else None,
                                                      temperature=temperature)
        parts = [(rows, self.mechanisms[k].step(logits[rows], betas=betas[rows], group_mask=mask[rows],
                                                temperature=temperature))
                 for k, rows in orders]
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
