"""Documents of any length: passage by passage, one certificate per document.

A document longer than the model's comfortable window (``passage_tokens``, public) is cut into
passages where its public row says (:func:`tokendp.text.passages.split_passages`) and rewritten
passage by passage. A passage is a range of positions of the document's rows, which it slices
(never re-tokenises): every planning decision, and every row, is then a function of what
DP-Fusion's adjacency makes public or of the row it is about (docs/privacy.md, "Documents of any
length"). Passage k's rows read, before it, the previous passage as the public row shows it and
the rewrite released for it (:class:`~tokendp.text.contexts.HistoryTemplate`): both public, and
memory stays bounded by two passages, not the document. Every passage's rows hold one row per
group of the whole document (a group absent from a passage has the public row there), so the
document's m groups keep their places, and one ledger or one filter row per document carries
across the passages:

- fixed accounting: T (asked for, or the sum of each passage's default) is split exactly into
  the passages' T_k (:func:`split_tokens`), all fixed before generation, and the document's
  certificate is DP-Fusion's bound over those T tokens with its m groups;
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

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.generation import Generated, generate, make_generators
from tokendp.params import default_new_tokens
from tokendp.text.contexts import DocumentContexts, GroupInfo, HistoryTemplate, PromptTemplate, covered
from tokendp.text.passages import Passage, public_pieces, split_passages


@dataclass(frozen=True)
class LongDocument:
    """A document rewritten in passages: the passages (ranges of positions), each passage's T_k,
    and the document's rows without a template (row 0 public, then one per group), which every
    passage slices."""

    passages: tuple[Passage, ...]
    tokens: tuple[int, ...]  # T_k per passage
    rows: tuple[tuple[int, ...], ...]  # (1 + m, L): the document's rows
    original: tuple[int, ...]  # (L,): its ids with nothing hidden
    hidden: tuple[bool, ...]  # (L,): the positions row 0 hides

    def contexts(self, k: int, groups: Sequence[GroupInfo], history: HistoryTemplate, previous: Sequence[int],
                 released: Sequence[int]) -> DocumentContexts:
        """Passage k's rows after ``previous`` (the public ids of passage k-1) and ``released``
        (its rewrite's ids): positions ``start:end`` of each of the document's rows, in the
        template; ``groups``: the document's."""
        p = self.passages[k]
        template = history.template(previous, released) if k else PromptTemplate(history.first, history.after)
        first_hidden = next((j - p.start for j in range(p.start, p.end) if self.hidden[j]), p.end - p.start)
        return DocumentContexts(tuple(template.wrap(row[p.start:p.end]) for row in self.rows), tuple(groups),
                                p.end - p.start, template.wrap(self.original[p.start:p.end]),
                                len(template.before) + first_hidden)


def run_passages(job_factory: Callable[[Sequence[Any]], Any], documents: Sequence[Any], *, backend: Any,
                 history: HistoryTemplate, seed: Any, decode: dict[str, Any],
                 on_token: Callable[[int, int], None] | None = None,
                 on_passage: Callable[[int, int, int], None] | None = None) -> tuple[Any, list[Generated]]:
    """Decode prepared documents, long ones passage by passage (module docstring).

    ``job_factory(documents)`` builds the :class:`~tokendp.fusion.FusionJob` of one round; the
    first round's job holds each document's ledger or filter row, which later rounds' jobs take
    over (the same Ledger objects; the filter's remaining budgets copied in and out). ``decode``:
    the keyword arguments of :func:`tokendp.generation.generate` other than the rows, step,
    limits, streams and charge. ``on_passage(i, k, n)``: round k begins document i's passage k of
    n (public: the plan). Returns the first round's job (its ledgers and filter as they
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
        for i in active if on_passage is not None else ():
            if documents[i].long is not None:
                on_passage(i, k, len(documents[i].long.passages))
        docs = [_round_document(documents[i], k, history, previous[i], pieces[i][-1].token_ids if k else ())
                for i in active]
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
            long = documents[i].long
            if long:
                p = long.passages[k]
                previous[i] = long.rows[0][p.start:p.end]
    return state, [_joined(d, p) for d, p in zip(documents, pieces)]


def _round_document(doc: Any, k: int, history: HistoryTemplate, previous: Sequence[int],
                    released: Sequence[int]) -> Any:
    """Document ``doc`` as round k decodes it: itself (a short document, round 0), or its
    passage k with the document's groups, betas and budgets and the passage's T_k."""
    if doc.long is None:
        return doc
    ctx = doc.long.contexts(k, doc.context.groups, history, previous, released)
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


class TooFewTokens(InvalidParameterError):
    """T below the number of passages; ``least``, that number, is the fewest tokens the document
    can be rewritten with (public: the passages are cut on the public row). Made by :meth:`of`;
    a message alone (an error named again by a caller) leaves ``least`` None."""

    def __init__(self, message: str, least: int | None = None) -> None:
        super().__init__(message)
        self.least = least

    @classmethod
    def of(cls, total: int, least: int) -> TooFewTokens:
        return cls(f"max_new_tokens {total} is below the {least} passages this document is cut into (each "
                   f"writes at least one token): ask for at least {least}, or raise passage_tokens", least)


def split_tokens(total: int, sizes: Sequence[int]) -> list[int]:
    """``total`` tokens split exactly over passages of ``sizes`` tokens: one each, and the rest in
    proportion to the sizes by largest remainder, ties to the earlier passage. Public: the sizes
    and ``total`` only. Refuses a ``total`` below the number of passages."""
    n = len(sizes)
    if total < n:
        raise TooFewTokens.of(total, n)
    rest, whole = total - n, sum(sizes)
    shares = [rest * s // whole for s in sizes]
    by_remainder = sorted(range(n), key=lambda k: (-(rest * sizes[k] % whole), k))
    for k in by_remainder[:rest - sum(shares)]:
        shares[k] += 1
    return [1 + s for s in shares]


def plan_passages(body: str, spans: Sequence[Any], ctx: DocumentContexts, template: PromptTemplate,
                  offsets: tuple[Sequence[int], np.ndarray, np.ndarray], history: HistoryTemplate, *, passage_tokens: int | None, max_new_tokens: int | None,
                  max_context: int | None) -> LongDocument | None:
    """The passages of ``body`` (its rows ``ctx``, built with ``template`` from ``spans``; its
    tokens' :func:`~tokendp.text.contexts.token_offsets`, ``offsets``, as ``ctx`` read them), or None
    when it fits one passage of ``passage_tokens`` (None: never cut). T is ``max_new_tokens``, or
    the sum of sanitize's default for each passage (1.2x its tokens + 16), split exactly into the
    passages' T_k (:func:`split_tokens`); every round's rows (the previous passage and its T, this
    passage and its T_k, the template) must fit ``max_context``. Everything here reads the public
    row alone (docs/privacy.md, "Documents of any length")."""
    if passage_tokens is None or ctx.document_tokens <= passage_tokens:
        return None
    _, starts, ends = offsets  # (L,) each
    hidden = covered(starts, ends, spans)  # (L,): what row 0 hides
    passages = split_passages(public_pieces(body, starts, ends, hidden), passage_tokens)
    if len(passages) == 1:
        return None
    sizes = [p.end - p.start for p in passages]
    total = sum(default_new_tokens(s) for s in sizes) if max_new_tokens is None else max_new_tokens
    tokens = split_tokens(total, sizes)
    longest = max(history.frame(sizes[k - 1] + tokens[k - 1] if k else 0) + sizes[k] + tokens[k]
                  for k in range(len(passages)))
    if max_context is not None and longest > max_context:
        raise InvalidInputError(f"a passage and the one before it need {longest} tokens, more than the model's "
                                f"context of {max_context}; lower passage_tokens or max_new_tokens")
    body_of = slice(len(template.before), len(template.before) + ctx.document_tokens)
    return LongDocument(tuple(passages), tuple(tokens), tuple(row[body_of] for row in ctx.rows),
                        ctx.original[body_of], tuple(hidden.tolist()))
