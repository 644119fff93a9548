"""Answer a public prompt from private and untrusted context, with DP-Fusion per group.

``tokendp.generate(question, context=letter, spans=spans, untrusted=[page], epsilon=4)`` asks
the model ``question`` about documents, with a bound on how much each privacy group can change
the answer. The rows (:func:`tokendp.text.prompts.build_prompt_contexts`): the prompt is public;
each trusted ``context`` document is visible except its spans, which form privacy groups as in
``sanitize`` (by default one per label); each ``untrusted`` chunk is its own group
``untrusted-j``, which only its own row reads: every other row, the public one included, reads
a fixed stand-in (``"[document withheld]"``) in its place.

The certificate is sanitize's (DP-Fusion, docs/privacy.md), from public parameters only: with
m = the number of span groups plus untrusted chunks and T = ``max_new_tokens`` fixed up front,

    epsilon_i = dp_fusion_epsilon(alpha, beta_i, groups=m, max_tokens=T, delta)

for every group i. For an untrusted chunk the neighbour is the prompt with that chunk withheld
(the stand-in in its place): whatever the chunk says, for every set S of answers
Pr[answer in S] <= e^epsilon_i Pr[answer in S | chunk withheld] + delta, and the reverse
(docs/privacy.md, "Untrusted context"). T does not shrink to fit a long prompt (that would make
it depend on the chunks' lengths): a prompt that leaves no room for T tokens is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from tokendp.backends import HFBackend, load_backend
from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.fusion import (Decoding, FusionReport, PreparedFusion, TextResult, check_fits_untagged, check_known_groups,
                            prepare_documents, reported_alpha, run_fusion, run_fusion_spending, spans_of)
from tokendp.jobs.config import check_reachable
from tokendp.params import (DEFAULT_NO_REPEAT_NGRAM_SIZE, DEFAULT_PACE, DEFAULT_STOP_AT_REPEATED_LINE, Accounting,
                            Budget, Method, check_accounting, check_params, check_untrusted_accounting)
from tokendp.text.contexts import DocumentContexts, GroupSpec, placeholders, prompt_template
from tokendp.text.prompts import (DEFAULT_GENERATE_INSTRUCTION, MAX_UNTRUSTED_TOKENS, STAND_IN, QuestionPlace,
                                  build_prompt_contexts)
from tokendp.text.spans import Span

DEFAULT_MAX_NEW_TOKENS = 128
PLAIN_QA_TEMPLATE = "{document}\n\nAnswer:\n"
Spans = Sequence[Span | Mapping]


@dataclass(frozen=True)
class UntrustedReport:
    """One untrusted chunk: its group, beta and certified epsilon (its length is not public)."""

    name: str
    beta: float | None
    epsilon: float | None


@dataclass(frozen=True)
class GenerateReport(FusionReport):
    """The parameters, the guarantee per span group (``groups``) and per untrusted chunk."""

    untrusted: tuple[UntrustedReport, ...] = ()
    stand_in: str = STAND_IN
    max_untrusted_tokens: int = MAX_UNTRUSTED_TOKENS

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["untrusted"] = [asdict(u) for u in self.untrusted]
        out["epsilon_per_group"] = {**{g.label: g.epsilon for g in self.groups},
                                    **{u.name: u.epsilon for u in self.untrusted}}
        return out


@dataclass(frozen=True)
class GenerateResult(TextResult):
    """The answer (generated text only), its report, and the diagnostics when asked for."""

    report: GenerateReport


def _documents(context: str | Sequence[str] | None, spans: Spans | Sequence[Spans | None] | None,
               where: str) -> list[tuple[str, Spans | None]]:
    """(text, spans or None) per trusted document: one text with its spans, or lists of both."""
    if context is None:
        if spans is not None:
            raise InvalidInputError(f"{where}: spans were given but no context document")
        return []
    if isinstance(context, str):
        return [(context, spans)]
    texts = list(context)
    per_doc = [None] * len(texts) if spans is None else list(spans)
    if len(per_doc) != len(texts):
        raise InvalidInputError(f"{where}: {len(per_doc)} span lists for {len(texts)} context documents; "
                                "give one per document, in the same order")
    for k, t in enumerate(texts):
        if not isinstance(t, str) or not t.strip():
            raise InvalidInputError(f"{where}: context document {k + 1} is empty or not a string")
    return list(zip(texts, per_doc))


def _chunks(untrusted: str | Sequence[str] | None) -> list[str]:
    return [] if untrusted is None else [untrusted] if isinstance(untrusted, str) else list(untrusted)


def generate(
    prompt: str, *, context: str | Sequence[str] | None = None, spans: Spans | Sequence[Spans | None] | None = None,
    untrusted: str | Sequence[str] | None = None, tagger: str | Any = "auto",
    model: str | Path | HFBackend | Any | None = None, tokenizer: Any = None, method: Method = "dp-fusion",
    alpha: float | None = None, beta: Budget = None, epsilon: Budget = None, delta: float = 1e-5,
    groups: GroupSpec = "by-label", max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, temperature: float = 0.7,
    seed: int | None = None, instruction: str = DEFAULT_GENERATE_INSTRUCTION, template: str | None = None,
    placeholder: str | None = None, stand_in: str = STAND_IN, max_untrusted_tokens: int | None = None,
    question: QuestionPlace = "last", stop: Sequence[str] = (), on_overlap: Literal["merge", "error"] = "merge",
    device: str | None = None, dtype: str | None = None, on_token: Callable[[int, int], None] | None = None,
    no_repeat_ngram_size: int = DEFAULT_NO_REPEAT_NGRAM_SIZE, repetition_penalty: float = 1.0,
    stop_at_repeated_line: bool = DEFAULT_STOP_AT_REPEATED_LINE,
    speculative: bool | None = None, draft_tokens: int = 8, diagnostics: bool = False,
    accounting: Accounting = "fixed", pace: float = DEFAULT_PACE,
) -> GenerateResult:
    """Answer one prompt (``tokendp.generate``); ``context`` is one document (``spans`` its spans)
    or a list (``spans`` one list or None per document). Every other parameter is as for
    :func:`generate_batch`, which this calls with a batch of one (``on_token`` gets prompt index 0)."""
    return generate_batch(
        [prompt], context=[context], spans=[spans], untrusted=[untrusted], tagger=tagger, model=model,
        tokenizer=tokenizer, method=method, alpha=alpha, beta=beta, epsilon=epsilon, delta=delta, groups=groups,
        max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, instruction=instruction,
        template=template, placeholder=placeholder, stand_in=stand_in, max_untrusted_tokens=max_untrusted_tokens,
        question=question, stop=stop, on_overlap=on_overlap, device=device, dtype=dtype, on_token=on_token,
        no_repeat_ngram_size=no_repeat_ngram_size, repetition_penalty=repetition_penalty,
        stop_at_repeated_line=stop_at_repeated_line, speculative=speculative,
        draft_tokens=draft_tokens, diagnostics=diagnostics, accounting=accounting, pace=pace)[0]


def generate_batch(
    prompts: Sequence[str], *, context: Sequence[str | Sequence[str] | None] | None = None,
    spans: Sequence[Spans | Sequence[Spans | None] | None] | None = None,
    untrusted: Sequence[str | Sequence[str] | None] | None = None, tagger: str | Any = "auto",
    model: str | Path | HFBackend | Any | None = None, tokenizer: Any = None, method: Method = "dp-fusion",
    alpha: float | None = None,
    beta: Budget = None, epsilon: Budget = None, delta: float = 1e-5, groups: GroupSpec = "by-label",
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, temperature: float = 0.7, seed: int | None = None,
    instruction: str = DEFAULT_GENERATE_INSTRUCTION, template: str | None = None, placeholder: str | None = None,
    stand_in: str = STAND_IN, max_untrusted_tokens: int | None = None, question: QuestionPlace = "last",
    stop: Sequence[str] = (),
    on_overlap: Literal["merge", "error"] = "merge",
    device: str | None = None, dtype: str | None = None, on_token: Callable[[int, int], None] | None = None,
    no_repeat_ngram_size: int = DEFAULT_NO_REPEAT_NGRAM_SIZE, repetition_penalty: float = 1.0,
    stop_at_repeated_line: bool = DEFAULT_STOP_AT_REPEATED_LINE,
    speculative: bool | None = None, draft_tokens: int = 8, diagnostics: bool = False,
    accounting: Accounting = "fixed", pace: float = DEFAULT_PACE,
) -> list[GenerateResult]:
    """Answer many prompts in one batch (one forward pass per generated token for all).

    Args:
        prompts: the public prompts (questions or tasks).
        context: per prompt, its trusted documents (one text, a list, or None).
        spans: per prompt, the spans of its documents (as for ``context``: one list for one
            text, one list or None per document of a list); None runs ``tagger``.
        untrusted: per prompt, its untrusted chunks (one text, a list, or None); each chunk is
            its own privacy group ``untrusted-j``, read only by its own row.
        tagger: a tagger name for ``tokendp.text.taggers.get_tagger`` or an object with ``tag``.
        model: a name (``"smollm2"``, ``"rewriter"``, ``"tiny"``), a model directory, a hub id
            (in the local cache), an ``HFBackend``, None for the embedded default model, or a
            transformers causal LM or peft ``PeftModel`` object, on any device and in any dtype
            (as for :func:`tokendp.jobs.sanitize.sanitize_batch`).
        tokenizer: the model object's tokenizer (only with a model object).
        method: ``"dp-fusion"`` (private), ``"original"`` (everything visible, no guarantee),
            ``"public"`` (every span hidden and every chunk withheld: epsilon 0).
        alpha, beta, epsilon, delta, groups: as for :func:`tokendp.jobs.sanitize.sanitize_batch`;
            a mapping names span groups and untrusted chunks (``{"PERSON": 4, "untrusted-1": 1}``).
        max_new_tokens: T, fixed before generation and counted in full (default 128); the
            prompt with its documents must leave room for it in the model's context.
        temperature: sampling temperature (default 0.7; >= 0.001; 0 = greedy, only for original/public).
        seed: seed for reproducible sampling; None seeds from the OS (``secrets``).
        instruction: the line before the documents (:data:`DEFAULT_GENERATE_INSTRUCTION`).
        template: a plain template with ``{document}`` around the whole body (instruction,
            documents, question); default: the tokenizer's chat template, else
            :data:`PLAIN_QA_TEMPLATE`. The model's paraphrase template is not used.
        placeholder: the string that hides a span token (default: the model's tokendp.json).
        stand_in: what every row but its own reads in place of an untrusted chunk.
        max_untrusted_tokens: the tokens of an untrusted chunk its row reads (the rest is cut,
            silently); every row is laid out as long as a chunk's row can be, so that the batch's
            layout, and with it the rounding of every other row's logits, does not depend on a
            chunk's length (docs/privacy.md, "Equal rows, equal logits"). It must hold the
            stand-in. Default: the most, up to :data:`~tokendp.text.prompts.MAX_UNTRUSTED_TOKENS`
            (1,024), that the model's context leaves beside the public row and T: public data.
        question: where the prompt goes: after the documents (``"last"``), before them
            (``"first"``) or both; public layout, no effect on the guarantee.
        stop, on_overlap, device, dtype, on_token, no_repeat_ngram_size, repetition_penalty,
            stop_at_repeated_line, speculative, draft_tokens, diagnostics: as for :func:`tokendp.jobs.sanitize.sanitize_batch`
            (drafts come from the public row: the prompt, trusted text and stand-ins; the
            diagnostics, computed from the chunks too, are never in the report).
        accounting, pace: DP-Fusion's accounting for the span groups, as for
            :func:`tokendp.jobs.sanitize.sanitize_batch`. The filter's proof is for span groups
            (the neighbour blanks a group); a prompt with untrusted chunks (any change of a
            chunk is a neighbour) is refused under ``"filter"``.
    """
    prepared = prepare_generate(
        prompts, context=context, spans=spans, untrusted=untrusted, tagger=tagger, model=model, tokenizer=tokenizer,
        method=method,
        alpha=alpha, beta=beta, epsilon=epsilon, delta=delta, groups=groups, max_new_tokens=max_new_tokens,
        temperature=temperature, instruction=instruction, template=template, placeholder=placeholder,
        stand_in=stand_in, max_untrusted_tokens=max_untrusted_tokens, question=question, stop=stop,
        on_overlap=on_overlap, device=device, dtype=dtype, no_repeat_ngram_size=no_repeat_ngram_size,
        stop_at_repeated_line=stop_at_repeated_line,
        repetition_penalty=repetition_penalty, speculative=speculative, draft_tokens=draft_tokens,
        accounting=accounting, pace=pace)
    return run_generate(prepared, seed=seed, on_token=on_token, diagnostics=diagnostics)


@dataclass(frozen=True)
class PreparedGenerate(PreparedFusion):
    """A :func:`prepare_generate` job: a prepared DP-Fusion job and the public layout it reports."""

    stand_in: str = STAND_IN


def prepare_generate(
    prompts: Sequence[str], *, context: Sequence[str | Sequence[str] | None] | None = None,
    spans: Sequence[Spans | Sequence[Spans | None] | None] | None = None,
    untrusted: Sequence[str | Sequence[str] | None] | None = None, tagger: str | Any = "auto",
    model: str | Path | HFBackend | Any | None = None, tokenizer: Any = None, method: Method = "dp-fusion",
    alpha: float | None = None,
    beta: Budget = None, epsilon: Budget = None, delta: float = 1e-5, groups: GroupSpec = "by-label",
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, temperature: float = 0.7,
    instruction: str = DEFAULT_GENERATE_INSTRUCTION, template: str | None = None, placeholder: str | None = None,
    stand_in: str = STAND_IN, max_untrusted_tokens: int | None = None, question: QuestionPlace = "last",
    stop: Sequence[str] = (), on_overlap: Literal["merge", "error"] = "merge", device: str | None = None,
    dtype: str | None = None, no_repeat_ngram_size: int = DEFAULT_NO_REPEAT_NGRAM_SIZE,
    repetition_penalty: float = 1.0, stop_at_repeated_line: bool = DEFAULT_STOP_AT_REPEATED_LINE,
    speculative: bool | None = None, draft_tokens: int = 8, accounting: Accounting = "fixed",
    pace: float = DEFAULT_PACE,
) -> PreparedGenerate:
    """Check every parameter, tag, build the rows and fix each prompt's certificate, without
    generating anything (parameters as for :func:`generate_batch`)."""
    check_params(method, alpha, delta, temperature, beta, epsilon)
    check_accounting(accounting, pace, method, beta)
    check_reachable(method, accounting, alpha, delta, epsilon)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise InvalidParameterError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    decoding = Decoding(temperature, tuple(stop), no_repeat_ngram_size, repetition_penalty, speculative, draft_tokens,
                        stop_at_repeated_line)
    if isinstance(prompts, str):
        raise InvalidInputError("generate_batch takes a list of prompts; use generate() for one")
    n = len(prompts)
    if n == 0:
        raise InvalidInputError("no prompts: give at least one prompt")
    for what, value in (("context", context), ("spans", spans), ("untrusted", untrusted)):
        if value is not None and len(value) != n:
            raise InvalidInputError(f"got {len(value)} {what} entries for {n} prompts; give one per prompt")
    docs = [_documents(None if context is None else context[i], None if spans is None else spans[i], f"prompt {i + 1}")
            for i in range(n)]
    chunks = [_chunks(None if untrusted is None else untrusted[i]) for i in range(n)]
    check_untrusted_accounting(accounting, method, sum(map(len, chunks)))
    if any(s is None for d in docs for _, s in d):
        from tokendp.text.taggers import get_tagger  # before the model: a missing package fails at once

        tagger = get_tagger(tagger) if isinstance(tagger, str) else tagger
    backend = load_backend(model, tokenizer=tokenizer, device=device, dtype=dtype)
    tok, opts = backend.tokenizer, backend.options
    if template is None and not getattr(tok, "chat_template", None):
        template = PLAIN_QA_TEMPLATE
    tpl = prompt_template(tok, instruction="", template=template)
    ph = placeholders(tok, options=opts, placeholder=placeholder)
    for t, s in (doc for d in docs for doc in d):
        if s is None:  # a document that cannot fit is refused before the tagger reads it
            check_fits_untagged(backend, t)
    room = None if backend.max_context is None else backend.max_context - max_new_tokens
    contexts = [build_prompt_contexts(p, [spans_of(t, s, tagger) for t, s in d], c, tok, template=tpl,
                                      placeholder=ph, instruction=instruction, stand_in=stand_in, question=question,
                                      groups=groups, on_overlap=on_overlap, max_untrusted_tokens=max_untrusted_tokens,
                                      layout_limit=room)
                for p, d, c in zip(prompts, docs, chunks)]
    for c in contexts:
        _check_fits(backend, c, max_new_tokens)
    for budget, what in ((beta, "beta"), (epsilon, "epsilon")):
        check_known_groups(budget, {g.name for c in contexts for g in c.groups}, what)
    documents = prepare_documents(method, alpha, delta, contexts, [max_new_tokens] * n, beta=beta, epsilon=epsilon,
                                  accounting=accounting, pace=pace)
    return PreparedGenerate(method, float(delta), backend, tuple(documents), decoding, ph, accounting=accounting,
                            stand_in=stand_in)


def run_generate(prepared: PreparedGenerate, *, seed: int | Sequence[int] | None = None,
                 on_token: Callable[[int, int], None] | None = None, diagnostics: bool = False) -> list[GenerateResult]:
    """Answer the prompts of a :func:`prepare_generate` job; each report certifies exactly the
    prepared groups (span groups in ``groups``, untrusted chunks in ``untrusted``; ``diagnostics``:
    as for :func:`generate_batch`)."""
    job, outputs = run_fusion(prepared, seed=seed, on_token=on_token)
    return _results(prepared, job, outputs, diagnostics)


def run_generate_spending(prepared: PreparedGenerate, *, seed: int | Sequence[int] | None = None,
                          on_token: Callable[[int, int], None] | None = None
                          ) -> tuple[list[GenerateResult], list[tuple[float, ...]]]:
    """:func:`run_generate` under the filter accounting, with what each prompt's filter left of
    each group's budget (:func:`tokendp.fusion.run_fusion_spending`; never part of a release)."""
    job, outputs, left = run_fusion_spending(prepared, seed=seed, on_token=on_token)
    return _results(prepared, job, outputs, False), left


def _results(prepared: PreparedGenerate, job: Any, outputs: Sequence[Any], diagnostics: bool) -> list[GenerateResult]:
    """Each prompt's answer and report, from the finished fusion job and its outputs."""
    filtered = prepared.accounting == "filter" and prepared.method == "dp-fusion"
    results = []
    for i, (doc, out) in enumerate(zip(prepared.documents, outputs)):
        untrusted = [info.untrusted for info in doc.context.groups]
        report = GenerateReport(
            prepared.method, prepared.backend.name, reported_alpha(prepared.method, doc), prepared.delta,
            doc.max_new_tokens, len(out.token_ids), out.stop_reason,
            _guarantee(prepared.method, doc.max_new_tokens, filtered),
            tuple(g for g, u in zip(doc.groups, untrusted) if not u), prepared.decoding.constraints(),
            accounting="filter" if filtered else "fixed",
            untrusted=tuple(UntrustedReport(g.label, g.beta, g.epsilon) for g, u in zip(doc.groups, untrusted) if u),
            stand_in=prepared.stand_in, max_untrusted_tokens=doc.context.max_untrusted_tokens)
        results.append(GenerateResult(out.text, report, job.diagnostics(i, out.diagnostics) if diagnostics else None))
    return results


def _check_fits(backend: HFBackend, contexts: DocumentContexts, max_new_tokens: int) -> None:
    """The rows' public layout length and T tokens must fit the model's context.

    The layout length is ``public_length`` (a chunk's row at most, counting every untrusted chunk
    at ``max_untrusted_tokens``) when there are chunks, else the rows' own length, public as in
    sanitize; never the real length of a chunk's row, so whether a prompt fits depends on
    public data only, and every real row, no longer than the layout, fits when it does."""
    rows = contexts.rows
    length = contexts.public_length if contexts.public_length is not None else max(len(r) for r in rows)
    limit = backend.max_context
    if limit is not None and length + max_new_tokens > limit:
        raise InvalidInputError(
            f"the prompt with its documents is laid out in {length} tokens (every untrusted chunk counted at "
            f"max_untrusted_tokens) and max_new_tokens is {max_new_tokens}: more than the model's context of "
            f"{limit} tokens; pass fewer or shorter trusted documents, lower max_untrusted_tokens or max_new_tokens")


def _guarantee(method: str, limit: int, filtered: bool) -> str:
    if method == "original":
        return "none: every span and every untrusted chunk was read as is"
    if method == "public":
        return "epsilon 0 for every group: only the public row (spans hidden, untrusted chunks withheld) was read"
    if filtered:
        return ("(epsilon_i, delta)-DP per span group i, against the prompt with group i's spans hidden, whatever "
                "the answer's length: each group spends its RDP budget B_i at order alpha through a Renyi filter "
                "(tokendp.accounting.dp_fusion_filter_epsilon, proof in docs/privacy.md)")
    return (f"(epsilon_i, delta)-DP per group i over all {limit} possible generated tokens: for a span group, "
            "against the prompt with group i's spans hidden; for an untrusted chunk, against the prompt with "
            "that chunk withheld, whatever the chunk says (DP-Fusion's RDP bound: "
            "tokendp.accounting.dp_fusion_epsilon, proof in docs/privacy.md)")
