"""Training examples for the rewriter adapter of a pretrained chat model (SmolLM2 + LoRA).

Every example is what the sanitize engine feeds the model, followed by the answer to learn:

    template.before + source ids + template.after  ->  target ids + EOS

where the template is the model's chat template with the project's default paraphrase
instruction (:func:`tokendp.text.contexts.prompt_template`), and the source is tokenised once
with every token that overlaps a hidden span replaced by ONE placeholder id (the engine's
public context, :func:`tokendp.text.contexts.build_contexts`). Loss is on the target and EOS.

Kinds (weights in :data:`MIXTURE`):

- ``tab_fill``: a TAB tuning-half paragraph (even-indexed documents only) with ALL gold spans
  hidden; the target is the paragraph with a FRESH entity of the span's label in each slot
  (:class:`TypedFillers`: Faker names keeping the title, dates keeping their format, codes
  keeping their shape, ...). The same original string gets the same filler within an example
  and different strings get different ones, so different persons get different names;
- ``tab_partial``: the same with a random half of the spans hidden, the others shown and copied
  (DP-Fusion's private rows show one group's spans);
- ``tab_copy``: the paragraph with nothing hidden, copied (the rewrite keeps the text);
- ``synth_fill``: a synthetic Faker document (letters, medical, court, HR) with its entities
  hidden and fresh values of the same slot kind in the target;
- ``wikifill`` / ``wiki_copy``: WikiText prose with pseudo-entities (capitalised word runs,
  numbers) hidden and refilled / copied.

Fillers are chosen close to the placeholder run in length: of up to ``tries`` fresh values the
first whose tokens are exactly as many as the run's placeholders is used, else the closest in
length (never cut, unlike the tiny model's lockstep targets: a cut name reads badly).

For the next GPU run (docs/sanitize.md, "Endings"): every target is one paragraph ending on its
last sentence, so the shipped adapter ends a rewrite after an inner paragraph; add examples of
2-4 paragraphs joined by a blank line, synthetic letters whose last paragraph is their closing,
and a few sources with a trailing newline; and check before saving that ``<|im_end|>`` is the
likeliest token after a held-out target (the shipped adapter puts 0.999 on ``<|im_start|>``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokendp.models.training.examples import _PSEUDO_ENTITY
from tokendp.models.training.synthetic import SyntheticDocs
from tokendp.models.training.wikitext import sentences
from tokendp.text.spans import Span

KINDS = ("tab_fill", "tab_partial", "tab_copy", "synth_fill", "wikifill", "wiki_copy")
MIXTURE = (0.40, 0.12, 0.08, 0.20, 0.14, 0.06)
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"]
_MONTH_RE = re.compile(r"\b(" + "|".join(_MONTHS) + r"|" + "|".join(m[:3] for m in _MONTHS) + r")\b")
_TITLE_RE = re.compile(r"^((?:the )?(?:Mr|Mrs|Ms|Miss|Dr|Prof\.?|Judge|Mr\.|Mrs\.|Ms\.)\s+)")
_DIGITS = re.compile(r"\d+")
_COUNTRIES = ["Turkey", "Russia", "Poland", "Ukraine", "Romania", "Bulgaria", "Italy", "France",
              "Germany", "Croatia", "Slovakia", "Hungary", "Greece", "Moldova", "Georgia",
              "Armenia", "Azerbaijan", "Lithuania", "Latvia", "Estonia", "Finland", "Sweden",
              "Norway", "Portugal", "Spain", "Austria", "Slovenia", "Serbia", "Albania",
              "Cyprus", "Malta", "Belgium", "the Netherlands", "the United Kingdom", "Ireland",
              "Czech Republic", "Switzerland", "Denmark", "Iceland", "Luxembourg"]
_NATIONALITIES = ["Turkish", "Russian", "Polish", "Ukrainian", "Romanian", "Bulgarian",
                  "Italian", "French", "German", "Croatian", "Slovak", "Hungarian", "Greek",
                  "Moldovan", "Georgian", "Armenian", "Lithuanian", "Latvian", "Finnish",
                  "Swedish", "Portuguese", "Spanish", "Austrian", "Serbian", "British", "Irish",
                  "Kurdish", "Chechen", "Roma", "Dutch", "Belgian", "Czech"]
_RELATIVES = ["wife", "husband", "son", "daughter", "mother", "father", "brother", "sister",
              "uncle", "aunt", "cousin", "grandmother", "grandfather", "nephew", "niece"]
_NUMBER_WORDS = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                 "eleven", "twelve", "fifteen", "twenty", "thirty", "forty", "fifty"]


class TypedFillers:
    """Fresh values for TAB-labelled spans, shaped like the original string.

    One instance per example: :meth:`__call__` memoises by (label, original), so repeated
    mentions get the same filler and distinct entities get distinct ones (a draw that repeats
    an earlier filler of another entity is redrawn).
    """

    def __init__(self, synth: SyntheticDocs, rng: random.Random) -> None:
        self.synth, self.rng = synth, rng
        self.memo: dict[tuple[str, str], str] = {}

    def __call__(self, label: str, original: str) -> str:
        key = (label, original.strip().lower())
        if key not in self.memo:
            used = set(self.memo.values())
            value = self._fresh(label, original)
            for _ in range(8):
                if value not in used and value.strip().lower() != key[1]:
                    break
                value = self._fresh(label, original)
            self.memo[key] = value
        return self.memo[key]

    def _shape(self, text: str) -> str:
        """Digits redrawn (years stay plausible years), letters of codes redrawn, months redrawn."""
        r = self.rng

        def digits(m: re.Match) -> str:
            s = m.group()
            if len(s) == 4 and s[:2] in ("19", "20"):
                return str(r.randint(1950, 2015))
            if len(s) <= 2 and int(s) <= 31:
                return str(r.randint(1, 28)).zfill(len(s))
            return str(r.randint(1, 9)) + "".join(str(r.randint(0, 9)) for _ in s[1:])

        out = _DIGITS.sub(digits, text)
        return _MONTH_RE.sub(lambda m: (lambda mo: mo if len(m.group()) > 3 else mo[:3])(
            r.choice(_MONTHS)), out)

    def _person(self, original: str) -> str:
        f = self.synth._fake()
        title = _TITLE_RE.match(original)
        rest = original[title.end():] if title else original
        words = rest.split()
        if original.isupper() and len(original) <= 4:  # initials
            return "".join(self.rng.choice("ABCDEFGHIJKLMNOPRSTVZ") + "." for _ in range(len(original.strip("."))))[:len(original) + 2]
        if len(words) <= 1:
            name = f.last_name()
        else:
            name = f"{f.first_name()} {f.last_name()}"
        return (title.group() if title else "") + name

    def _fresh(self, label: str, original: str) -> str:
        r, s = self.rng, self.synth
        lead = "the " if original.lower().startswith("the ") and label in ("ORG", "LOC") else ""
        if label == "PERSON":
            return self._person(original)
        if label in ("DATETIME", "CODE", "QUANTITY") and any(c.isdigit() for c in original):
            return self._shape(original)
        if label == "DATETIME":
            return _MONTH_RE.sub(lambda m: r.choice(_MONTHS), original) if _MONTH_RE.search(original) \
                else s.value(r.choice(["date", "month_year", "year"]))
        if label == "QUANTITY":
            return r.choice(_NUMBER_WORDS) + (" " + original.split(None, 1)[1] if " " in original else "")
        if label == "CODE":
            return s.value(r.choice(["app_no", "case_no", "ref"]))
        if label in ("LOC", "ORG") and original.replace("the ", "") in _COUNTRIES:
            return lead + r.choice(_COUNTRIES).replace("the ", "")
        if label == "LOC":
            if original.replace("the ", "") in _COUNTRIES:
                return r.choice(_COUNTRIES)
            return s.value("city")
        if label == "ORG":
            low = original.lower()
            if "court" in low:
                return lead + s.value("court").replace("Court of ", "") if r.random() < 0.5 else lead + s.value("court")
            if "ministry" in low:
                return lead + s.value("ministry")
            if "prosecutor" in low:
                return lead + f"{s.value('city')} Public Prosecutor's Office"
            if "police" in low:
                return lead + f"{s.value('city')} Police Department"
            if "hospital" in low or "clinic" in low:
                return lead + s.value("hospital")
            return lead + s.value(r.choice(["company", "company", "facility"]))
        if label == "DEM":
            low = original.lower()
            if original[:1].isupper():
                return r.choice(_NATIONALITIES)
            if low in _RELATIVES:
                return r.choice(_RELATIVES)
            return s.value("occupation")
        # MISC and anything else: a capitalised word or a short phrase of the same case
        word = s.fakers[0].word()
        return word.capitalize() if original[:1].isupper() else word


def encode_masked(tokenizer, text: str, spans: Sequence[Span], mask_id: int
                  ) -> tuple[list[int], list[int], list[tuple[int, int]], list[bool]]:
    """Ids of ``text``; the same with every token overlapping a span as ``mask_id``; offsets;
    which tokens are hidden (exactly how :func:`build_contexts` hides them)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    hidden = [any(s.start < max(e, b + 1) and b < s.end for s in spans) for b, e in offsets]
    return ids, [mask_id if h else t for t, h in zip(ids, hidden)], offsets, hidden


def fill_pair(tokenizer, text: str, spans: Sequence[Span], fresh: Callable[[int], str],
              mask_id: int, *, tries: int = 12) -> tuple[list[int], list[int]]:
    """(source, target): source hides every token overlapping ``spans``; target is the text with
    ``fresh(i)`` in place of span i, each placeholder run's filler about as many tokens as the run."""
    ids, source, offsets, hidden = encode_masked(tokenizer, text, spans, mask_id)
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


def tab_paragraphs(tab_dir: str | Path, *, split: str = "tune", min_chars: int = 250,
                   max_chars: int = 1100) -> list[tuple[str, list[Span]]]:
    """Paragraphs of ``min_chars``..``max_chars`` characters with their gold spans, from the
    tuning half (even-indexed sorted doc ids) by default."""
    from tokendp.text.tab import load_tab

    tab = load_tab(tab_dir, split)
    out = []
    for doc_id, text in tab.texts.items():
        pos = 0
        for para in text.split("\n"):
            start, pos = pos, pos + len(para) + 1
            if min_chars <= len(para) <= max_chars:
                spans = sorted(Span(s.start - start, s.end - start, s.label) for s in tab.gold[doc_id]
                               if start <= s.start and s.end <= start + len(para))
                out.append((para, spans))
    return out


class RewriterStream:
    """Seeded stream of rewriter examples for a chat model's tokenizer."""

    def __init__(self, tokenizer, *, tab: list[tuple[str, list[Span]]], wiki: list[str],
                 seed: int, max_tokens: int = 320, mixture: Sequence[float] = MIXTURE) -> None:
        from tokendp.text.contexts import placeholder_id, prompt_template

        self.tok = tokenizer
        self.template = prompt_template(tokenizer)
        self.mask_id = placeholder_id(tokenizer)
        self.eos = tokenizer.eos_token_id
        self.tab, self.wiki = tab, wiki
        self.rng = random.Random(seed)
        self.synth = SyntheticDocs(seed)
        self.max_tokens = max_tokens
        self.weights = [w if (k.startswith("tab") and tab) or (k.startswith("wiki") and wiki)
                        or k.startswith("synth") else 0.0 for k, w in zip(KINDS, mixture)]

    def _wrap(self, kind: str, source: list[int], target: list[int]) -> RewriteExample:
        prompt = list(self.template.wrap(source[:self.max_tokens]))
        return RewriteExample(kind, prompt + target[:self.max_tokens + 8] + [self.eos], len(prompt))

    def _enc(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def example(self, kind: str) -> RewriteExample:
        r = self.rng
        if kind.startswith("tab"):
            text, spans = self.tab[r.randrange(len(self.tab))]
            if kind == "tab_copy" or not spans:
                ids = self._enc(text)
                return self._wrap(kind, ids, ids)
            hidden = spans if kind == "tab_fill" else [s for s in spans if r.random() < 0.5] or [spans[0]]
            fillers = TypedFillers(self.synth, r)
            src, tgt = fill_pair(self.tok, text, hidden,
                                 lambda i: fillers(hidden[i].label, text[hidden[i].start:hidden[i].end]),
                                 self.mask_id)
            return self._wrap(kind, src, tgt)
        if kind == "synth_fill":
            doc = self.synth.document(r.randint(2, 8))
            src, tgt = fill_pair(self.tok, doc.text, doc.spans,
                                 lambda i: self.synth.value(doc.kinds[i]), self.mask_id)
            return self._wrap(kind, src, tgt)
        text = self._wiki_text()
        if kind == "wiki_copy":
            ids = self._enc(text)
            return self._wrap(kind, ids, ids)
        found = [m for m in _PSEUDO_ENTITY.finditer(text) if r.random() < 0.6]
        spans = [Span(m.start(), m.end(), "MISC") for m in found]
        fillers = TypedFillers(self.synth, r)
        labels = ["DATETIME" if m.group()[0].isdigit() else r.choice(["PERSON", "LOC", "ORG"])
                  for m in found]
        src, tgt = fill_pair(self.tok, text, spans,
                             lambda i: fillers(labels[i], found[i].group()), self.mask_id)
        return self._wrap(kind, src, tgt)

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
    tok = PreTrainedTokenizerFast(tokenizer_object=base._tokenizer, eos_token="<|end|>",
                                  pad_token="<|pad|>", additional_special_tokens=["<|doc|>", "<|rewrite|>"])
    tok.chat_template = ("{% for m in messages %}<|doc|>{{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}<|rewrite|>{% endif %}")
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    return LlamaForCausalLM(config), tok
