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

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tokendp.backends import HFBackend, load_backend
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.fusion import (Chunk, Decoding, FusionJob, FusionReport, PreparedDocument, PreparedFusion, TextResult,
                            check_fits_untagged, prepare_documents, reported_alpha, run_fusion, run_fusion_spending,
                            run_fusion_stream, spans_of)
from tokendp.fusion import choose_alpha  # noqa: F401 (re-exported: tokendp.jobs.sanitize.choose_alpha)
from tokendp.generation import Generated
from tokendp.jobs.config import SanitizeConfig
from tokendp.models.registry import context_length
from tokendp.params import (DEFAULT_NO_REPEAT_NGRAM_SIZE, DEFAULT_PACE, DEFAULT_PASSAGE_TOKENS,
                            DEFAULT_STOP_AT_REPEATED_LINE, Accounting, Budget, Method, check_new_tokens_fit,
                            default_new_tokens)
from tokendp.long_documents import plan_passages
from tokendp.text.contexts import (DocumentContexts, GroupSpec, build_contexts, history_template, placeholders,
                                   prompt_template, token_offsets, validate_spans)
from tokendp.text.spans import Span
from tokendp.text.layout import BOM
from tokendp.text.taggers.registry import tagger_name


@dataclass(frozen=True)
class SanitizeReport(FusionReport):
    """A rewrite's report: parameters and the guarantee per group (see docs/sanitize.md).

    ``private_labels``: the labels the user chose to protect (``labels=``), sorted; None: every
    label not kept. ``kept_labels``: label -> how many spans of that label were released as plain
    text (``keep=``), with no guarantee. ``spans_source``: ``"given"`` or the tagger that found
    the spans (name and version). ``incomplete``: the rewrite may not cover the whole document,
    because it was cut at T or ended at under half the document's length in tokens; both are
    public (the release's own length and the document's layout). ``passages``: how many passages
    the document was rewritten in (docs/sanitize.md, "Long documents")."""

    private_labels: tuple[str, ...] | None = None
    kept_labels: dict[str, int] = dataclasses.field(default_factory=dict)
    spans_source: str = "given"
    incomplete: bool = False
    passages: int = 1


@dataclass(frozen=True)
class SanitizeResult(TextResult):
    """The rewrite (generated text only), its report, and the diagnostics when asked for."""

    report: SanitizeReport


# ---------------------------------------------------------------------------- the job
def _default_tokens(backend: HFBackend, ctx: DocumentContexts, requested: int | None, limit: int | None) -> int:
    """T: the requested value (checked by :func:`_check_limit` and against the context), else
    1.2x the document + 16, within ``limit`` and the context."""
    if requested is not None:
        if backend.max_context is not None and requested >= backend.max_context:
            raise InvalidParameterError(f"max_new_tokens {requested} does not fit the model's context of "
                                        f"{backend.max_context} tokens with any document; ask for fewer tokens")
        backend.check_fits(ctx.length, requested)
        return requested
    tokens = min(default_new_tokens(ctx.document_tokens), limit or math.inf)
    room = (backend.max_context or ctx.length + tokens) - ctx.length
    if room < 1:
        backend.check_fits(ctx.length, 1)
    return min(tokens, room)


def trim_end(text: str, spans: Sequence[Span]) -> tuple[str, list[Span]]:
    """The document without its trailing whitespace, and its spans within what is left.

    The rewriter was trained on sources that end on their last word (docs/sanitize.md,
    "Endings"); a source that ends in a newline made it end its rewrite after an inner
    paragraph (after a blank-line break, P(end) 0.21-0.49 with the newline, 0.01-0.11 without,
    on the bundled letter). Trailing whitespace is layout, not private text: a span is cut to
    the trimmed end, one made only of trailing whitespace hides nothing and is dropped, and one
    past the end of ``text`` is left for :func:`build_contexts` to refuse."""
    body = text.rstrip()
    if not body or len(body) == len(text):
        return text, list(spans)
    cut = len(body)
    return body, [s if s.end <= cut or s.end > len(text) else Span(s.start, cut, s.label, s.score, s.source)
                  for s in spans if s.start < cut or s.end > len(text)]


def sanitize(
    text: str, *, spans: Sequence[Span | Mapping] | None = None, tagger: str | Any = "auto",
    model: str | Path | HFBackend | Any | None = "rewriter", tokenizer: Any = None, method: Method = "dp-fusion",
    alpha: float | None = None, beta: Budget = None, epsilon: Budget = None, delta: float = 1e-5,
    groups: GroupSpec = "by-label", max_new_tokens: int | None = None, temperature: float = 0.7,
    seed: int | None = None, instruction: str | None = None, template: str | None = None,
    placeholder: str | None = None, stop: Sequence[str] = (), on_overlap: Literal["merge", "error"] = "merge",
    device: str | None = None, dtype: str | None = None, on_token: Callable[[int, int], None] | None = None,
    no_repeat_ngram_size: int = DEFAULT_NO_REPEAT_NGRAM_SIZE, repetition_penalty: float = 1.0,
    stop_at_repeated_line: bool = DEFAULT_STOP_AT_REPEATED_LINE,
    speculative: bool | None = None, draft_tokens: int = 8, diagnostics: bool = False,
    labels: Sequence[str] | str | None = None, keep: Sequence[str] | str | None = None,
    accounting: Accounting = "fixed", pace: float = DEFAULT_PACE, passage_tokens: int | None = DEFAULT_PASSAGE_TOKENS,
) -> SanitizeResult:
    """Rewrite one document (``tokendp.sanitize``): ``text`` with its ``spans`` (or None to run
    ``tagger``). Every other parameter is as for :func:`sanitize_batch` (``on_token`` gets
    document index 0)."""
    config = SanitizeConfig.of(locals())
    prepared = prepare_sanitize([text], spans=None if spans is None else [spans], config=config, tagger=tagger,
                                model=model, tokenizer=tokenizer, device=device, dtype=dtype)
    return run_sanitize(prepared, seed=seed, on_token=on_token, diagnostics=diagnostics)[0]


def sanitize_batch(
    texts: Sequence[str], *, spans: Sequence[Sequence[Span | Mapping] | None] | None = None,
    tagger: str | Any = "auto", model: str | Path | HFBackend | Any | None = "rewriter", tokenizer: Any = None,
    method: Method = "dp-fusion",
    alpha: float | None = None, beta: Budget = None, epsilon: Budget = None, delta: float = 1e-5,
    groups: GroupSpec = "by-label", max_new_tokens: int | None = None, temperature: float = 0.7,
    seed: int | Sequence[int] | None = None, instruction: str | None = None, template: str | None = None,
    placeholder: str | None = None, stop: Sequence[str] = (), on_overlap: Literal["merge", "error"] = "merge",
    device: str | None = None, dtype: str | None = None, on_token: Callable[[int, int], None] | None = None,
    no_repeat_ngram_size: int = DEFAULT_NO_REPEAT_NGRAM_SIZE, repetition_penalty: float = 1.0,
    stop_at_repeated_line: bool = DEFAULT_STOP_AT_REPEATED_LINE,
    speculative: bool | None = None, draft_tokens: int = 8, diagnostics: bool = False,
    labels: str | Sequence[str] | None = None, keep: str | Sequence[str] | None = None,
    accounting: Accounting = "fixed", pace: float = DEFAULT_PACE, passage_tokens: int | None = DEFAULT_PASSAGE_TOKENS,
) -> list[SanitizeResult]:
    """Rewrite many documents in one batch (one forward pass per generated token for all, or
    fewer with ``speculative``): :func:`prepare_sanitize`, then :func:`run_sanitize`. The job's
    settings are checked, as one :class:`~tokendp.jobs.config.SanitizeConfig`, before anything
    is loaded.

    Args:
        texts: the documents.
        spans: per document, its spans (``Span`` or ``{start, end, label}`` with character
            offsets into the text exactly as given: a BOM and CRLF line ends count), or None to
            run ``tagger`` on it. The model reads the text without its BOM and with LF line
            ends, the spans mapped through (docs/sanitize.md, "Spans and line endings").
        tagger: a tagger name for ``tokendp.text.taggers.get_tagger`` or an object with ``tag``.
        model: a name (``"rewriter"``, the default: SmolLM2-135M-Instruct with tokendp's
            rewriter adapter; ``"smollm2"``; ``"tiny"``, the embedded 4.5M model), a local model
            directory, a hub id (in the local cache), an ``HFBackend``, None for ``tiny``, or a
            model object: a transformers causal LM (``AutoModelForCausalLM``) or a peft
            ``PeftModel`` (run with its active adapters), on any device and in any dtype, used in
            place (:meth:`tokendp.backends.HFBackend.from_model`).
        tokenizer: the model object's tokenizer (default: the one saved at its ``name_or_path``);
            only with a model object.
        method: ``"dp-fusion"`` (private), ``"original"`` (no privacy), ``"public"`` (epsilon 0).
        alpha: the Renyi order of the DP-Fusion bound (in (1, 1024]). Default: with ``epsilon``,
            the order that allows the largest beta (:func:`choose_alpha`); with ``beta``, 2.
        beta, epsilon: exactly one for DP-Fusion: per group (a number for all groups, or a
            mapping group -> value). With epsilon, beta_i is the largest beta meeting it.
        delta: the delta of every group's (epsilon, delta) guarantee.
        groups: ``"by-label"``, ``"single"`` or a mapping label -> group. Labels and groups may
            not start with ``untrusted-`` (any case): that prefix names generate's untrusted chunks.
        max_new_tokens: T, fixed before generation (default: 1.2x the document's tokens + 16,
            within the model's context); the certificate counts all T tokens.
        temperature: sampling temperature (>= 0.001; 0 = greedy, only for original/public).
            Public: every temperature gives the same epsilon. The default, 0.7, was chosen on
            the TAB tuning half (docs/sanitize.md, "Choosing the temperature").
        seed: seed for reproducible sampling: an int (document i's random stream is seeded with
            ``tokendp.generation.document_seed(seed, i)``), one seed per document (the corpus
            engines pass ``document_seed(seed, document id)``), or None (from the OS, ``secrets``).
            Each document has its own stream and its own alpha, so its rewrite does not depend
            on the other documents of the batch (docs/design.md, "Determinism").
        instruction, template, placeholder: the paraphrase instruction, a plain template with
            ``{document}``, and the placeholder string (defaults: the model's tokendp.json; without
            one, the tokenizer's chat template and ``"_"``, reported once in a warning on the
            ``tokendp`` logger for a model object).
        stop: extra stop strings (the model's tokendp.json "stop" always apply).
        on_overlap: spans of different labels that overlap are hidden in both groups' rows
            (``"merge"``) or rejected (``"error"``).
        device, dtype: where and how to run the model (defaults: GPU if any; float32 on CPU).
        labels: the labels to protect (``"PERSON,CODE"`` or a list; None: every label not in
            ``keep``). With labels, every label present in the input must be named in ``labels``
            or ``keep``, and each name in ``labels`` must match a span, or the job is refused
            before it runs (a span is never released because its label was not named). A parent
            covers its finer labels (DATETIME: DATE and DURATION; DEM: OCCUPATION); a span
            labelled DATETIME is covered by DATETIME alone.
        keep: the labels released as plain text, read by every row and NOT protected (e.g.
            ``"DURATION"`` to keep "six weeks"). The report's ``kept_labels`` counts their spans
            (docs/privacy.md, "Choosing labels").
        accounting: ``"fixed"`` (every one of the T tokens charged the per-token cap, as in the
            DP-Fusion paper's analysis) or ``"filter"`` (each group spends an RDP budget B_i fixed
            from epsilon_i, delta and alpha alone, charged per token what its component actually
            moved, through a per-group Renyi filter: the certificate does not depend on T;
            docs/privacy.md, "DP-Fusion with a per-group Rényi filter"). The filter needs
            ``epsilon``.
        pace: under the filter, one token may spend at most ``pace`` * B_i / n_i of group i's
            budget, n_i the tokens the group hides (public; > 0).
        passage_tokens: a document of more tokens is rewritten passage by passage, cut at line
            breaks outside the spans, each passage reading the previous one and its rewrite; one
            certificate covers the whole document (docs/sanitize.md, "Long documents"). None:
            one passage, which must fit the model's context.
        on_token: streaming callback ``(document index, token id)``.
        no_repeat_ngram_size, repetition_penalty: public decoding constraints (0 and 1: off),
            computed from the released tokens only and applied alike to every row before the
            mechanism, so the guarantee is unchanged (docs/privacy.md, "Common ground"). The
            default, no token that repeats a released 16-gram, was chosen against loops
            (docs/sanitize.md, "Loops").
        stop_at_repeated_line: end a rewrite (or a long document's passage) as soon as a line it
            released repeats an earlier line of its own, the text cut before that line (stop
            reason ``"repeated_line"``): a loop's sign, read from the released tokens only, so
            public. On by default (docs/sanitize.md, "Loops").
        speculative, draft_tokens: verify up to ``draft_tokens`` tokens guessed from the public
            context (prompt lookup) in each forward pass; the rewrite has exactly the
            distribution, and the report exactly the guarantee, it has without (docs/privacy.md,
            "Speculative decoding"). False: one forward pass per token. None (default): on for
            one document, off for several, where a pass is as wide as the longest draft in
            the batch and was measured no faster on a CPU (docs/performance.md).
        diagnostics: also return, as ``result.diagnostics`` (never in the report), the mean
            lambda and divergence per group: data-dependent, NOT covered by the guarantee, so
            keep them apart from the rewrite (docs/privacy.md, "Common ground").
    """
    config = SanitizeConfig.of(locals())
    prepared = prepare_sanitize(texts, spans=spans, config=config, tagger=tagger, model=model, tokenizer=tokenizer,
                                device=device, dtype=dtype)
    return run_sanitize(prepared, seed=seed, on_token=on_token, diagnostics=diagnostics)


def prepare_sanitize(
    texts: Sequence[str], *, config: SanitizeConfig, spans: Sequence[Sequence[Span | Mapping] | None] | None = None,
    tagger: str | Any = "auto", model: str | Path | HFBackend | Any | None = "rewriter", tokenizer: Any = None,
    device: str | None = None, dtype: str | None = None, max_new_tokens_limit: int | None = None,
    whole_input: bool = True,
) -> PreparedFusion:
    """Tag, build the rows and fix each document's certificate under ``config``, without
    generating anything (the other parameters as for :func:`sanitize_batch`). Everything that
    can be checked without the model is checked before it loads: the documents, the spans
    given and the labels they carry. ``max_new_tokens_limit``: the most T allowed, which caps
    the default and refuses a larger request. ``whole_input``: ``texts`` is the whole input, so
    a protected label that matches no span is refused as a likely typo (a corpus engine, which
    prepares a corpus in parts, passes False and checks the whole corpus itself). The result's
    ``documents[i].groups`` is document i's certificate, which :func:`run_sanitize` reports."""
    choice = config.label_choice
    if config.max_new_tokens is not None and max_new_tokens_limit is not None \
            and config.max_new_tokens > max_new_tokens_limit:
        raise InvalidParameterError(f"max_new_tokens {config.max_new_tokens} is above the limit of "
                                    f"{max_new_tokens_limit}; ask for fewer tokens")
    if isinstance(texts, str):
        raise InvalidInputError("sanitize_batch takes a list of documents; use sanitize() for one")
    if spans is not None and len(spans) != len(texts):
        raise InvalidInputError(f"got {len(spans)} span lists for {len(texts)} documents; give one per document")
    texts = [_checked_text(t, i) for i, t in enumerate(texts)]
    context = model.max_context if isinstance(model, HFBackend) else context_length(model)
    for text in texts:  # read from the model's config: no weights load for a T that cannot fit
        check_new_tokens_fit(config.max_new_tokens, context=context, text=text, passage_tokens=config.passage_tokens)
    given = [None] * len(texts) if spans is None else list(spans)
    read = [None if g is None else spans_of(t, g, None) for t, g in zip(texts, given)]
    for r in read:  # spans given: checked against their text before the model loads
        if r is not None:
            validate_spans(*r, on_overlap=config.on_overlap)
    tagging = any(r is None for r in read)
    known = [s.label for r in read if r is not None for s in r[1]]
    if tagging:
        choice.check_names(known)
        # Before the model: a tagger whose package is missing fails at once (MissingDependencyError).
        from tokendp.text.taggers import get_tagger

        tagger = get_tagger(tagger) if isinstance(tagger, str) else tagger
    else:
        choice.check(known, whole_input=whole_input)
    backend = load_backend(model, tokenizer=tokenizer, device=device, dtype=dtype)
    tok, opts = backend.tokenizer, backend.options
    tpl = prompt_template(tok, options=opts, instruction=config.instruction, template=config.template)
    ph = placeholders(tok, options=opts, placeholder=config.placeholder)
    if tagging:
        for i, text in enumerate(texts):
            if read[i] is None:  # a document too long for the job is refused before the tagger reads it
                if config.passage_tokens is None:
                    check_fits_untagged(backend, text, len(tpl.before) + len(tpl.after))
                elif max_new_tokens_limit is not None and config.max_new_tokens is None:
                    _check_default_tokens(backend, text, max_new_tokens_limit)
                read[i] = spans_of(text, None, tagger)
        choice.check([s.label for _, found in read for s in found], whole_input=whole_input)
    history = history_template(tok, options=opts, instruction=config.instruction, template=config.template)
    contexts, kept, longs = [], [], []
    for body, found in read:
        body, found = trim_end(body, found)
        kept.append(choice.kept(s.label for s in found))
        private = [s for s in found if choice.is_private(s.label)]
        offsets = token_offsets(tok, body)  # the document tokenised once, for its rows and its passages
        ctx = build_contexts(body, private, tok, template=tpl, placeholder=ph, groups=config.groups,
                             on_overlap=config.on_overlap, offsets=offsets)
        contexts.append(ctx)
        longs.append(plan_passages(body, private, ctx, tpl, offsets, history, passage_tokens=config.passage_tokens,
                                   max_new_tokens=config.max_new_tokens, max_context=backend.max_context))
    limits = [sum(long.tokens) if long else _default_tokens(backend, c, config.max_new_tokens, max_new_tokens_limit)
              for c, long in zip(contexts, longs)]
    if max_new_tokens_limit is not None and max(limits) > max_new_tokens_limit:
        raise InvalidParameterError(f"a document needs T = {max(limits)} tokens over its passages, above the limit "
                                    f"of {max_new_tokens_limit}; shorten it or ask for fewer tokens")
    documents = prepare_documents(config.method, config.alpha, config.delta, contexts, limits, beta=config.beta,
                                  epsilon=config.epsilon, accounting=config.accounting, pace=config.pace)
    labels = None if choice.protect is None else tuple(sorted(choice.protect))
    source = [("given" if g is not None else tagger_name(tagger)) for g in given]
    documents = [dataclasses.replace(d, private_labels=labels, kept_labels=k, spans_source=src, long=long)
                 for d, k, src, long in zip(documents, kept, source, longs)]
    decoding = Decoding(config.temperature, config.stop, config.no_repeat_ngram_size, config.repetition_penalty,
                        config.speculative, config.draft_tokens, config.stop_at_repeated_line)
    return PreparedFusion(config.method, float(config.delta), backend, tuple(documents), decoding, ph,
                          accounting=config.accounting, history=history)


def _check_default_tokens(backend: HFBackend, text: str, limit: int) -> None:
    """Refuse, before tagging, a document whose default T (1.2x its tokens + 16, over all its
    passages at least that) is above ``limit``: the tagger reads no more than a job may write."""
    tokens = default_new_tokens(len(backend.tokenizer(text, add_special_tokens=False)["input_ids"]))
    if tokens > limit:
        raise InvalidParameterError(f"the document needs T = {tokens} tokens or more, above the limit of {limit}; "
                                    "shorten it")


def _checked_text(text: Any, i: int) -> str:
    """Document ``i``, which must be a string with some text (checked before anything loads)."""
    if not isinstance(text, str):
        raise InvalidInputError(f"document {i} is not a string ({type(text).__name__})")
    if not text.lstrip(BOM).strip():
        raise InvalidInputError(f"document {i} is empty: there is no text to rewrite")
    return text


def run_sanitize(prepared: PreparedFusion, *, seed: int | Sequence[int] | None = None,
                 on_token: Callable[[int, int], None] | None = None, diagnostics: bool = False,
                 on_result: Callable[[int, SanitizeResult], None] | None = None,
                 on_passage: Callable[[int, int, int], None] | None = None) -> list[SanitizeResult]:
    """Rewrite the documents of a :func:`prepare_sanitize` job; each report certifies exactly
    the prepared document's groups (``diagnostics``: as for :func:`sanitize_batch`).
    ``on_result(i, result)``: document i's result as soon as it finishes (the same result the
    list holds), while the others still decode. ``on_passage(i, k, n)``: a long document i
    begins its passage k of n."""

    def result(job: FusionJob, i: int, out: Generated) -> SanitizeResult:
        found = job.diagnostics(i, out.diagnostics) if diagnostics else None
        return _result(prepared, prepared.documents[i], out, found)

    finished = None if on_result is None else (lambda job, i, out: on_result(i, result(job, i, out)))
    job, outputs = run_fusion(prepared, seed=seed, on_token=on_token, on_finish=finished, on_passage=on_passage)
    return [result(job, i, out) for i, out in enumerate(outputs)]


def run_sanitize_spending(prepared: PreparedFusion, *, seed: int | Sequence[int] | None = None,
                          on_token: Callable[[int, int], None] | None = None
                          ) -> tuple[list[SanitizeResult], list[tuple[float, ...]]]:
    """:func:`run_sanitize` under the filter accounting, with what each document's filter left
    of each group's budget (:func:`tokendp.fusion.run_fusion_spending`; never part of a release)."""
    _, outputs, left = run_fusion_spending(prepared, seed=seed, on_token=on_token)
    return [_result(prepared, d, out, None) for d, out in zip(prepared.documents, outputs)], left


def sanitize_stream(chunks: Iterable[Chunk], *, slots: int, bucket: int = 64, diagnostics: bool = False,
                    on_token: Callable[[Any, int], None] | None = None) -> Iterator[tuple[Any, SanitizeResult]]:
    """Rewrite the documents of ``chunks`` (each a :func:`prepare_sanitize` job with a key and a
    seed per document, :class:`tokendp.fusion.Chunk`) with continuous batching: at most
    ``slots`` decode at once and a finished document's slot is refilled at once
    (:func:`tokendp.fusion.run_fusion_stream`). Yields ``(key, result)`` in completion order;
    each result (text, report, certificate) is what :func:`run_sanitize` gives the document with
    the same seed, up to the float32 rounding of batched logits (docs/design.md, "Determinism").
    ``on_token(key, token_id)`` streams."""
    for done in run_fusion_stream(chunks, slots=slots, bucket=bucket, on_token=on_token):
        yield done.key, _result(done.prepared, done.document, done.output, done.diagnostics if diagnostics else None)


def _result(prepared: PreparedFusion, doc: PreparedDocument, out: Generated, diagnostics: dict | None) -> SanitizeResult:
    """A document's rewrite and report under the job settings of ``prepared``."""
    filtered = prepared.accounting == "filter" and prepared.method == "dp-fusion"
    return SanitizeResult(out.text, SanitizeReport(
        prepared.method, prepared.backend.name, reported_alpha(prepared.method, doc), prepared.delta,
        doc.max_new_tokens, len(out.token_ids), out.stop_reason,
        _guarantee(prepared.method, doc.max_new_tokens, filtered), doc.groups, prepared.decoding.constraints(),
        accounting="filter" if filtered else "fixed", private_labels=doc.private_labels,
        kept_labels=dict(doc.kept_labels), spans_source=doc.spans_source,
        incomplete=incomplete(out, doc.context.document_tokens),
        passages=len(doc.long.passages) if doc.long else 1), diagnostics)


def incomplete(out: Generated, document_tokens: int) -> bool:
    """Whether a rewrite may not cover its whole document: cut at T, or ended at under half the
    document's length in tokens. Both are public: the release's own length and the document's
    layout (docs/sanitize.md, "Long documents")."""
    return out.stop_reason == "max_new_tokens" or 2 * len(out.token_ids) < document_tokens


def _guarantee(method: str, limit: int, filtered: bool = False) -> str:
    if method == "original":
        return "none: the original document was read with every span visible"
    if method == "public":
        return "epsilon 0 for every group: only the public context (every span hidden) was read"
    if filtered:
        return ("(epsilon_i, delta)-DP per privacy group i, for documents that differ only in group i's span "
                "tokens, whatever the length: each group spends its RDP budget B_i at order alpha through a "
                "Renyi filter (tokendp.accounting.dp_fusion_filter_epsilon, proof in docs/privacy.md)")
    return (f"(epsilon_i, delta)-DP per privacy group i, for documents that differ only in group i's "
            f"span tokens, over all {limit} possible generated tokens (DP-Fusion's RDP bound: "
            "tokendp.accounting.dp_fusion_epsilon, proof in docs/privacy.md)")
