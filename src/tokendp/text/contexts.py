"""Public and private contexts of a document, as rows of token ids of equal length.

DP-Fusion (Thareja et al., ICLR 2026, Sec. 3) runs the language model on 1 + m contexts of
the same prompt: the *public* one, where every sensitive span is hidden, and one *private*
context per privacy group i, where only the spans of group i are shown. Hiding works at
the token level so that all rows have the same length:

1. the document is tokenised once, with character offsets;
2. a token is *in* group g when its character range overlaps a span of group g (a token
   that a span boundary splits belongs to the span, Unicode bytes included);
3. in a row, every token that is in some group other than the row's own becomes ONE
   placeholder token. Row 0 (public) hides all of them; row i shows exactly the tokens whose
   only group is i.

Which placeholder a hidden token becomes is the model's *placeholder style*
(:class:`Placeholders`, from its ``tokendp.json``): ``"single"`` (the default) hides every
token with the same id (``_``); ``"typed"`` hides a token of a span labelled L with L's own
marker id (``PERSON`` -> ``Name``, ``DATETIME`` -> ``Date``, ...), so that the model sees the kind
of each slot. Labels are public under the adjacency (docs/privacy.md), so a typed row shows
nothing a single-placeholder row does not already make public; it is still one placeholder per
hidden token, and still a function of the span positions, lengths and labels and the text
outside the spans only.

A token that overlaps spans of two different groups is therefore hidden in BOTH groups'
rows (and in the public row): no row ever shows private text of a group it is not about.
Same-label overlaps simply merge. The number of tokens under each span is public (it fixes
the row length), as are span positions and labels (the typed style shows them); nothing else about the private text
reaches the public row. One caveat of tokenising once: text next to a span is segmented by
the tokenizer with the span's boundary characters in view; tokens that overlap the span are
hidden, but where a neighbouring token boundary falls may depend on those characters.

The prompt template wraps the document: template parts and the document are tokenised
separately and concatenated as ids, so template tokens never merge with document tokens.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.spans import Span

DEFAULT_INSTRUCTION = (
    "Paraphrase the following text. Keep its meaning and structure, and do not add facts.")
PLAIN_TEMPLATE = "{instruction}\n\nText:\n{document}\n\nParaphrase:\n"
DEFAULT_PLACEHOLDER = "_"
PLACEHOLDER_STYLES = ("single", "typed")
# Candidate markers of the typed style, per label, best first: the first one that is a single
# token of the model's tokenizer is the label's marker (a capitalised English word the base
# model already knows, else a special token ``<|LABEL|>`` a model may add). A label with none
# (a user's own label) is hidden with the default placeholder.
TYPED_MARKERS: dict[str, tuple[str, ...]] = {
    "PERSON": ("Name", "NAME", "<|PERSON|>"),
    "ORG": ("Organisation", "Organization", "Office", "<|ORG|>"),
    "LOC": ("Place", "Location", "LOC", "<|LOC|>"),
    "DATETIME": ("Date", "DATE", "<|DATETIME|>"),
    "DATE": ("Date", "DATE", "<|DATE|>"),
    "DURATION": ("Period", "Duration", "<|DURATION|>"),
    "CODE": ("Code", "CODE", "<|CODE|>"),
    "QUANTITY": ("Number", "NUMBER", "<|QUANTITY|>"),
    "DEM": ("Role", "Group", "<|DEM|>"),
    "OCCUPATION": ("Job", "Occupation", "Role", "<|OCCUPATION|>"),
    "MISC": ("Other", "OTHER", "<|MISC|>"),
}
SINGLE_GROUP = "ALL"
# A label may name its group too: ``GROUP/LABEL`` (:func:`qualified_label`; the vault's
# ``unit-001/PERSON``) is a span of LABEL that belongs to GROUP alone. Its marker is LABEL's.
QUALIFIER = "/"
RESERVED_PREFIX = "untrusted-"  # names the untrusted chunks of generate; never a span label or group
_SENTINEL = "\u2063TOKENDP_DOCUMENT\u2063"

GroupSpec = Literal["by-label", "single"] | Mapping[str, str]


@dataclass(frozen=True)
class PromptTemplate:
    """Token ids before and after the document."""

    before: tuple[int, ...]
    after: tuple[int, ...]

    def wrap(self, document_ids: Sequence[int]) -> tuple[int, ...]:
        return (*self.before, *document_ids, *self.after)


@dataclass(frozen=True)
class GroupInfo:
    """A privacy group in one document: its name, how many spans and tokens it hides, and whether
    it is an untrusted chunk (set by the code that builds the rows, never read from a name)."""

    name: str
    n_spans: int
    n_tokens: int
    untrusted: bool = False


@dataclass(frozen=True)
class DocumentContexts:
    """The 1 + m rows of one document (row 0 public) and the m groups they are about.

    ``original`` is the document with nothing hidden (for comparisons without privacy).
    ``public_prefix``: the leading tokens before the first hidden one, which every row holds
    alike; a function of the template and the span positions only, which are public
    (docs/privacy.md, "Equal rows, equal logits"). ``public_length``: the length every row is
    laid out in when some row's length is private (an untrusted chunk's), else None.
    ``max_untrusted_tokens``: the public cap on an untrusted chunk's tokens, for the rows of a
    prompt (:func:`tokendp.text.prompts.build_prompt_contexts`), else None.
    """

    rows: tuple[tuple[int, ...], ...]
    groups: tuple[GroupInfo, ...]
    document_tokens: int
    original: tuple[int, ...]
    public_prefix: int = 0
    public_length: int | None = None
    max_untrusted_tokens: int | None = None

    @property
    def length(self) -> int:
        return len(self.rows[0])


# ---------------------------------------------------------------------------- templates
def _adds_bos(tokenizer: Any) -> bool:
    bos = tokenizer.bos_token_id
    return bos is not None and tokenizer("a")["input_ids"][:1] == [bos]


def _ids(tokenizer: Any, text: str) -> tuple[int, ...]:
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else ()


def prompt_template(tokenizer: Any, *, options: Mapping[str, Any] | None = None,
                    instruction: str | None = None, template: str | None = None) -> PromptTemplate:
    """The template a model reads the document in.

    Order of precedence: an explicit ``template`` (a string with ``{document}`` and optionally
    ``{instruction}``); the model directory's ``tokendp.json`` ``"prompt_template"``; the
    tokenizer's chat template (one user turn: ``instruction`` with the document in place of its
    ``{document}``, else the instruction, a blank line and the document, or the document alone
    when ``instruction`` is empty; then the generation prompt); else :data:`PLAIN_TEMPLATE`. A BOS token is prepended when the tokenizer
    adds one and the template is not a chat template (which renders its own).
    """
    instruction = DEFAULT_INSTRUCTION if instruction is None else instruction
    if template is None and options and "prompt_template" in options:
        template = str(options["prompt_template"])
    chat = template is None and getattr(tokenizer, "chat_template", None)
    if chat:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": instruction.replace("{document}", _SENTINEL) if "{document}" in instruction
              else f"{instruction}\n\n{_SENTINEL}" if instruction else _SENTINEL}],
            tokenize=False, add_generation_prompt=True)
    else:
        template = PLAIN_TEMPLATE if template is None else template
        if template.count("{document}") != 1:
            raise InvalidParameterError("a prompt template must contain '{document}' exactly once")
        rendered = template.replace("{instruction}", instruction).replace("{document}", _SENTINEL)
    if rendered.count(_SENTINEL) != 1:
        raise InvalidParameterError("the chat template did not render the document exactly once; "
                                    "pass a plain template instead")
    before, after = rendered.split(_SENTINEL)
    bos = (tokenizer.bos_token_id,) if not chat and _adds_bos(tokenizer) else ()
    return PromptTemplate(bos + _ids(tokenizer, before), _ids(tokenizer, after))


PASSAGE_HISTORIES = ("exchange", "none")


@dataclass(frozen=True)
class HistoryTemplate:
    """The prompt of a passage after the first (docs/sanitize.md, "Long documents"): the
    exchange before it (the previous passage as the public row shows it, and the rewrite released
    for it), then this passage in the template; or, when ``alone``, this passage in the template
    as the first one reads it. Every part is public."""

    first: tuple[int, ...]  # before the previous passage (alone: before this passage)
    middle: tuple[int, ...]  # between the previous passage and its released rewrite
    turn: tuple[int, ...]  # between that rewrite and this passage
    after: tuple[int, ...]  # after this passage: where the rewrite starts
    alone: bool = False  # each passage reads itself only

    def template(self, previous: Sequence[int], released: Sequence[int]) -> PromptTemplate:
        """This passage's template, after ``previous`` (the public row's ids of the previous
        passage) and ``released`` (the token ids released for it), unless ``alone``."""
        if self.alone:
            return PromptTemplate(self.first, self.after)
        return PromptTemplate((*self.first, *previous, *self.middle, *released, *self.turn), self.after)

    def frame(self, previous_tokens: int) -> int:
        """The tokens of a later passage's prompt beside the passage itself, with a previous
        passage and its rewrite of ``previous_tokens`` together."""
        if self.alone:
            return len(self.first) + len(self.after)
        return len(self.first) + len(self.middle) + len(self.turn) + len(self.after) + previous_tokens


_MARKS = ("\u2063TOKENDP_PREVIOUS\u2063", "\u2063TOKENDP_REWRITE\u2063")


def history_template(tokenizer: Any, *, options: Mapping[str, Any] | None = None, instruction: str | None = None,
                     template: str | None = None) -> HistoryTemplate:
    """The :class:`HistoryTemplate` of the template :func:`prompt_template` chooses: a chat
    template renders a user turn (the previous passage), an assistant turn (its rewrite) and the
    user turn of this passage; a plain template is repeated after the rewrite and a blank line.
    The model's ``tokendp.json`` ``"passage_history": "none"`` has each passage read alone, as
    the first does (a model trained on single turns copies an earlier turn's rewrite)."""
    single = prompt_template(tokenizer, options=options, instruction=instruction, template=template)
    history = (options or {}).get("passage_history", "exchange")
    if history not in PASSAGE_HISTORIES:
        raise InvalidParameterError(f"tokendp.json has passage_history {history!r}; use one of "
                                    f"{', '.join(PASSAGE_HISTORIES)}")
    if history == "none":
        return HistoryTemplate(single.before, (), (), single.after, alone=True)
    instruction = DEFAULT_INSTRUCTION if instruction is None else instruction
    if template is None and options and "prompt_template" in options:
        template = str(options["prompt_template"])
    if template is not None or not getattr(tokenizer, "chat_template", None):
        again = single.before[1:] if single.before[:1] == (tokenizer.bos_token_id,) else single.before
        return HistoryTemplate(single.before, single.after, _ids(tokenizer, "\n\n") + again, single.after)

    def user(mark: str) -> dict[str, str]:
        text = (instruction.replace("{document}", mark) if "{document}" in instruction
                else f"{instruction}\n\n{mark}" if instruction else mark)
        return {"role": "user", "content": text}

    rendered = tokenizer.apply_chat_template([user(_MARKS[0]), {"role": "assistant", "content": _MARKS[1]},
                                              user(_SENTINEL)], tokenize=False, add_generation_prompt=True)
    if any(rendered.count(mark) != 1 for mark in (*_MARKS, _SENTINEL)):
        raise InvalidParameterError("the chat template did not render a two-turn exchange; pass a plain template "
                                    "or rewrite the document in one passage")
    first, rest = rendered.split(_MARKS[0])
    middle, rest = rest.split(_MARKS[1])
    turn, after = rest.split(_SENTINEL)
    return HistoryTemplate(_ids(tokenizer, first), _ids(tokenizer, middle), _ids(tokenizer, turn),
                           _ids(tokenizer, after))


def placeholder_id(tokenizer: Any, *, options: Mapping[str, Any] | None = None,
                   placeholder: str | None = None) -> int:
    """The single token id that hides a private token.

    ``placeholder`` if given, else the model's ``tokendp.json`` ``"placeholder"``, else
    :data:`DEFAULT_PLACEHOLDER`; it must tokenise to exactly one id.
    """
    if placeholder is None:
        placeholder = str((options or {}).get("placeholder", DEFAULT_PLACEHOLDER))
    ids = _ids(tokenizer, placeholder)
    if len(ids) != 1:
        raise InvalidParameterError(
            f"the placeholder {placeholder!r} is {len(ids)} tokens for this tokenizer; choose a string "
            "that is exactly one token (for example '_' or a special token of the model)")
    return ids[0]


@dataclass(frozen=True)
class Placeholders:
    """The ids that hide private tokens.

    ``default`` hides a token of a label without a marker of its own; ``by_label`` holds
    ``(label, id)`` pairs, sorted, one per label the style types (empty for the single style).
    A token overlapping spans of several labels takes the marker of the first span (by start,
    end, label); all of it is a function of public span positions and labels.
    """

    default: int
    by_label: tuple[tuple[str, int], ...] = ()

    @property
    def style(self) -> str:
        return "typed" if self.by_label else "single"

    def of(self, label: str) -> int:
        """The id that hides a token of a span labelled ``label``: the label's own marker, else
        (a qualified label ``GROUP/LABEL``, :func:`qualified_label`) its base label's, else the
        default."""
        markers = dict(self.by_label)
        return markers.get(label, markers.get(label.rpartition(QUALIFIER)[2], self.default))

    @property
    def ids(self) -> frozenset[int]:
        """Every id that may stand for a hidden token (a model is not expected to write them)."""
        return frozenset({self.default, *(i for _, i in self.by_label)})


def typed_markers(tokenizer: Any, labels: Iterable[str] = TYPED_MARKERS) -> dict[str, str]:
    """For each label of ``labels`` that has a candidate in :data:`TYPED_MARKERS` (or
    ``<|LABEL|>``) that is a single token of ``tokenizer``, the first such candidate."""
    out = {}
    for label in labels:
        for marker in (*TYPED_MARKERS.get(label, ()), f"<|{label}|>"):
            if len(_ids(tokenizer, marker)) == 1:
                out[label] = marker
                break
    return out


def placeholders(tokenizer: Any, *, options: Mapping[str, Any] | None = None,
                 placeholder: str | None = None) -> Placeholders:
    """The model's placeholders, from its ``tokendp.json`` (``options``).

    ``"placeholder_style"``: ``"single"`` (default) or ``"typed"``. Typed: ``"placeholders"``
    (a mapping label -> marker string, each exactly one token) if given, else
    :func:`typed_markers`. ``placeholder`` (else ``"placeholder"``, else ``_``) is the default
    id (:func:`placeholder_id`): every hidden token's in the single style, a label without a
    marker's in the typed one.
    """
    options = options or {}
    default = placeholder_id(tokenizer, options=options, placeholder=placeholder)
    style = options.get("placeholder_style", "single")
    if style not in PLACEHOLDER_STYLES:
        raise InvalidParameterError(
            f"tokendp.json has placeholder_style {style!r}; use one of {', '.join(PLACEHOLDER_STYLES)}")
    if style == "single":
        return Placeholders(default)
    markers = options.get("placeholders")
    if markers is None:
        markers = typed_markers(tokenizer)
    elif not isinstance(markers, Mapping) or not all(isinstance(v, str) for v in markers.values()):
        raise InvalidParameterError('tokendp.json "placeholders" must map each label to a marker string')
    if not markers:
        raise InvalidParameterError("the typed placeholder style found no single-token marker for any label in "
                                    "this tokenizer; give tokendp.json a \"placeholders\" mapping")
    return Placeholders(default, tuple(sorted(
        (str(label), placeholder_id(tokenizer, placeholder=marker)) for label, marker in markers.items())))


@functools.lru_cache(maxsize=16)
def placeholder_runs(tokenizer: Any, default: int) -> tuple[int, ...]:
    """The ids decoding never releases, so that no output holds a run of placeholders ("___"),
    which the rows show wherever a span was: when the default placeholder is one punctuation
    mark (``_``), every token written in that mark alone, with or without spaces around it
    ("_", " ___"), and every token that holds it twice in a row ("__init"), so that no three
    tokens can write it three times in a row; when it is a special token, its id. A placeholder
    that is a word, as the typed markers ("Name", "Date") are, stays a word. A function of the
    public vocabulary, applied to every row alike (docs/privacy.md, "Common ground": decoding
    constraints are public)."""
    if default in set(getattr(tokenizer, "all_special_ids", ())):
        return (default,)
    mark = tokenizer.decode([default]).strip()
    if len(set(mark)) != 1 or mark.isalnum():
        return ()
    char = mark[0]
    maybe = [i for piece, i in tokenizer.get_vocab().items() if char in piece]  # few: decoded one by one
    return tuple(sorted(i for i in maybe if set((text := tokenizer.decode([i])).strip()) == {char} or 2 * char in text))


# ---------------------------------------------------------------------------- groups
def qualified_label(group: str, label: str) -> str:
    """``GROUP/LABEL``: a span label that is unique to ``group`` (a label -> group mapping then
    puts spans of one label in several groups) and is hidden with ``label``'s marker
    (:meth:`Placeholders.of`). Both parts are public."""
    return f"{group}{QUALIFIER}{label}"


def group_of_labels(labels: Sequence[str], groups: GroupSpec) -> dict[str, str]:
    """Map each span label to its privacy group.

    ``"by-label"``: one group per label; ``"single"``: all labels in one group
    (:data:`SINGLE_GROUP`); a mapping ``label -> group`` must cover every label present.
    Labels and group names in the reserved namespace (:data:`RESERVED_PREFIX`, any case) are
    refused: that namespace names untrusted chunks, which no span may pose as.
    """
    _check_not_reserved(labels, "span label")
    if groups == "by-label":
        return {lab: lab for lab in labels}
    if groups == "single":
        return {lab: SINGLE_GROUP for lab in labels}
    if not isinstance(groups, Mapping):
        raise InvalidParameterError(
            f"groups must be 'by-label', 'single' or a mapping label -> group, got {groups!r}")
    missing = sorted(set(labels) - set(groups))
    if missing:
        raise InvalidInputError(f"span labels {missing} have no group in the groups mapping; add them")
    out = {lab: str(groups[lab]) for lab in labels}
    _check_not_reserved(out.values(), "privacy group")
    return out


def is_reserved(name: str) -> bool:
    """Whether ``name`` is in the namespace of untrusted chunks (:data:`RESERVED_PREFIX`, any case)."""
    return name.casefold().startswith(RESERVED_PREFIX)


def _check_not_reserved(names: Iterable[str], what: str) -> None:
    reserved = sorted({n for n in names if is_reserved(n)})
    if reserved:
        raise InvalidInputError(f"{what}(s) {reserved} start with {RESERVED_PREFIX!r} (in any case), which names "
                                "untrusted chunks; rename them")


# ---------------------------------------------------------------------------- validation
def validate_spans(text: str, spans: Sequence[Span], *,
                   on_overlap: Literal["merge", "error"] = "merge") -> list[Span]:
    """Check spans against the document; return them sorted. Messages carry offsets and labels only."""
    if not text or not text.strip():
        raise InvalidInputError("the document is empty")
    out = sorted(spans)
    for i, s in enumerate(out):
        if not isinstance(s, Span):
            raise InvalidInputError("spans must be tokendp.text.Span objects (or dicts with start, end, label)")
        if s.end > len(text):
            raise InvalidInputError(
                f"span {i} (label {s.label}) ends at character {s.end}, past the end of the "
                f"document ({len(text)} characters): offsets must index the same text")
    if on_overlap == "error":
        for a, b in zip(out, out[1:]):
            if a.overlaps(b) and a.label != b.label:
                raise InvalidInputError(
                    f"spans [{a.start}, {a.end}) ({a.label}) and [{b.start}, {b.end}) ({b.label}) overlap; "
                    "fix the spans or allow overlaps (their tokens are then hidden in both groups' rows)")
    elif on_overlap != "merge":
        raise InvalidParameterError(f"on_overlap must be 'merge' or 'error', got {on_overlap!r}")
    return out


# ---------------------------------------------------------------------------- contexts
def token_offsets(tokenizer: Any, text: str) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The ids of ``text`` tokenised once, and where each token starts and ends (characters)."""
    if not getattr(tokenizer, "is_fast", False):
        raise InvalidParameterError("building contexts needs a fast tokenizer (character offsets)")
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offs = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)  # (L, 2)
    starts, ends = offs[:, 0], np.maximum(offs[:, 1], offs[:, 0] + 1)  # zero-width -> one char
    return list(enc["input_ids"]), starts, ends


def covered(starts: np.ndarray, ends: np.ndarray, spans: Sequence[Span]) -> np.ndarray:
    """(L,) whether each token [start, end) overlaps some span: the tokens row 0 hides.

    O(L + S + characters): a token overlaps a span iff it holds a character some span covers,
    counted by prefix sums over the characters (not one pass over the tokens per span)."""
    if not spans:
        return np.zeros(len(starts), dtype=bool)
    n = max(int(ends.max(initial=0)), max(s.end for s in spans))
    depth = np.zeros(n + 1, dtype=np.int64)  # (n+1,): +1 where a span starts, -1 where it ends
    np.add.at(depth, [s.start for s in spans], 1)
    np.add.at(depth, [s.end for s in spans], -1)
    inside = np.concatenate(([0], np.cumsum(np.cumsum(depth)[:-1] > 0)))  # (n+1,): covered characters before c
    return inside[ends] > inside[starts]


def _range_min(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """(L,) min of ``values[start:end]`` for each nonempty range, by a sparse table: level k holds
    the minima of the windows of 2^k values, and a range is two windows of its length's largest 2^k."""
    levels = [values]  # levels[k]: (n - 2^k + 1,)
    while 2 ** len(levels) <= len(values):
        half = 2 ** (len(levels) - 1)
        levels.append(np.minimum(levels[-1][:-half], levels[-1][half:]))
    k = (np.frexp(ends - starts)[1] - 1).astype(np.int64)  # (L,): floor(log2(length)), exactly
    out = np.empty(len(starts), dtype=values.dtype)
    for level in np.unique(k).tolist():
        at = k == level
        out[at] = np.minimum(levels[level][starts[at]], levels[level][ends[at] - 2 ** level])
    return out


def hidden_ids(starts: np.ndarray, ends: np.ndarray, spans: Sequence[Span],
               placeholder: int | Placeholders) -> np.ndarray:
    """(L,) the id each token would be hidden with: the marker of the first span (sorted) that
    overlaps it, else the default placeholder. Public: positions and labels only."""
    ph = placeholder if isinstance(placeholder, Placeholders) else Placeholders(int(placeholder))
    out = np.full(len(starts), ph.default, dtype=np.int64)  # (L,)
    if not (ph.by_label and spans):
        return out
    order = sorted(spans)
    n = max(int(ends.max(initial=0)), max(s.end for s in order))
    first = np.full(n, len(order), dtype=np.int64)  # (n,): the first span (in order) covering each character
    for k in range(len(order) - 1, -1, -1):  # the first span in order is written last, so it wins
        first[order[k].start:order[k].end] = k
    lowest = _range_min(first, starts, ends)  # (L,): the first span overlapping each token
    found = lowest < len(order)
    markers = np.asarray([ph.of(s.label) for s in order], dtype=np.int64)  # (S,)
    out[found] = markers[lowest[found]]
    return out


def build_contexts(text: str, spans: Sequence[Span], tokenizer: Any, *, template: PromptTemplate,
                   placeholder: int | Placeholders, groups: GroupSpec = "by-label",
                   on_overlap: Literal["merge", "error"] = "merge",
                   offsets: tuple[Sequence[int], np.ndarray, np.ndarray] | None = None) -> DocumentContexts:
    """Build the public row and one private row per group (see the module docstring).

    ``placeholder``: one id for every hidden token, or the model's :class:`Placeholders`.
    ``offsets``: ``text``'s :func:`token_offsets`, when the caller has them already."""
    spans = validate_spans(text, spans, on_overlap=on_overlap)
    group_of = group_of_labels(sorted({s.label for s in spans}), groups)
    names = sorted(set(group_of.values()))
    ids, starts, ends = offsets if offsets is not None else token_offsets(tokenizer, text)
    of_group = [[s for s in spans if group_of[s.label] == name] for name in names]
    member = np.stack([covered(starts, ends, g) for g in of_group]) if names else np.zeros((0, len(ids)), bool)
    n_spans = [len(g) for g in of_group]  # member: (m, L), token overlaps a span of g
    doc = np.asarray(ids, dtype=np.int64)  # (L,)
    hidden_any = member.any(0)  # (L,)
    only = member & (member.sum(0) == 1)  # (m, L): token's one and only group is g
    hide = hidden_ids(starts, ends, spans, placeholder)  # (L,)
    rows = [np.where(hidden_any, hide, doc)]
    rows += [np.where(hidden_any & ~only[g], hide, doc) for g in range(len(names))]
    info = tuple(GroupInfo(n, n_spans[g], int(member[g].sum())) for g, n in enumerate(names))
    first_hidden = int(hidden_any.argmax()) if hidden_any.any() else len(ids)
    return DocumentContexts(tuple(template.wrap(r.tolist()) for r in rows), info, len(ids),
                            template.wrap(ids), len(template.before) + first_hidden)
