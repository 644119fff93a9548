"""Documents of any length: passage by passage, one certificate per document.

A document longer than the model's comfortable window (``passage_tokens``, public) is cut into
passages at public places (:func:`tokendp.text.passages.split_passages`) and rewritten passage by
passage. Passage k's rows read, before it, the previous passage as the public row shows it and
the rewrite released for it (:class:`~tokendp.text.contexts.HistoryTemplate`): both public, and
memory stays bounded by two passages, not the document. Every passage's rows hold one row per
group of the whole document (a group absent from a passage reads the public row there), so the
document's m groups keep their places, and one ledger or one filter row per document carries
across the passages:

- fixed accounting: T = the sum of the passages' T_k, all fixed before generation, and the
  document's certificate is DP-Fusion's bound over those T tokens with its m groups;
- filter accounting: each group's budget B_i spans the whole document, whatever its length.

The passages of a batch run in rounds (round k: the k-th passage of every document that has
one), each document keeping its own random stream across rounds. The release is the passages'
rewrites joined by the public text between the passages (docs/sanitize.md, "Long documents";
docs/privacy.md, "Documents of any length").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tokendp.errors import InvalidInputError
from tokendp.generation import Generated, generate, make_generators
from tokendp.params import default_new_tokens
from tokendp.text.contexts import (DocumentContexts, GroupInfo, GroupSpec, HistoryTemplate, PromptTemplate,
                                   build_contexts, token_offsets)
from tokendp.text.passages import Passage, split_passages


@dataclass(frozen=True)
class LongDocument:
    """A document rewritten in passages: its text (as the model reads it), the passages, each
    passage's T_k (public), and how its rows are built."""

    body: str
    passages: tuple[Passage, ...]
    tokens: tuple[int, ...]  # T_k per passage
    groups: GroupSpec
    on_overlap: str

    def contexts(self, k: int, group_infos: Sequence[GroupInfo], tokenizer: Any, history: HistoryTemplate,
                 placeholder: Any, previous: Sequence[int], released: Sequence[int]) -> DocumentContexts:
        """Passage k's rows after ``previous`` (the public ids of passage k-1) and ``released``
        (its rewrite's ids), one row per group of the document in its order."""
        p = self.passages[k]
        template = history.template(previous, released) if k else PromptTemplate(history.first, history.after)
        ctx = build_contexts(self.body[p.start:p.end], p.spans, tokenizer, template=template, placeholder=placeholder,
                             groups=self.groups, on_overlap=self.on_overlap)  # type: ignore[arg-type]
        own = {g.name: r for g, r in zip(ctx.groups, ctx.rows[1:])}
        rows = (ctx.rows[0], *(own.get(g.name, ctx.rows[0]) for g in group_infos))
        return dataclasses.replace(ctx, rows=rows, groups=tuple(group_infos))


def passage_ids(ctx: DocumentContexts, after: int) -> tuple[int, ...]:
    """The public row's ids of a passage's own text: its last ``document_tokens`` before the
    ``after`` ids that close the template."""
    row = ctx.rows[0]
    return tuple(row[len(row) - after - ctx.document_tokens:len(row) - after])


def run_passages(job_factory: Callable[[Sequence[Any]], Any], documents: Sequence[Any], *, backend: Any,
                 history: HistoryTemplate, placeholder: Any, seed: Any, decode: dict[str, Any],
                 on_token: Callable[[int, int], None] | None = None) -> tuple[Any, list[Generated]]:
    """Decode prepared documents, long ones passage by passage (module docstring).

    ``job_factory(documents)`` builds the :class:`~tokendp.fusion.FusionJob` of one round; the
    first round's job holds each document's ledger or filter row, which later rounds' jobs take
    over (the same Ledger objects; the filter's remaining budgets copied in and out). ``decode``:
    the keyword arguments of :func:`tokendp.generation.generate` other than the rows, step,
    limits, streams and charge. Returns the first round's job (its ledgers and filter as they
    end) and one output per document.
    """
    n = len(documents)
    streams = make_generators(seed, n)
    streams = [streams] * n if isinstance(streams, torch.Generator) else list(streams)
    rounds = max(len(d.long.passages) if d.long else 1 for d in documents)
    pieces: list[list[Generated]] = [[] for _ in range(n)]
    previous: list[tuple[int, ...]] = [()] * n
    state = None
    for k in range(rounds):
        active = [i for i, d in enumerate(documents) if k < (len(d.long.passages) if d.long else 1)]
        docs = [_round_document(documents[i], k, backend, history, placeholder, previous[i],
                                pieces[i][-1].token_ids if k else ()) for i in active]
        job = job_factory(docs)
        if state is None:
            state = job
        else:
            _carry(state, job, active)
        stream = None if on_token is None else (lambda j, tok, active=active: on_token(active[j], tok))
        outs = generate(backend, job.sequences(), job.step, max_new_tokens=[d.max_new_tokens for d in docs],
                        generator=[streams[i] for i in active], charge=job.charge, on_token=stream, **decode)
        if state is not job:
            _carry_back(state, job, active)
        for j, i in enumerate(active):
            pieces[i].append(outs[j])
            d = documents[i]
            if d.long:
                previous[i] = passage_ids(docs[j].context, len(history.after))
    return state, [_joined(d, p) for d, p in zip(documents, pieces)]


def _round_document(doc: Any, k: int, backend: Any, history: HistoryTemplate, placeholder: Any,
                    previous: Sequence[int], released: Sequence[int]) -> Any:
    """Document ``doc`` as round k decodes it: itself (a short document, round 0), or its
    passage k with the document's groups, betas and budgets and the passage's T_k."""
    if doc.long is None:
        return doc
    ctx = doc.long.contexts(k, doc.context.groups, backend.tokenizer, history, placeholder, previous, released)
    return dataclasses.replace(doc, context=ctx, max_new_tokens=doc.long.tokens[k], long=None)


def _carry(first: Any, job: Any, active: Sequence[int]) -> None:
    """Round k's ``job`` takes over each active document's ledger and filter row from ``first``."""
    for j, i in enumerate(active):
        job.ledgers[j] = first.ledgers[i]
        if job.filter is not None:
            m = len(job.contexts[j].groups)
            job.filter.remaining[j, :m] = first.filter.remaining[i, :m].to(job.filter.remaining.device)


def _carry_back(first: Any, job: Any, active: Sequence[int]) -> None:
    """What round k's ``job`` left of each filter row goes back to ``first`` (ledgers are shared)."""
    if job.filter is not None:
        for j, i in enumerate(active):
            m = len(job.contexts[j].groups)
            first.filter.remaining[i, :m] = job.filter.remaining[j, :m].to(first.filter.remaining.device)


def _joined(doc: Any, pieces: Sequence[Generated]) -> Generated:
    """One output of a document's passages: their texts joined by the public text between the
    passages, the tokens in order, the last passage's stop reason, the diagnostics' mean."""
    if len(pieces) == 1:
        return pieces[0]
    separators = [p.separator for p in doc.long.passages]
    text = "".join(sep + piece.text.strip() for sep, piece in zip(separators, pieces))
    ids = tuple(t for piece in pieces for t in piece.token_ids)
    diag = {key: sum(p.diagnostics[key] for p in pieces) / len(pieces) for key in pieces[0].diagnostics}
    return Generated(text, ids, pieces[-1].stop_reason, diag)


def plan_passages(body: str, spans: Sequence[Any], ctx: DocumentContexts, tokenizer: Any, history: HistoryTemplate, *,
                  passage_tokens: int | None, max_new_tokens: int | None, max_context: int | None,
                  groups: GroupSpec, on_overlap: str) -> LongDocument | None:
    """The passages of a document of ``ctx.document_tokens`` tokens, or None when it fits one
    passage of ``passage_tokens`` (None: never cut). Each passage's T_k is sanitize's default
    for it (1.2x its tokens + 16), or its share of ``max_new_tokens`` by length; every round's
    rows (the previous passage and its T, this passage and its T_k, the template) must fit
    ``max_context``. Everything here is public: the layout's token counts and the text outside
    the spans (:func:`tokendp.text.passages.split_passages`)."""
    if passage_tokens is None or ctx.document_tokens <= passage_tokens:
        return None
    _, starts, _ = token_offsets(tokenizer, body)  # (L,): where each token of the layout starts

    def count(a: int, b: int) -> int:
        return int(np.searchsorted(starts, b) - np.searchsorted(starts, a))

    passages = split_passages(body, spans, count, passage_tokens)
    if len(passages) == 1:
        return None
    sizes = [count(p.start, p.end) for p in passages]
    if max_new_tokens is None:
        tokens = [default_new_tokens(s) for s in sizes]
    else:
        tokens = [max(1, max_new_tokens * s // sum(sizes)) for s in sizes]
    frame = len(history.first) + len(history.middle) + len(history.turn) + len(history.after)
    longest = max(frame + sizes[k] + tokens[k] + (sizes[k - 1] + tokens[k - 1] if k else 0)
                  for k in range(len(passages)))
    if max_context is not None and longest > max_context:
        raise InvalidInputError(f"a passage and the one before it need {longest} tokens, more than the model's "
                                f"context of {max_context}; lower passage_tokens or max_new_tokens")
    return LongDocument(body, tuple(passages), tuple(tokens), groups, on_overlap)
