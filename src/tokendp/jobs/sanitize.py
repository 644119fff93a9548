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
from tokendp.fusion import (Budget, Chunk, Decoding, FusionJob, FusionReport, Method, PreparedDocument, PreparedFusion,
                            TextResult, check_fits_untagged, check_params, prepare_documents, run_fusion,
                            run_fusion_stream, spans_of)
from tokendp.fusion import choose_alpha  # noqa: F401 (re-exported: tokendp.jobs.sanitize.choose_alpha)
from tokendp.generation import Generated
from tokendp.text.contexts import DocumentContexts, GroupSpec, build_contexts, placeholders, prompt_template
from tokendp.text.spans import Span
from tokendp.text.taggers.labels import choose_labels, is_private


@dataclass(frozen=True)
class SanitizeReport(FusionReport):
    """A rewrite's report: parameters and the guarantee per group (see docs/sanitize.md).
    ``private_labels``: the labels whose spans were protected when the user chose them
    (``labels=``), sorted; spans of other built-in labels were kept as plain text, with no
    guarantee. None: every label was protected."""

    private_labels: tuple[str, ...] | None = None


@dataclass(frozen=True)
class SanitizeResult(TextResult):
    """The rewrite (generated text only), its report, and the diagnostics when asked for."""

    report: SanitizeReport


# ---------------------------------------------------------------------------- the job
def _default_tokens(backend: HFBackend, ctx: DocumentContexts, requested: int | None, limit: int | None) -> int:
    """T: the requested value (checked against ``limit`` and the context), else 1.2x the
    document + 16, within ``limit`` and the context."""
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise InvalidParameterError(f"max_new_tokens must be an integer >= 1, got {requested!r}")
        if limit is not None and requested > limit:
            raise InvalidParameterError(f"max_new_tokens {requested} is above the limit of {limit}; ask for fewer tokens")
        backend.check_fits(ctx.length, requested)
        return requested
    tokens = min(math.ceil(1.2 * ctx.document_tokens) + 16, limit or math.inf)
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
    no_repeat_ngram_size: int = 0, repetition_penalty: float = 1.0,
    speculative: bool | None = None, draft_tokens: int = 8, diagnostics: bool = False,
    labels: Sequence[str] | str | None = None,
) -> SanitizeResult:
    """Rewrite one document (``tokendp.sanitize``): ``text`` with its ``spans`` (or None to run
    ``tagger``). Every other parameter is as for :func:`sanitize_batch`, which this calls with a
    batch of one (``on_token`` gets document index 0)."""
    return sanitize_batch(
        [text], spans=None if spans is None else [spans], tagger=tagger, model=model, tokenizer=tokenizer,
        method=method, alpha=alpha, beta=beta, epsilon=epsilon, delta=delta, groups=groups,
        max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, instruction=instruction,
        template=template, placeholder=placeholder, stop=stop, on_overlap=on_overlap, device=device, dtype=dtype,
        on_token=on_token, no_repeat_ngram_size=no_repeat_ngram_size, repetition_penalty=repetition_penalty,
        speculative=speculative, draft_tokens=draft_tokens, diagnostics=diagnostics, labels=labels)[0]


def sanitize_batch(
    texts: Sequence[str], *, spans: Sequence[Sequence[Span | Mapping] | None] | None = None,
    tagger: str | Any = "auto", model: str | Path | HFBackend | Any | None = "rewriter", tokenizer: Any = None,
    method: Method = "dp-fusion",
    alpha: float | None = None, beta: Budget = None, epsilon: Budget = None, delta: float = 1e-5,
    groups: GroupSpec = "by-label", max_new_tokens: int | None = None, temperature: float = 0.7,
    seed: int | Sequence[int] | None = None, instruction: str | None = None, template: str | None = None,
    placeholder: str | None = None, stop: Sequence[str] = (), on_overlap: Literal["merge", "error"] = "merge",
    device: str | None = None, dtype: str | None = None, labels: str | Sequence[str] | None = None,
    on_token: Callable[[int, int], None] | None = None,
    no_repeat_ngram_size: int = 0, repetition_penalty: float = 1.0,
    speculative: bool | None = None, draft_tokens: int = 8, diagnostics: bool = False,
) -> list[SanitizeResult]:
    """Rewrite many documents in one batch (one forward pass per generated token for all, or
    fewer with ``speculative``): :func:`prepare_sanitize`, then :func:`run_sanitize`.

    Args:
        texts: the documents.
        spans: per document, its spans (``Span`` or ``{start, end, label}`` with character
            offsets), or None to run ``tagger`` on it.
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
        labels: the private labels (``"PERSON,CODE"`` or a list; None: every label). Spans of
            the other built-in labels (:data:`tokendp.text.taggers.CHOOSABLE`) are kept as plain
            text, read by every row and NOT protected; a parent names its finer labels
            (DATETIME: DATE, DURATION; DEM: OCCUPATION); spans with a label of your own are
            always private. An unknown name is an error before anything runs. The report's
            ``private_labels`` says what was protected (docs/privacy.md, "Choosing labels").
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
        diagnostics: also return, as ``result.diagnostics`` (never in the report), the mean
            lambda and divergence per group: data-dependent, NOT covered by the guarantee, so
            keep them apart from the rewrite (docs/privacy.md, "Common ground").
    """
    prepared = prepare_sanitize(
        texts, spans=spans, tagger=tagger, model=model, tokenizer=tokenizer, method=method, alpha=alpha, beta=beta,
        epsilon=epsilon, delta=delta, groups=groups, max_new_tokens=max_new_tokens, temperature=temperature,
        instruction=instruction, template=template, placeholder=placeholder, stop=stop, on_overlap=on_overlap,
        device=device, dtype=dtype, labels=labels, no_repeat_ngram_size=no_repeat_ngram_size,
        repetition_penalty=repetition_penalty, speculative=speculative, draft_tokens=draft_tokens)
    return run_sanitize(prepared, seed=seed, on_token=on_token, diagnostics=diagnostics)


def prepare_sanitize(
    texts: Sequence[str], *, spans: Sequence[Sequence[Span | Mapping] | None] | None = None,
    tagger: str | Any = "auto", model: str | Path | HFBackend | Any | None = "rewriter", tokenizer: Any = None,
    method: Method = "dp-fusion",
    alpha: float | None = None, beta: Budget = None, epsilon: Budget = None, delta: float = 1e-5,
    groups: GroupSpec = "by-label", max_new_tokens: int | None = None, max_new_tokens_limit: int | None = None,
    temperature: float = 0.7, instruction: str | None = None, template: str | None = None,
    placeholder: str | None = None, stop: Sequence[str] = (), on_overlap: Literal["merge", "error"] = "merge",
    device: str | None = None, dtype: str | None = None, labels: str | Sequence[str] | None = None,
    no_repeat_ngram_size: int = 0, repetition_penalty: float = 1.0, speculative: bool | None = None,
    draft_tokens: int = 8,
) -> PreparedFusion:
    """Check every parameter, tag, build the rows and fix each document's certificate, without
    generating anything (parameters as for :func:`sanitize_batch`; ``max_new_tokens_limit``:
    the most T allowed, which caps the default and refuses a larger request). The result's
    ``documents[i].groups`` is document i's certificate, which :func:`run_sanitize` reports."""
    check_params(method, alpha, delta, temperature, beta, epsilon)
    chosen = choose_labels(labels)
    decoding = Decoding(temperature, tuple(stop), no_repeat_ngram_size, repetition_penalty, speculative, draft_tokens)
    if isinstance(texts, str):
        raise InvalidInputError("sanitize_batch takes a list of documents; use sanitize() for one")
    if spans is not None and len(spans) != len(texts):
        raise InvalidInputError(f"got {len(spans)} span lists for {len(texts)} documents; give one per document")
    if spans is None or any(s is None for s in spans):
        # Before the model: a tagger whose package is missing fails at once (MissingDependencyError).
        from tokendp.text.taggers import get_tagger

        tagger = get_tagger(tagger) if isinstance(tagger, str) else tagger
    backend = load_backend(model, tokenizer=tokenizer, device=device, dtype=dtype)
    tok, opts = backend.tokenizer, backend.options
    tpl = prompt_template(tok, options=opts, instruction=instruction, template=template)
    ph = placeholders(tok, options=opts, placeholder=placeholder)
    contexts = []
    for i, text in enumerate(texts):
        given = None if spans is None else spans[i]
        if given is None:  # a document that cannot fit is refused before the tagger reads it
            check_fits_untagged(backend, text, len(tpl.before) + len(tpl.after))
        body, found = trim_end(text, spans_of(text, given, tagger))
        private = [s for s in found if is_private(s.label, chosen)]
        contexts.append(build_contexts(body, private, tok, template=tpl, placeholder=ph, groups=groups,
                                       on_overlap=on_overlap))
    limits = [_default_tokens(backend, c, max_new_tokens, max_new_tokens_limit) for c in contexts]
    documents = prepare_documents(method, alpha, delta, contexts, limits, beta=beta, epsilon=epsilon)
    if chosen is not None:
        documents = [dataclasses.replace(d, private_labels=tuple(sorted(chosen))) for d in documents]
    return PreparedFusion(method, float(delta), backend, tuple(documents), decoding, ph)


def run_sanitize(prepared: PreparedFusion, *, seed: int | Sequence[int] | None = None,
                 on_token: Callable[[int, int], None] | None = None, diagnostics: bool = False,
                 on_result: Callable[[int, SanitizeResult], None] | None = None) -> list[SanitizeResult]:
    """Rewrite the documents of a :func:`prepare_sanitize` job; each report certifies exactly
    the prepared document's groups (``diagnostics``: as for :func:`sanitize_batch`).
    ``on_result(i, result)``: document i's result as soon as it finishes (the same result the
    list holds), while the others still decode."""

    def result(job: FusionJob, i: int, out: Generated) -> SanitizeResult:
        found = job.diagnostics(i, out.diagnostics) if diagnostics else None
        return _result(prepared, prepared.documents[i], out, found)

    finished = None if on_result is None else (lambda job, i, out: on_result(i, result(job, i, out)))
    job, outputs = run_fusion(prepared, seed=seed, on_token=on_token, on_finish=finished)
    return [result(job, i, out) for i, out in enumerate(outputs)]


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
    return SanitizeResult(out.text, SanitizeReport(
        prepared.method, prepared.backend.name, doc.alpha, prepared.delta, doc.max_new_tokens,
        len(out.token_ids), out.stop_reason, _guarantee(prepared.method, doc.max_new_tokens), doc.groups,
        prepared.decoding.constraints(), doc.private_labels), diagnostics)


def _guarantee(method: str, limit: int) -> str:
    if method == "original":
        return "none: the original document was read with every span visible"
    if method == "public":
        return "epsilon 0 for every group: only the public context (every span hidden) was read"
    return (f"(epsilon_i, delta)-DP per privacy group i, for documents that differ only in group i's "
            f"span tokens, over all {limit} possible generated tokens (DP-Fusion's RDP bound: "
            "tokendp.accounting.dp_fusion_epsilon, proof in docs/privacy.md)")
