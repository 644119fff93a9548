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
from typing import Any

import torch

from tokendp.accounting import (Ledger, dp_fusion_beta, dp_fusion_epsilon, dp_fusion_filter_alpha,
                                dp_fusion_filter_budget, dp_fusion_filter_epsilon, dp_fusion_filter_max_lam,
                                dp_fusion_filter_pace, dp_fusion_rdp_per_token)
from tokendp.accounting.mechanisms import DP_FUSION_ORDERS, dp_fusion_alpha
from tokendp.backends import HFBackend, RowSequence
from tokendp.drafts import PromptLookup
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.generation import (Generated, Pending, generate, generate_continuous, make_generator,
                                make_generators)
from tokendp.logits_processors import PublicLogitsProcessor
from tokendp.params import DEFAULT_PACE, Accounting, Budget, check_flag, per_group
from tokendp.mechanisms import DPFusion, DPFusionFilter, FilterStep, MechanismStep, RenyiFilter
from tokendp.long_documents import LongDocument, run_passages
from tokendp.text.contexts import DocumentContexts, HistoryTemplate, Placeholders, placeholder_runs
from tokendp.text.layout import clean
from tokendp.text.presidio_spans import is_recognizer_result, presidio_spans
from tokendp.text.spans import Span

DIAGNOSTICS_NOTE = ("data-dependent diagnostics, NOT part of the privacy guarantee; they are computed "
                    "from the private text, so do not publish them with the output")
ALPHA_GRID = DP_FUSION_ORDERS
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
DEFAULT_ALPHA = 2.0


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
    """One privacy group of a document: its spans, hidden tokens, beta, certified epsilon (rounded
    up) and the epsilon asked for (``target``, None when beta was given)."""

    label: str
    n_spans: int
    n_tokens: int
    beta: float | None
    epsilon: float | None
    target: float | None = None
    budget: float | None = None  # the filter accounting's RDP budget B_i at alpha (None: fixed accounting)

    def to_dict(self) -> dict[str, Any]:
        """As the report shows it: ``epsilon`` is the target when the certificate meets it (the
        exact certified value can sit a rounding below: 7.9999999999999325 for 8), else the
        certified value; ``epsilon_certified`` is always the exact certified value."""
        met = self.target is not None and self.epsilon is not None and self.epsilon <= self.target
        out = {"label": self.label, "n_spans": self.n_spans, "n_tokens": self.n_tokens, "beta": self.beta,
               "epsilon": self.target if met else self.epsilon, "epsilon_certified": self.epsilon}
        return out if self.budget is None else {**out, "budget": self.budget}


@dataclass(frozen=True)
class FusionReport:
    """What a data-protection officer needs: the parameters and the guarantee per group. It holds
    public quantities only: the parameters, the certificate, and what the released tokens
    determine (how many, why they stopped); data-dependent diagnostics are never in it
    (:class:`TextResult`, docs/privacy.md "Common ground")."""

    mechanism: str
    model: str
    alpha: float | None  # None: no mechanism ran (original, public)
    delta: float
    max_new_tokens: int
    tokens_generated: int
    stop_reason: str
    guarantee: str
    groups: tuple[GroupReport, ...]
    decoding: dict[str, Any]  # public decoding constraints applied to every row
    accounting: str = "fixed"  # DP-Fusion's accounting: "fixed" or "filter" (docs/privacy.md)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["groups"] = [g.to_dict() for g in self.groups]
        return out


# ---------------------------------------------------------------------------- parameters
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
                   epsilon: Budget, *, delta: float, accounting: Accounting = "fixed") -> list[float]:
    """The Renyi order of each document: ``alpha`` if given; else, for DP-Fusion with epsilon
    targets, :func:`choose_alpha` over the document's own targets (never its batchmates', so a
    document's guarantee and output do not depend on the batch), or under the filter
    :func:`~tokendp.accounting.dp_fusion_filter_alpha` for its smallest target; else 2."""
    if alpha is not None:
        return [float(alpha)] * len(contexts)
    if method != "dp-fusion" or epsilon is None:
        return [DEFAULT_ALPHA] * len(contexts)
    targets = [[(e, len(c.groups), t) for e in per_group(epsilon, [g.name for g in c.groups], "epsilon") if e > 0]
               for c, t in zip(contexts, limits)]
    if accounting == "filter":
        return [dp_fusion_filter_alpha(epsilon=min(e for e, _, _ in tg), delta=delta) if tg else DEFAULT_ALPHA
                for tg in targets]
    return [choose_alpha(tg, delta=delta) if tg else DEFAULT_ALPHA for tg in targets]


def spans_of(text: str, spans: Sequence[Span | Mapping] | None, tagger: Any) -> tuple[str, list[Span]]:
    """The text as the model reads it (:func:`tokendp.text.layout.clean`: no BOM, LF line ends)
    and its spans: the spans given (``Span`` or ``{start, end, label}``, offsets into ``text``
    exactly as given; or Presidio's ``RecognizerResult``s, :mod:`tokendp.text.presidio_spans`)
    mapped onto it, or ``tagger``'s on it when None."""
    body, layout = clean(text)
    if spans is None:
        return body, list(tagger.tag(body))
    if spans and all(is_recognizer_result(s) for s in spans):
        return body, layout.to_clean(presidio_spans(spans, text))
    try:
        given = [s if isinstance(s, Span) else Span.from_dict(s) for s in spans]
    except (KeyError, TypeError, ValueError) as err:
        raise InvalidInputError(f"a span is malformed ({err}); spans are {{start, end, label}} "
                                "character offsets") from None
    return body, layout.to_clean(given)


# ---------------------------------------------------------------------------- preparation
@dataclass(frozen=True)
class PreparedDocument:
    """One document ready to decode: its rows, T, the order alpha and, per group, beta_i and the
    certified epsilon_i, all fixed from public parameters before the first token. Under the
    filter accounting beta_i is the per-step pacing cap over alpha and ``budgets`` holds B_i."""

    context: DocumentContexts
    max_new_tokens: int
    alpha: float
    betas: tuple[float, ...] | None  # None: original or public, which run no mechanism
    groups: tuple[GroupReport, ...]  # the certificate, one entry per group of ``context``
    budgets: tuple[float, ...] | None = None  # the filter's B_i per group (None: the fixed accounting)
    # The public B_i the filter's weight ceilings come from (None: ``budgets``). A vault release runs
    # on its units' reservations (data-dependent) with the ceilings of its planned B_rel, so an
    # exhausted unit's row costs what a live one's does (docs/privacy.md, the vault's timing).
    ceiling_budgets: tuple[float, ...] | None = None
    long: LongDocument | None = None  # its passages, when it is rewritten passage by passage
    private_labels: tuple[str, ...] | None = None  # sanitize's chosen labels (None: every label not kept)
    kept_labels: Mapping[str, int] = dataclasses.field(default_factory=dict)  # label -> spans kept as plain text
    spans_source: str = "given"  # "given", or the tagger that found the spans

    def rdp(self) -> tuple[float | None, ...]:
        """Per group, the Renyi divergence at order alpha that all T tokens may cost it:
        T r_i (:func:`~tokendp.accounting.dp_fusion_rdp_per_token`), or the filter's budget B_i;
        0 when no token reads the group (``public``), None when there is no guarantee (``original``)."""
        if self.betas is None:
            return tuple(None if g.epsilon is None else 0.0 for g in self.groups)
        if self.budgets is not None:
            return self.budgets
        m = len(self.betas)
        return tuple(self.max_new_tokens * dp_fusion_rdp_per_token(alpha=self.alpha, beta=b, groups=m)
                     for b in self.betas)


def prepare_documents(method: str, alpha: float | None, delta: float, contexts: Sequence[DocumentContexts],
                      limits: Sequence[int], *, beta: Budget, epsilon: Budget, accounting: Accounting = "fixed",
                      pace: float = DEFAULT_PACE) -> list[PreparedDocument]:
    """Each document's order, betas and certificate (module docstring); every value the
    guarantee rests on is checked here, before anything runs. ``accounting="filter"``: each
    group's budget B_i from (epsilon_i, delta, alpha) and a pacing cap from ``pace``, B_i and the
    group's hidden tokens (:func:`_prepare_filter`)."""
    alphas = resolve_alphas(method, alpha, contexts, limits, epsilon, delta=delta, accounting=accounting)
    if accounting == "filter" and method == "dp-fusion":
        return [_prepare_filter(a, delta, c, t, epsilon, pace) for c, a, t in zip(contexts, alphas, limits)]
    return [_prepare(method, a, delta, c, t, beta, epsilon) for c, a, t in zip(contexts, alphas, limits)]


def _prepare_filter(alpha: float, delta: float, ctx: DocumentContexts, t: int, epsilon: Budget,
                    pace: float) -> PreparedDocument:
    """A document under the per-group Renyi filter (docs/privacy.md, "DP-Fusion with a per-group
    Renyi filter"): B_i = dp_fusion_filter_budget(epsilon_i, alpha, delta), its certificate
    dp_fusion_filter_epsilon(B_i) (at most epsilon_i, whatever the length), and the public
    per-step cap alpha * beta_i = :func:`~tokendp.accounting.dp_fusion_filter_pace`: one token
    may spend at most ``pace`` B_i / n_i, n_i the group's hidden tokens."""
    names = [g.name for g in ctx.groups]
    targets = per_group(epsilon, names, "epsilon")
    m = len(ctx.groups)
    budgets = [0.0 if e == 0 else dp_fusion_filter_budget(epsilon=e, alpha=alpha, delta=delta) for e in targets]
    betas = [dp_fusion_filter_pace(budget=B, tokens=max(g.n_tokens, 1), pace=pace, groups=m, alpha=alpha) / alpha
             for g, B in zip(ctx.groups, budgets)]
    reports = tuple(GroupReport(g.name, g.n_spans, g.n_tokens, b, dp_fusion_filter_epsilon(budget=B, alpha=alpha,
                                                                                           delta=delta), e, B)
                    for g, b, B, e in zip(ctx.groups, betas, budgets, targets))
    return PreparedDocument(ctx, t, float(alpha), tuple(betas), reports, budgets=tuple(budgets))


def reported_alpha(method: str, doc: PreparedDocument) -> float | None:
    """The order a report names: the document's under DP-Fusion, None where no mechanism ran."""
    return doc.alpha if method == "dp-fusion" else None


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
    names = [g.name for g in ctx.groups]
    targets = [None] * len(names) if epsilon is None else per_group(epsilon, names, "epsilon")
    reports = tuple(GroupReport(g.name, g.n_spans, g.n_tokens, b, e, t)
                    for g, b, e, t in zip(ctx.groups, betas, epsilons, targets))
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
    stop_at_repeated_line: bool = False

    def __post_init__(self) -> None:
        self.processor()  # it validates its own two settings, before anything loads
        check_flag("stop_at_repeated_line", self.stop_at_repeated_line)

    def processor(self, suppress: tuple[int, ...] = ()) -> PublicLogitsProcessor:
        """The public decoding constraints as the decoding loop applies them to every row;
        ``suppress``: ids never released (the placeholder's runs)."""
        return PublicLogitsProcessor(repetition_penalty=self.repetition_penalty,
                                     no_repeat_ngram_size=self.no_repeat_ngram_size, suppress=suppress)

    def constraints(self) -> dict[str, Any]:
        """The public decoding settings, as the report lists them: the temperature (whose default
        differs between sanitize and generate, so every report states it) and the constraints."""
        return {"temperature": self.temperature, "no_repeat_ngram_size": self.no_repeat_ngram_size,
                "repetition_penalty": self.repetition_penalty, "stop_at_repeated_line": self.stop_at_repeated_line}


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
    accounting: Accounting = "fixed"
    history: HistoryTemplate | None = None  # the prompt of a long document's later passages

    def settings(self) -> tuple:
        """Everything but the documents: equal settings may share a batch."""
        return (type(self), self.method, self.delta, id(self.backend), self.decoding, self.placeholder,
                self.accounting)

    def processor(self) -> PublicLogitsProcessor:
        """The decoding's public constraints, never releasing a run of the default placeholder."""
        default = self.placeholder.default if isinstance(self.placeholder, Placeholders) else int(self.placeholder)
        return self.decoding.processor(placeholder_runs(self.backend.tokenizer, default))

    @classmethod
    def concat(cls, jobs: Sequence[PreparedFusion]) -> PreparedFusion:
        """One job over the documents of ``jobs`` (equal settings), each document unchanged."""
        if len({j.settings() for j in jobs}) != 1:
            raise ValueError("only prepared jobs with equal settings can share a batch")
        return dataclasses.replace(jobs[0], documents=tuple(d for j in jobs for d in j.documents))


def run_fusion_spending(prepared: PreparedFusion, *, seed: int | Sequence[int] | None = None,
                        on_token: Callable[[int, int], None] | None = None
                        ) -> tuple[FusionJob, list[Generated], list[tuple[float, ...]]]:
    """:func:`run_fusion` under the filter accounting, with what each document's filter left of
    each group's budget (the ledgers as they end, at or below the budget minus the exact
    charges). Data-dependent: for a durable ledger (the vault's), never part of a release."""
    if prepared.accounting != "filter" or prepared.method != "dp-fusion":
        raise InvalidParameterError("spending is reported for DP-Fusion jobs under the filter accounting only")
    job, outputs = run_fusion(prepared, seed=seed, on_token=on_token)
    assert job.filter is not None
    left = [tuple(job.filter.remaining[i, :len(d.context.groups)].cpu().tolist())
            for i, d in enumerate(prepared.documents)]
    return job, outputs, left


def run_fusion(prepared: PreparedFusion, *, seed: int | Sequence[int] | None = None,
               on_token: Callable[[int, int], None] | None = None,
               on_finish: Callable[[FusionJob, int, Generated], None] | None = None,
               on_passage: Callable[[int, int, int], None] | None = None) -> tuple[FusionJob, list[Generated]]:
    """Decode the prepared documents; the job (its ledgers and diagnostics) and the outputs.
    ``on_finish(job, i, output)``: document i's output as soon as it finishes. ``on_passage(i,
    k, n)``: a long document i begins its passage k of n."""
    backend, d, n = prepared.backend, prepared.decoding, len(prepared.documents)
    decode = dict(temperature=d.temperature, eos_ids=backend.eos_token_ids,
                  stop_strings=[*backend.options.get("stop", []), *d.stop], logits_processor=prepared.processor(),
                  stop_at_repeated_line=d.stop_at_repeated_line,
                  drafter=drafter(d.speculative, d.draft_tokens, n, prepared.placeholder))
    if any(doc.long is not None for doc in prepared.documents):  # documents of any length: in passages
        assert prepared.history is not None
        job, outputs = run_passages(lambda docs: FusionJob(prepared.method, prepared.delta, docs,
                                                           accounting=prepared.accounting),
                                    prepared.documents, backend=backend, history=prepared.history,
                                    seed=seed, decode=decode, on_token=on_token, on_passage=on_passage)
        for i, out in enumerate(outputs if on_finish is not None else ()):
            on_finish(job, i, out)
        return job, outputs
    job = FusionJob(prepared.method, prepared.delta, prepared.documents, accounting=prepared.accounting)
    finished = None if on_finish is None else (lambda i, out: on_finish(job, i, out))
    outputs = generate(backend, job.sequences(), job.step, max_new_tokens=[doc.max_new_tokens for doc in job.documents],
                       generator=make_generators(seed, n), charge=job.charge, on_token=on_token, on_finish=finished,
                       **decode)
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
    docs/design.md "Determinism"). No speculative decoding (one position per pass). A document
    long enough for passages (:mod:`tokendp.long_documents`) is decoded alone, passage by passage,
    when its turn to join comes, and yielded with the next finished document.
    """
    chunks = iter(chunks)
    first = next(chunks, None)
    if first is None:
        return
    settings, p = first.prepared.settings(), first.prepared
    job = FusionJob(p.method, p.delta, (), size=slots, accounting=p.accounting)
    seated: dict[int, int] = {}  # pending index -> slot
    documents: dict[int, tuple[Any, PreparedFusion, PreparedDocument]] = {}  # pending index -> ..., until done
    counter = itertools.count()
    alone: list[Finished] = []  # long documents, decoded in passages, waiting to be yielded

    def pending() -> Iterator[Pending]:
        for chunk in itertools.chain([first], chunks):
            if chunk.prepared.settings() != settings:
                raise ValueError("every chunk of a continuous run must share the first chunk's settings")
            if not (len(chunk.keys) == len(chunk.seeds) == len(chunk.prepared.documents)):
                raise ValueError("a chunk needs one key and one seed per document")
            docs = chunk.prepared.documents
            for i in length_order(p.method, docs, bucket):
                if docs[i].long is not None:
                    one = dataclasses.replace(chunk.prepared, documents=(docs[i],))
                    own_job, (out,) = run_fusion(one, seed=[chunk.seeds[i]], on_token=None if on_token is None else
                                                 (lambda _, tok, key=chunk.keys[i]: on_token(key, tok)))
                    alone.append(Finished(chunk.keys[i], chunk.prepared, docs[i], out,
                                          own_job.diagnostics(0, out.diagnostics)))
                    continue
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
                                      charge=job.charge, on_token=stream, logits_processor=p.processor(),
                                      stop_at_repeated_line=d.stop_at_repeated_line):
        key, prepared, doc = documents.pop(n)
        yield Finished(key, prepared, doc, out, job.diagnostics(seated.pop(n), out.diagnostics))
        while alone:
            yield alone.pop(0)
    while alone:
        yield alone.pop(0)


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

    Document i has its own Renyi order; the documents of one order share one mechanism, and a
    step runs each order's mechanism on its documents. ``accounting="fixed"``: the mechanism is
    :class:`~tokendp.mechanisms.DPFusion` and each document's :class:`~tokendp.accounting.Ledger`
    is charged its certified per-token event. ``"filter"``: the mechanism is
    :class:`~tokendp.mechanisms.DPFusionFilter`, and a :class:`~tokendp.mechanisms.RenyiFilter`
    holds each place's remaining budget per group; each step's charges, computed at the step's
    own prefix, are spent in :meth:`charge`, once per released token, before it is sampled.
    """

    def __init__(self, method: str, delta: float, documents: Sequence[PreparedDocument], *,
                 size: int | None = None, accounting: Accounting = "fixed") -> None:
        self.method, self.delta = method, float(delta)
        filtered = accounting == "filter" and method == "dp-fusion"
        n = len(documents) if size is None else max(size, len(documents))  # size: places (slots)
        self.documents: list[PreparedDocument | None] = [None] * n
        self.alphas: list[float] = [DEFAULT_ALPHA] * n
        self.contexts: list[DocumentContexts | None] = [None] * n
        self.ledgers: list[Ledger | None] = [None] * n
        self.events: list[dict] = [{}] * n
        # one mechanism per distinct order, in sorted order (admit adds the orders of later documents)
        self.mechanisms: list[DPFusion | DPFusionFilter] = []
        self.order_of = torch.zeros(n, dtype=torch.long)  # (N,): index into mechanisms
        width = max([1, *(len(d.context.groups) for d in documents)])
        # float64, the accountant's beta exactly: a float32 beta can round up, above the charged cap
        self.beta_t = torch.zeros((n, width), dtype=torch.float64)  # (N, m_max)
        self.mask_t = torch.zeros((n, width), dtype=torch.bool)  # (N, m_max)
        self.lam_t = torch.ones((n, width), dtype=torch.float64)  # (N, m_max): the filter's weight ceilings
        self.filter = RenyiFilter(torch.zeros((n, width), dtype=torch.float64)) if filtered else None
        self._spending: tuple[torch.Tensor, torch.Tensor] | None = None  # (docs, charges) of the last step
        self.padded = True
        for a in sorted({d.alpha for d in documents}):
            self._mechanism(a)
        for i, d in enumerate(documents):
            self.admit(i, d)

    @property
    def filtered(self) -> bool:
        """Whether this job spends budgets through the per-group Renyi filter."""
        return self.filter is not None

    def _mechanism(self, alpha: float) -> int:
        """The index of the mechanism at order ``alpha`` (made on first use)."""
        known = [mech.alpha for mech in self.mechanisms]
        if alpha not in known:
            self.mechanisms.append(DPFusionFilter(alpha=alpha) if self.filtered else DPFusion(alpha=alpha))
            known.append(alpha)
        return known.index(alpha)

    def admit(self, i: int, doc: PreparedDocument) -> None:
        """Seat ``doc`` in place i (its slot, under continuous batching): its order, a fresh ledger
        (or filter row) holding its certificate, its event and betas. Nothing of the document it
        replaces stays."""
        self.documents[i], self.alphas[i], self.contexts[i] = doc, doc.alpha, doc.context
        self.ledgers[i] = None if self.filtered else self._ledger(doc)
        if self.method == "dp-fusion":
            self.order_of[i] = self._mechanism(doc.alpha)
        self.events[i] = (self.mechanisms[int(self.order_of[i])].event(
            betas={g.name: x for g, x in zip(doc.context.groups, doc.betas)}) if doc.betas and not self.filtered
            else {})
        m = len(doc.betas or ())
        if m > self.beta_t.shape[1]:
            self.beta_t = torch.nn.functional.pad(self.beta_t, (0, m - self.beta_t.shape[1]))
            self.mask_t = torch.nn.functional.pad(self.mask_t, (0, m - self.mask_t.shape[1]))
            self.lam_t = torch.nn.functional.pad(self.lam_t, (0, m - self.lam_t.shape[1]), value=1.0)
        self.beta_t[i], self.mask_t[i], self.lam_t[i] = 0.0, False, 1.0
        if doc.betas:
            # the filter's pace is a divergence cap: alpha * beta_i, like the fixed accounting's cap
            scale = doc.alpha if self.filtered else 1.0
            self.beta_t[i, :m] = torch.tensor(doc.betas, dtype=torch.float64) * scale
            self.mask_t[i, :m] = True
        if self.filter is not None:
            self.filter.admit(i, doc.budgets or ())
            for j, budget in enumerate(doc.ceiling_budgets or doc.budgets or ()):  # public: the filter's step 2
                self.lam_t[i, j] = dp_fusion_filter_max_lam(budget=budget, alpha=doc.alpha)
        self.padded = not bool(self.mask_t.all())  # else the mechanism needs no group mask
        self._tables: dict[torch.device, tuple[torch.Tensor, ...]] = {}  # beta_t, mask_t, lam_t per device
        self._parts: tuple[weakref.ref, list[tuple[int, torch.Tensor]]] | None = None  # see _partition

    def _ledger(self, doc: PreparedDocument) -> Ledger | None:
        """A document's ledger, holding its certified epsilon per group."""
        if doc.betas is None or not doc.groups:
            return None
        return Ledger({g.label: g.epsilon for g in doc.groups}, delta=self.delta)

    def sequences(self) -> list[RowSequence]:
        return [document_rows(self.method, c) for c in self.contexts]

    def step(self, logits: torch.Tensor, docs: torch.Tensor, temperature: float) -> Any:
        """logits ``# (Na, R, V)`` -> the mechanism's step for the active documents ``docs``.

        A temperature past float32's range is float32's largest value: divided by it, a logit
        is 0 or -inf (a suppressed token) as by any larger one, where dividing by the temperature
        rounded to float32 (inf) made -inf / inf = NaN. DP-Fusion's bound does not read it."""
        temperature = min(temperature, FLOAT32_MAX)
        if not self.mechanisms:  # original / public: the one row's own distribution
            return MechanismStep(torch.log_softmax(logits[:, 0].float() / temperature, -1), {})  # (Na, V)
        if logits.shape[1] == 1:  # only documents without groups: one masked stand-in row, so p_pub
            logits = logits.expand(-1, 2, -1)  # comes out of the mechanism exactly as in a wider batch
        if docs.device not in self._tables:  # copied once per device, not per step (no host read)
            self._tables[docs.device] = tuple(t.to(docs.device) for t in (self.beta_t, self.mask_t, self.lam_t))
        beta_t, mask_t, lam_t = self._tables[docs.device]
        m = logits.shape[1] - 1
        betas = beta_t[docs][:, :m].to(logits.device)  # (Na, m): beta_i, or the filter's pace
        mask = mask_t[docs][:, :m].to(logits.device)  # (Na, m)
        orders = [(0, docs)] if len(self.mechanisms) == 1 else self._partition(docs, logits.device)
        if len(orders) == 1:  # one order among the active documents: one call, nothing to gather
            out = self._run(orders[0][0], logits, docs, betas, mask if self.padded else None, temperature)
        else:
            out = _gather_steps([(rows, self._run(k, logits[rows], docs[rows], betas[rows], mask[rows], temperature))
                                 for k, rows in orders], len(docs))
        if self.filtered:
            self._spending = (docs, out.charges)
        return out

    def _run(self, k: int, logits: torch.Tensor, docs: torch.Tensor, betas: torch.Tensor, mask: torch.Tensor | None,
             temperature: float) -> MechanismStep:
        """Mechanism k's step on ``logits # (n, R, V)`` of the documents ``docs # (n,)``."""
        mech = self.mechanisms[k]
        if not self.filtered:
            return mech.step(logits, betas=betas, group_mask=mask, temperature=temperature)
        assert self.filter is not None
        if self.filter.remaining.device != logits.device:
            self.filter.to(logits.device)
        remaining = self.filter.remaining[docs.to(logits.device)][:, :betas.shape[-1]]  # (n, m)
        ceilings = self._tables[docs.device][2][docs][:, :betas.shape[-1]].to(logits.device)  # (n, m)
        return mech.step(logits, remaining=remaining, pace=betas, group_mask=mask, temperature=temperature,
                         max_lam=ceilings)

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
        """Charge each active document for one token, before it is sampled: its ledger the
        certified event (fixed), or its filter row the charges of the step just taken (filter)."""
        if self.filter is not None:
            if self._spending is not None:
                self.filter.spend(*self._spending)
                self._spending = None
            return
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
    charges = first.charges.new_zeros((n, *first.charges.shape[1:])) if isinstance(first, FilterStep) else None
    for rows, part in parts:
        logprobs[rows] = part.logprobs
        for key, value in part.diagnostics.items():
            diagnostics[key][rows] = value
        if charges is not None:
            charges[rows] = part.charges
    if charges is None:
        return MechanismStep(logprobs, diagnostics)
    return FilterStep(logprobs, diagnostics, charges=charges)


def drafter(speculative: bool | None, draft_tokens: int, documents: int,
            placeholder: int | Placeholders) -> PromptLookup | None:
    """Prompt lookup on the public row (never guessing a placeholder, typed ones included), or
    None for one token per pass; ``speculative=None`` is on for one document only (docs/performance.md)."""
    if not (speculative if speculative is not None else documents == 1):
        return None
    exclude = placeholder.ids if isinstance(placeholder, Placeholders) else frozenset({placeholder})
    return PromptLookup(max_tokens=draft_tokens, exclude=exclude)
