"""Training examples for the rewriter objective, with a length curriculum.

Every example is ``ids(<|doc|>) + ids(source) + ids(<|rewrite|>) + ids(target) + ids(<|end|>)``,
the same concatenation of separately tokenised parts that the engine builds from
``tokendp.json``. The loss covers the target and ``<|end|>`` (weight 1) and, for natural-text
copy examples, the source tokens with a small weight (so the model is also a plain language
model of documents, which fillers and perplexity need).

Kinds of example:
- ``random``: copy a sequence of uniformly random token ids (teaches copying fast);
- ``wiki`` / ``synth``: copy a detokenised WikiText excerpt / a synthetic PII document;
- ``fill`` / ``partial``: the source has EVERY token that overlaps an (every / some) entity
  span replaced by one ``<|mask|>`` id (token count kept, as in the engine's public context);
  the target is the document with FRESH entities in those slots, so the model learns to write
  plausible fillers and never to decode masked values;
- ``wikifill``: the same on WikiText prose, masking some pseudo-entities (capitalised word
  runs, numbers) and filling them with fresh Faker names, places, organisations or numbers,
  so copying-with-fillers is also learned on natural text, not only on templates.

Fill targets are in lockstep with their source (:func:`lockstep_fill`): a run of k placeholders
becomes exactly k filler tokens, so target token t always sits opposite source token t. The
model then keeps its place in the document by the constant offset it learns from copying;
fillers of another length would shift the offset at every run, which a small model cannot
follow (it loses the thread of the document after the first placeholders).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from transformers import PreTrainedTokenizerFast

from tokendp.models.training.synthetic import Document, SyntheticDocs
from tokendp.models.training.tokenizer import DOC, END, MASK, REWRITE
from tokendp.models.training.wikitext import sentences
from tokendp.text.spans import Span

KINDS = ("random", "wiki", "synth", "fill", "partial", "wikifill")
# Pseudo-entities in WikiText: runs of capitalised words (not sentence-initial) and numbers.
_PSEUDO_ENTITY = re.compile(r"(?<=[a-z,;:(] )[A-Z][\w'-]+(?: [A-Z][\w'-]+)*|\b\d[\d,./]*\b")


@dataclass(frozen=True)
class Example:
    """Token ids and the loss weight of predicting each id from its prefix."""

    kind: str
    ids: list[int]
    weights: list[float]


def _encode_masked(tokenizer: PreTrainedTokenizerFast, text: str, spans: list[Span]
                   ) -> tuple[list[int], list[int], list[tuple[int, int]], list[bool]]:
    """Ids of ``text``, the same ids with every token overlapping a span as ``<|mask|>``, the
    tokens' character offsets, and whether each token is masked."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    hidden = [any(s.start < e and b < s.end for s in spans) for b, e in offsets]
    mask_id = tokenizer.convert_tokens_to_ids(MASK)
    return ids, [mask_id if h else t for t, h in zip(ids, hidden)], offsets, hidden


def masked_ids(tokenizer: PreTrainedTokenizerFast, text: str, spans: list[Span]) -> list[int]:
    """Token ids of ``text`` where every token overlapping a span becomes ``<|mask|>``."""
    return _encode_masked(tokenizer, text, spans)[1]


def lockstep_fill(tokenizer: PreTrainedTokenizerFast, text: str, spans: list[Span],
                  fresh: Callable[[int], str], *, tries: int = 32) -> tuple[list[int], list[int]]:
    """(source, target) of one fill example, of equal length.

    source: :func:`masked_ids` of ``text`` (every token that overlaps a span is ``<|mask|>``).
    target: the ids of ``text``, except that each run of k placeholders becomes k tokens of a
    filler: the run's text with ``fresh(i)`` in place of each span ``spans[i]`` inside it. Of up
    to ``tries`` fillers the first that is exactly k tokens long is taken; if none is, the
    shortest longer one (or several, joined) is cut to k tokens.
    """
    ids, source, offsets, hidden = _encode_masked(tokenizer, text, spans)
    target, i = list(ids), 0
    while i < len(ids):
        j = i
        while j < len(ids) and hidden[j]:
            j += 1
        if j > i:
            lo, hi = offsets[i][0], offsets[j - 1][1]
            inside = [k for k, s in enumerate(spans) if s.start < hi and lo < s.end]
            target[i:j] = _filler(tokenizer, text, lo, hi, [(spans[k], k) for k in inside],
                                  fresh, j - i, tries)
        i = j + 1
    return source, target


def _filler(tokenizer, text: str, lo: int, hi: int, inside: list[tuple[Span, int]],
            fresh: Callable[[int], str], k: int, tries: int) -> list[int]:
    """Exactly ``k`` token ids for text[lo:hi] with fresh values in the spans ``inside``."""
    def candidate() -> list[int]:
        out, pos = "", lo
        for span, index in inside:
            out += text[pos:max(pos, span.start)] + fresh(index)
            pos = max(pos, span.end)
        return tokenizer(out + text[pos:hi], add_special_tokens=False)["input_ids"]

    longer: list[int] = []
    for _ in range(tries):
        ids = candidate()
        if len(ids) == k:
            return ids
        if len(ids) > k and (not longer or len(ids) < len(longer)):
            longer = ids
    while len(longer) < k:
        more = candidate()
        if not more:
            raise ValueError("a filler is empty: fresh values must not be empty strings")
        longer += more
    return longer[:k]


def curriculum_max_doc(progress: float, *, start: int, end: int, ramp: float) -> int:
    """Longest source length (tokens) at ``progress`` in [0, 1]: quadratic from start to end
    (reached at ``ramp``), so copying is learned on short, cheap sequences first."""
    return int(start + (end - start) * min(1.0, progress / ramp) ** 2)


def kind_weights(progress: float, *, fill_stage: bool = False) -> list[float]:
    """Mixture over KINDS.

    First stage: random sequences are 60% up to 15% progress, then fall to 15% at 40%.
    Fill stage (continued training of a model that already copies): mostly copying around
    placeholders (fill, partial, wikifill: 70%), with enough plain copying to keep it.
    """
    if fill_stage:
        return [0.1, 0.1, 0.1, 0.25, 0.15, 0.3]
    r = min(0.6, max(0.15, 0.6 - 0.45 * (progress - 0.15) / 0.25))
    rest = 1.0 - r
    return [r, 0.22 * rest, 0.18 * rest, 0.2 * rest, 0.1 * rest, 0.3 * rest]


class ExampleStream:
    """Seeded source of training batches."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, paragraphs: list[str], *,
                 seed: int, lm_weight: float = 0.1, max_doc: int = 512,
                 min_doc: int = 16, ramp: float = 0.6, fill_stage: bool = False) -> None:
        self.tok = tokenizer
        self.paragraphs = paragraphs
        self.rng = random.Random(seed)
        self.synth = SyntheticDocs(seed)
        self.lm_weight = lm_weight
        self.max_doc, self.min_doc, self.ramp = max_doc, min_doc, ramp
        self.fill_stage = fill_stage
        self.doc_id, self.rw_id, self.end_id = (tokenizer.convert_tokens_to_ids(t)
                                                for t in (DOC, REWRITE, END))
        self.first_plain = 5  # ids below are special tokens

    def _encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def _example(self, kind: str, source: list[int], target: list[int], src_w: float) -> Example:
        ids = [self.doc_id] + source + [self.rw_id] + target + [self.end_id]
        weights = [0.0] + [src_w] * len(source) + [0.0] + [1.0] * (len(target) + 1)
        # weights[i] is for predicting ids[i]; the first source token follows <|doc|>.
        return Example(kind, ids, weights)

    def _wiki_text(self, n_tokens: int) -> str:
        i = self.rng.randrange(len(self.paragraphs))
        sents = sentences(self.paragraphs[i])
        parts, chars = [], 0
        j = self.rng.randrange(len(sents))
        while chars < 5 * n_tokens and i < len(self.paragraphs):
            parts.append(sents[j])
            chars += len(sents[j]) + 1
            j += 1
            if j == len(sents):
                i, j = i + 1, 0
                sents = sentences(self.paragraphs[i]) if i < len(self.paragraphs) else []
                parts.append("\n")
        return " ".join(parts).replace(" \n ", "\n").strip()

    def _synth_doc(self, n_tokens: int) -> tuple[Document, list[int]]:
        sentences_wanted = max(1, n_tokens // 22)
        while True:
            doc = self.synth.document(sentences_wanted)
            ids = self._encode(doc.text)
            if len(ids) <= max(n_tokens, 24) * 1.3 or sentences_wanted == 1:
                return doc, ids
            sentences_wanted = max(1, sentences_wanted // 2)

    def example(self, kind: str, n_tokens: int) -> Example:
        """One example of ``kind`` whose source has about ``n_tokens`` tokens."""
        if kind == "random":
            seq = [self.rng.randrange(self.first_plain, len(self.tok)) for _ in range(n_tokens)]
            return self._example(kind, seq, seq, 0.0)
        if kind == "wiki":
            ids = self._encode(self._wiki_text(n_tokens))[:n_tokens]
            return self._example(kind, ids, ids, self.lm_weight)
        if kind == "wikifill":
            return self._wikifill(n_tokens)
        doc, ids = self._synth_doc(n_tokens)
        if kind == "synth":
            return self._example(kind, ids, ids, self.lm_weight)
        if kind == "fill" or len(doc.spans) < 2:
            hidden = list(range(len(doc.spans)))
        else:
            hidden = [i for i in range(len(doc.spans)) if self.rng.random() < 0.5] or [0]
        source, target = lockstep_fill(self.tok, doc.text, [doc.spans[i] for i in hidden],
                                       lambda i: self.synth.value(doc.kinds[hidden[i]]))
        return self._example(kind, source, target, 0.0)

    def _fresh_like(self, value: str) -> str:
        """A fresh Faker value of the same broad shape (number, year or capitalised name)."""
        if value[0].isdigit():
            if len(value) == 4 and value.isdigit():
                return str(self.rng.randint(1800, 2024))
            return "".join(str(self.rng.randint(0, 9)) if c.isdigit() else c for c in value)
        return self.synth.value(self.rng.choice(["surname", "first_name", "name", "city",
                                                 "company", "country"]))

    def _wikifill(self, n_tokens: int) -> Example:
        text = self.tok.decode(self._encode(self._wiki_text(n_tokens))[:n_tokens])
        found = [m for m in _PSEUDO_ENTITY.finditer(text) if self.rng.random() < 0.6]
        if not found:
            ids = self._encode(text)
            return self._example("wikifill", ids, ids, 0.0)
        spans = [Span(m.start(), m.end(), "MISC") for m in found]
        source, target = lockstep_fill(self.tok, text, spans,
                                       lambda i: self._fresh_like(found[i].group()))
        return self._example("wikifill", source, target, 0.0)

    def batch(self, progress: float, *, token_budget: int, max_batch: int) -> list[Example]:
        """Examples of similar length for one step: their count fits the token budget."""
        longest = curriculum_max_doc(progress, start=self.min_doc, end=self.max_doc, ramp=self.ramp)
        n_tokens = max(4, int(longest * self.rng.random() ** 0.6))
        size = max(1, min(max_batch, token_budget // (2 * n_tokens + 3)))
        kinds = self.rng.choices(KINDS, weights=kind_weights(progress, fill_stage=self.fill_stage), k=size)
        return [self.example(k, n_tokens) for k in kinds]
