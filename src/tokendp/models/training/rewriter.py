"""Training examples for the rewriter adapter of a pretrained chat model (SmolLM2 + LoRA).

Every example is what the sanitize engine feeds the model, followed by the answer to learn:

    template.before + source ids + template.after  ->  target ids + end of turn

where the template is the model's chat template with the project's default paraphrase
instruction (:func:`tokendp.text.contexts.prompt_template`), and the source is tokenised once
with every token that overlaps a hidden span replaced by ONE placeholder id: the engine's own
public context (:func:`tokendp.text.contexts.build_contexts`), in the placeholder style the
model is trained for (``"single"``: one ``_`` for every label, as the shipped adapter;
``"typed"``: the label's marker, :func:`tokendp.text.contexts.typed_markers`). Loss is on the
target and the end of turn: the token the chat template writes after an assistant answer
(:func:`end_of_turn`: ``<|im_end|>`` for SmolLM2), so the model learns to close its turn where
the document ends. Not the tokenizer's EOS: transformers 4.x converts a Llama-architecture GGUF
with its BOS as EOS (``<|im_start|>`` for SmolLM2), which the shipped adapter learned to emit.

Kinds (weights in :data:`MIXTURE`):

- ``tab_fill``: a TAB tuning-half paragraph (even-indexed documents only), or a passage of 2-4
  consecutive paragraphs (:func:`tab_passages`), with ALL gold spans hidden; the target is the
  text with a FRESH entity of the span's label in each slot, from
  :class:`~tokendp.models.training.coherent.CoherentFillers`: one locale per example (the
  parts of an address agree), dates on a timeline that fits their public roles (births decades
  before events, events in document order), names and titles agreeing with the pronouns around
  them, distinct originals never sharing a filler;
- ``tab_partial``: the same with a random half of the spans hidden, the others shown and copied
  (DP-Fusion's private rows show one group's spans);
- ``tab_copy``: the paragraph with nothing hidden, copied (the rewrite keeps the text);
- ``synth_fill``: a synthetic Faker document in paragraphs (letters and e-mails, medical, court,
  HR; :meth:`~tokendp.models.training.synthetic.SyntheticDocs.paragraphs`) with its entities
  hidden and coherent fresh values of the same slot kinds in the target;
- ``wikifill`` / ``wiki_copy``: WikiText prose with pseudo-entities (capitalised word runs,
  numbers) hidden, each labelled with the kind it is refilled with (PERSON, LOC or ORG;
  DATETIME for a year, QUANTITY for another number) / copied.

Fillers are chosen close to the placeholder run in length: of up to ``tries`` fresh values the
first whose tokens are exactly as many as the run's placeholders is used, else the closest in
length (never cut, unlike the tiny model's lockstep targets: a cut name reads badly).

Endings (docs/sanitize.md, "Endings"): trained on single paragraphs only, the shipped adapter
read "paragraph ends" as "answer ends". So :data:`MULTI` of the TAB and synthetic examples are
2-4 paragraphs joined by a blank line (letters and e-mails always: salutation, body, closing
last), :data:`TRAILING` of all sources (and their targets) keep a trailing newline, and an
example cut to ``max_tokens`` has no end of turn (its answer goes on).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokendp.models.training.coherent import CoherentFillers, is_date_shaped
from tokendp.models.training.examples import _PSEUDO_ENTITY
from tokendp.models.training.synthetic import PARAGRAPH_BREAK, SyntheticDocs
from tokendp.models.training.wikitext import sentences
from tokendp.text.contexts import Placeholders, PromptTemplate, build_contexts, placeholders, prompt_template
from tokendp.text.spans import Span

KINDS = ("tab_fill", "tab_partial", "tab_copy", "synth_fill", "wikifill", "wiki_copy")
MIXTURE = (0.40, 0.12, 0.08, 0.20, 0.14, 0.06)
MULTI = 0.3  # share of TAB and non-letter synthetic examples in 2-4 paragraphs
TRAILING = 0.05  # share of sources (and targets) that end in a newline
_NO_TEMPLATE = PromptTemplate((), ())
_SENTINEL = "\ue000ANSWER\ue000"


def end_of_turn(tokenizer) -> int:
    """The id that closes an assistant answer: the first special token the chat template writes
    after the answer (``<|im_end|>`` for SmolLM2), else the tokenizer's EOS."""
    if getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": "x"},
                                                  {"role": "assistant", "content": _SENTINEL}], tokenize=False)
        after = tokenizer(rendered.split(_SENTINEL, 1)[1], add_special_tokens=False)["input_ids"]
        special = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special} | set(tokenizer.all_special_ids)
        for i in after:
            if i in special:
                return i
    return tokenizer.eos_token_id


def encode_masked(tokenizer, text: str, spans: Sequence[Span], placeholder: int | Placeholders
                  ) -> tuple[list[int], list[int], list[tuple[int, int]], list[bool]]:
    """Ids of ``text``; its public row (:func:`build_contexts`' row 0 without a template, so
    exactly what the engine shows the model); offsets; which tokens are hidden."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    hidden = [any(s.start < max(e, b + 1) and b < s.end for s in spans) for b, e in offsets]
    if not spans:
        return ids, list(ids), offsets, hidden
    public = list(build_contexts(text, spans, tokenizer, template=_NO_TEMPLATE, placeholder=placeholder,
                                 groups="single").rows[0])
    return ids, public, offsets, hidden


def fill_pair(tokenizer, text: str, spans: Sequence[Span], fresh: Callable[[int], str],
              placeholder: int | Placeholders, *, tries: int = 12) -> tuple[list[int], list[int]]:
    """(source, target): source hides every token overlapping ``spans``; target is the text with
    ``fresh(i)`` in place of span i, each placeholder run's filler about as many tokens as the run."""
    ids, source, offsets, hidden = encode_masked(tokenizer, text, spans, placeholder)
    target, i = [], 0
    while i < len(ids):
        if not hidden[i]:
            target.append(ids[i])
            i += 1
            continue
        j = i
        while j < len(ids) and hidden[j]:
            j += 1
        lo, hi = offsets[i][0], max(offsets[j - 1][1], offsets[j - 1][0] + 1)
        inside = [k for k, s in enumerate(spans) if s.start < hi and lo < s.end]
        target += _filler(tokenizer, text, lo, hi, inside, spans, fresh, j - i, tries)
        i = j
    return source, target


def _filler(tokenizer, text, lo, hi, inside, spans, fresh, k, tries) -> list[int]:
    best: list[int] | None = None
    for _ in range(tries):
        out, pos = "", lo
        for index in inside:
            out += text[pos:max(pos, spans[index].start)] + fresh(index)
            pos = max(pos, spans[index].end)
        cand = tokenizer(out + text[pos:hi], add_special_tokens=False)["input_ids"]
        if len(cand) == k:
            return cand
        if best is None or abs(len(cand) - k) < abs(len(best) - k):
            best = cand
    return best or []


@dataclass(frozen=True)
class RewriteExample:
    kind: str
    ids: list[int]
    n_prompt: int  # loss on ids[n_prompt:]


Paragraph = tuple[str, list[Span]]


def tab_documents(tab_dir: str | Path, *, split: str = "tune") -> list[list[Paragraph]]:
    """Every document's non-empty paragraphs (its lines) in order, each with its gold spans, from
    the tuning half (even-indexed sorted doc ids) by default."""
    from tokendp.text.tab import load_tab

    tab = load_tab(tab_dir, split)
    out = []
    for doc_id, text in tab.texts.items():
        pos, paragraphs = 0, []
        for para in text.split("\n"):
            start, pos = pos, pos + len(para) + 1
            if para:
                paragraphs.append((para, sorted(Span(s.start - start, s.end - start, s.label) for s in tab.gold[doc_id]
                                                if start <= s.start and s.end <= start + len(para))))
        out.append(paragraphs)
    return out


def paragraphs_of(documents: Sequence[Sequence[Paragraph]], *, min_chars: int, max_chars: int) -> list[Paragraph]:
    """The paragraphs of ``documents`` of ``min_chars``..``max_chars`` characters."""
    return [p for doc in documents for p in doc if min_chars <= len(p[0]) <= max_chars]


def join_paragraphs(paragraphs: Sequence[Paragraph]) -> Paragraph:
    """The paragraphs joined by a blank line, their spans moved to their place in the joined text."""
    text, spans = "", []
    for para, para_spans in paragraphs:
        text += PARAGRAPH_BREAK if text else ""
        spans += [Span(s.start + len(text), s.end + len(text), s.label) for s in para_spans]
        text += para
    return text, spans


def tab_passages(documents: Sequence[Sequence[Paragraph]], *, min_chars: int, max_chars: int) -> list[Paragraph]:
    """Every run of 2-4 consecutive paragraphs of a document, joined by a blank line
    (:func:`join_paragraphs`), of ``min_chars``..``max_chars`` characters."""
    out = []
    for doc in documents:
        for i in range(len(doc)):
            for j in range(i + 2, min(i + 4, len(doc)) + 1):
                text, spans = join_paragraphs(doc[i:j])
                if min_chars <= len(text) <= max_chars:
                    out.append((text, spans))
    return out


class RewriterStream:
    """Seeded stream of rewriter examples for a chat model's tokenizer."""

    def __init__(self, tokenizer, *, tab: list[Paragraph], wiki: list[str], seed: int,
                 passages: Sequence[Paragraph] = (), max_tokens: int = 320,
                 mixture: Sequence[float] = MIXTURE, options: dict | None = None) -> None:
        """``tab``: single paragraphs; ``passages``: TAB runs of 2-4 paragraphs (:func:`tab_passages`),
        drawn for :data:`MULTI` of the TAB examples; ``options``: the model's ``tokendp.json`` as it
        will be shipped (its placeholder style)."""
        self.tok = tokenizer
        self.template = prompt_template(tokenizer)
        self.placeholders = placeholders(tokenizer, options=options)
        self.end = end_of_turn(tokenizer)
        self.tab, self.passages, self.wiki = tab, passages, wiki
        self.rng = random.Random(seed)
        self.synth = SyntheticDocs(seed)
        self.max_tokens = max_tokens
        self.weights = [w if (k.startswith("tab") and tab) or (k.startswith("wiki") and wiki)
                        or k.startswith("synth") else 0.0 for k, w in zip(KINDS, mixture)]

    def _wrap(self, kind: str, source: list[int], target: list[int]) -> RewriteExample:
        """The prompt and the answer; the answer ends with the end of turn unless it was cut."""
        whole = len(source) <= self.max_tokens and len(target) <= self.max_tokens + 8
        prompt = list(self.template.wrap(source[:self.max_tokens]))
        answer = target[:self.max_tokens + 8] + ([self.end] if whole else [])
        return RewriteExample(kind, prompt + answer, len(prompt))

    def _trailing(self, text: str) -> str:
        """``text``, with a trailing newline for :data:`TRAILING` of the examples."""
        return text + "\n" if self.rng.random() < TRAILING else text

    def _enc(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def example(self, kind: str) -> RewriteExample:
        r = self.rng
        if kind.startswith("tab"):
            pool = self.passages if self.passages and r.random() < MULTI else self.tab
            text, spans = pool[r.randrange(len(pool))]
            text = self._trailing(text)
            if kind == "tab_copy" or not spans:
                ids = self._enc(text)
                return self._wrap(kind, ids, ids)
            hidden = spans if kind == "tab_fill" else [s for s in spans if r.random() < 0.5] or [spans[0]]
            fillers = CoherentFillers(self.synth, r, text, hidden)
            return self._wrap(kind, *fill_pair(self.tok, text, hidden, fillers, self.placeholders))
        if kind == "synth_fill":
            doc = self.synth.paragraphs(r.randint(2, 8), r.randint(2, 4) if r.random() < MULTI else 1)
            text = self._trailing(doc.text)
            fillers = CoherentFillers(self.synth, r, text, doc.spans, doc.kinds)
            return self._wrap(kind, *fill_pair(self.tok, text, doc.spans, fillers, self.placeholders))
        text = self._trailing(self._wiki_text())
        if kind == "wiki_copy":
            ids = self._enc(text)
            return self._wrap(kind, ids, ids)
        found = [m for m in _PSEUDO_ENTITY.finditer(text) if r.random() < 0.6]
        spans = [Span(m.start(), m.end(), self._wiki_label(m.group())) for m in found]
        fillers = CoherentFillers(self.synth, r, text, spans)
        return self._wrap(kind, *fill_pair(self.tok, text, spans, fillers, self.placeholders))

    def _wiki_label(self, entity: str) -> str:
        """The label a WikiText pseudo-entity is hidden (and refilled) as: what the slot shows is
        what the target writes."""
        if entity[0].isdigit():
            return "DATETIME" if is_date_shaped(entity) else "QUANTITY"
        return self.rng.choice(["PERSON", "LOC", "ORG"])

    def _wiki_text(self) -> str:
        para = self.wiki[self.rng.randrange(len(self.wiki))]
        sents = sentences(para)
        j = self.rng.randrange(len(sents))
        out = []
        while j < len(sents) and sum(map(len, out)) < self.rng.randint(250, 1100):
            out.append(sents[j])
            j += 1
        return " ".join(out)

    def batch(self, size: int) -> list[RewriteExample]:
        kinds = self.rng.choices(KINDS, weights=self.weights, k=size)
        return [self.example(k) for k in kinds]


def tiny_model_and_tokenizer(seed: int = 0):
    """A 2-layer Llama and a byte-level BPE tokenizer with a chat template (smoke runs, tests)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from tokendp.models.training.tokenizer import train_tokenizer

    synth = SyntheticDocs(seed)
    base = train_tokenizer([synth.document(6).text for _ in range(300)], vocab_size=400)
    from tokendp.text.contexts import TYPED_MARKERS

    markers = [f"<|{label}|>" for label in TYPED_MARKERS]  # the typed style's markers (typed_markers)
    tok = PreTrainedTokenizerFast(tokenizer_object=base._tokenizer, eos_token="<|end|>",
                                  pad_token="<|pad|>", additional_special_tokens=["<|doc|>", "<|rewrite|>", *markers])
    tok.chat_template = ("{% for m in messages %}<|doc|>{{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}<|rewrite|>{% endif %}")
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    return LlamaForCausalLM(config), tok
