"""The rows of a question asked about documents: a public prompt, trusted context, untrusted chunks.

``tokendp generate`` lays its prompt out as (inside one user turn of the chat template):

    {instruction}

    Document 1:
    {trusted context 1}      its spans hidden as in sanitize: one placeholder per token
    ...
    Document k+1:
    {untrusted chunk 1}      rows other than the chunk's own read the fixed STAND_IN here
    ...
    Question: {prompt}      (or after the instruction, or in both places: ``question=``)

and builds one row per view of it (:class:`~tokendp.text.contexts.DocumentContexts`):

- row 0, public: every span hidden, every untrusted chunk replaced by :data:`STAND_IN`;
- one row per span group g (the union over the context documents, named as in sanitize):
  only g's spans visible, every chunk replaced by the stand-in;
- one row per untrusted chunk j (group ``untrusted-j``): that chunk visible, every span
  hidden and every other chunk replaced by the stand-in.

Every piece (headers, each document, each chunk, the stand-in, the question) is tokenised on
its own and the ids are concatenated, so a chunk whose text IS the stand-in gives a row equal,
token for token, to the public row: the neighbour the guarantee compares with (docs/privacy.md,
"Untrusted context"). A chunk's length is therefore not public (its row may be longer or
shorter than the public row); span lengths in trusted documents are, as in sanitize. So that the
batch's layout stays public, each chunk is cut to ``max_untrusted_tokens`` (public) and every row
is laid out as long as the longest a chunk's row can be (``DocumentContexts.public_length``). The
cut is silent: a message saying that a chunk was cut would tell whether its length exceeds the
cap, which the guarantee does not cover. The cap must hold the stand-in, or the neighbour (a
chunk that IS the stand-in) would be cut too and its row would no longer be the public row.
Untrusted text is tokenised with ``split_special_tokens``: a chunk that spells out a control
token such as ``<|im_end|>`` reads as those characters, never as the token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.contexts import (RESERVED_PREFIX, DocumentContexts, GroupInfo, GroupSpec, Placeholders, PromptTemplate,
                                   build_contexts)
from tokendp.text.spans import Span

STAND_IN = "[document withheld]"
DEFAULT_GENERATE_INSTRUCTION = "Answer the question using the documents below."
HEADER = "Document {n}:\n"
SEPARATOR = "\n\n"
QUESTION = "Question: {prompt}"
QUESTION_PLACES = ("last", "first", "both")
# The most tokens of an untrusted chunk the model reads by default; the rest is cut. Every row is laid
# out as if each chunk were this long, so it sets the cost of every call: 512 (about 2,000
# characters of English) was chosen so that a short answer fits a laptop (docs/generate.md, "How
# long a chunk may be"); 1,024 took about twice the time and 0.6 GB more.
MAX_UNTRUSTED_TOKENS = 512
QuestionPlace = Literal["last", "first", "both"]
_EMPTY = PromptTemplate((), ())


def untrusted_name(j: int) -> str:
    """The group name of untrusted chunk j (0-based): ``untrusted-1``, ``untrusted-2``, ..."""
    return f"{RESERVED_PREFIX}{j + 1}"


def _ids(tokenizer: Any, text: str, *, untrusted: bool = False) -> tuple[int, ...]:
    if not text:
        return ()
    kwargs = {"split_special_tokens": True} if untrusted else {}
    return tuple(tokenizer(text, add_special_tokens=False, **kwargs)["input_ids"])


def build_prompt_contexts(prompt: str, contexts: Sequence[tuple[str, Sequence[Span]]], untrusted: Sequence[str],
                          tokenizer: Any, *, template: PromptTemplate, placeholder: int | Placeholders,
                          instruction: str = DEFAULT_GENERATE_INSTRUCTION, stand_in: str = STAND_IN,
                          question: QuestionPlace = "last", groups: GroupSpec = "by-label",
                          on_overlap: Literal["merge", "error"] = "merge",
                          max_untrusted_tokens: int | None = MAX_UNTRUSTED_TOKENS,
                          layout_limit: int | None = None) -> DocumentContexts:
    """The rows of ``prompt`` over trusted ``contexts`` ((text, spans) each) and ``untrusted``
    chunks (see the module docstring). Groups: the span groups (sorted), then ``untrusted-j``.
    ``question``: the "Question: ..." line after the documents (``"last"``), before them, after
    the instruction (``"first"``, which the rows then share), or in both places (``"both"``).
    ``max_untrusted_tokens``: the tokens of a chunk its row reads (:func:`untrusted_cap`; None:
    as many as keep the layout within ``layout_limit``, up to :data:`MAX_UNTRUSTED_TOKENS`)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidInputError("the prompt is empty: give the question or task to answer")
    if question not in QUESTION_PLACES:
        raise InvalidParameterError(f"question must be one of {QUESTION_PLACES}, got {question!r}")
    for j, chunk in enumerate(untrusted):
        if not isinstance(chunk, str) or not chunk.strip():
            raise InvalidInputError(f"untrusted chunk {j + 1} is empty or not a string")
    docs = [build_contexts(text, spans, tokenizer, template=_EMPTY, placeholder=placeholder, groups=groups,
                           on_overlap=on_overlap) for text, spans in contexts]
    names = sorted({g.name for d in docs for g in d.groups})  # never reserved: build_contexts refuses those
    if max_untrusted_tokens is not None and (isinstance(max_untrusted_tokens, bool)
                                             or not isinstance(max_untrusted_tokens, int) or max_untrusted_tokens < 1):
        raise InvalidParameterError(f"max_untrusted_tokens must be an integer >= 1, got {max_untrusted_tokens!r}")
    stand = _ids(tokenizer, stand_in, untrusted=True)
    if not stand:
        raise InvalidInputError("the stand-in for untrusted chunks is empty; give a short text such as "
                                f"{STAND_IN!r}")
    chunks = [_ids(tokenizer, c, untrusted=True) for c in untrusted]  # cut below, once the cap is known
    n_docs = len(docs) + len(chunks)
    head = [_ids(tokenizer, (SEPARATOR if k else "") + HEADER.format(n=k + 1)) for k in range(n_docs)]
    asked = QUESTION.format(prompt=prompt)
    lead = _ids(tokenizer, "".join(x + SEPARATOR for x in (instruction, asked if question != "last" else "") if x)
                ) if n_docs else ()
    tail = (_ids(tokenizer, SEPARATOR + asked) if question != "first" else ()) if n_docs else _ids(tokenizer, prompt)
    own = [{g.name: i + 1 for i, g in enumerate(d.groups)} for d in docs]  # group -> its row, per document

    def row(group: str | None = None, chunk: int | None = None, original: bool = False) -> tuple[int, ...]:
        """The ids that span ``group``'s or untrusted ``chunk``'s row reads (neither: the public row)."""
        body = list(lead)
        for k, d in enumerate(docs):
            body += head[k] + (d.original if original else d.rows[own[k].get(group, 0)])
        for j, ids in enumerate(chunks):
            body += head[len(docs) + j] + (ids if original or j == chunk else stand)
        return template.wrap(body + list(tail))

    public = row()  # reads the stand-in for every chunk: the cap may depend on it
    cap = untrusted_cap(max_untrusted_tokens, stand_tokens=len(stand), public_tokens=len(public),
                        layout_limit=layout_limit)
    chunks = [ids[:cap] for ids in chunks]  # cut silently: the cap is public, whether a chunk reached it is not
    info = [GroupInfo(n, sum(g.n_spans for d in docs for g in d.groups if g.name == n),
                      sum(g.n_tokens for d in docs for g in d.groups if g.name == n)) for n in names]
    info += [GroupInfo(untrusted_name(j), 1, cap, untrusted=True) for j in range(len(chunks))]  # the cap: public
    rows = [public, *(row(group=n) for n in names), *(row(chunk=j) for j in range(len(chunks)))]
    longest = len(public) + cap - len(stand) if chunks else None  # a chunk's row at most
    return DocumentContexts(tuple(rows), tuple(info), sum(d.document_tokens for d in docs), row(original=True),
                            _public_prefix(len(template.before) + len(lead), head, docs, public), longest, cap)


def untrusted_cap(requested: int | None, *, stand_tokens: int, public_tokens: int, layout_limit: int | None) -> int:
    """The number of tokens of an untrusted chunk its row reads, from public data only.

    ``requested``, if given; it must hold the stand-in (``stand_tokens``), or the neighbour the
    guarantee compares with, a chunk whose text IS the stand-in, would be cut too and its row
    would no longer be the public row (InvalidParameterError). None: the most tokens, up to
    :data:`MAX_UNTRUSTED_TOKENS`, for which a chunk's row, ``public_tokens`` - ``stand_tokens``
    + cap, stays within ``layout_limit`` (the model's context less T; no limit: the maximum),
    and never less than the stand-in (the fit check then refuses the prompt).
    """
    if requested is None:
        room = MAX_UNTRUSTED_TOKENS if layout_limit is None else layout_limit - public_tokens + stand_tokens
        return max(stand_tokens, min(MAX_UNTRUSTED_TOKENS, room))
    if requested < stand_tokens:
        raise InvalidParameterError(
            f"max_untrusted_tokens={requested} is shorter than the stand-in ({stand_tokens} tokens): the neighbour "
            "the guarantee compares with, a chunk whose text is the stand-in, would be cut too; raise "
            "max_untrusted_tokens or shorten the stand-in")
    return requested


def _public_prefix(start: int, head: Sequence[Sequence[int]], docs: Sequence[DocumentContexts],
                   public: Sequence[int]) -> int:
    """Where the first private token of the rows can be: the first hidden span token of a
    trusted document, else the first untrusted chunk (after its header), else nowhere. The
    position follows from the template, the headers and the span positions: public data."""
    at = start
    for k, d in enumerate(docs):
        at += len(head[k])
        if d.public_prefix < d.document_tokens:
            return at + d.public_prefix
        at += d.document_tokens
    return at + len(head[len(docs)]) if len(head) > len(docs) else len(public)

