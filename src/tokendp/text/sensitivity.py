"""ATDP's tiered secret detector: which characters of a training record are sensitive.

Four tiers, each a superset of the one before (ATDP, arXiv 2509.23246, Sec. 3; the tiers'
contents here are tokendp's, the paper names them only):

| tier | sensitive |
|---|---|
| ``low-entity`` | direct identifiers: PERSON and CODE spans of the entity tagger, and every run of digits |
| ``high-entity`` | every entity span (TAB's eight categories) and every run of digits |
| ``low-contextual`` | high-entity, plus proper nouns, plus the verbs within ``window`` words of an entity in its sentence |
| ``high-contextual`` | low-contextual, plus the nouns, pronouns and numbers within ``window`` words of those verbs (their subjects and objects) |

Entities come from a tokendp tagger (default ``auto``: patterns + the shipped CRF). The
contextual tiers need a part-of-speech reading of each word *in its sentence*; the default
source is TextBlob's port of Pattern's lexicon tagger (Brill's lexicon and suffix rules, shipped
inside the ``textblob`` wheel; the ``train`` extra installs it), whose Penn Treebank tags
:func:`universal_tags` maps to universal ones. There is no dependency parse, so "around" is a
window of words inside one sentence. :func:`tier_spans` is a pure function of hand-made inputs
(tests build them); :class:`TieredDetector` wires the taggers to it.

What the detector marks changes only the loss weights, never the guarantee: the DP-SGD bound
holds per record whatever the weights (docs/privacy.md, "DP-SGD and ATDP").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tokendp.errors import InvalidParameterError
from tokendp.text.spans import Span
from tokendp.text.taggers.base import Tagger
from tokendp.text.taggers.features import tokenize

TIERS: tuple[str, ...] = ("low-entity", "high-entity", "low-contextual", "high-contextual")
DIRECT_LABELS = frozenset({"PERSON", "CODE"})
_DIGITS = re.compile(r"\d+")
_SENTENCE_END = frozenset(".!?;")
_ARGUMENTS = frozenset({"NOUN", "PROPN", "PRON", "NUM"})


@dataclass(frozen=True)
class Word:
    """A word of the text (character offsets, end exclusive) and its universal POS tag."""

    start: int
    end: int
    upos: str
    sentence: int


def check_tier(tier: str) -> str:
    if tier not in TIERS:
        raise InvalidParameterError(f"unknown tier {tier!r}; choose one of {', '.join(TIERS)}")
    return tier


def _digit_spans(text: str) -> list[Span]:
    return [Span(m.start(), m.end(), "CODE", 1.0, "digits") for m in _DIGITS.finditer(text)]


def tier_spans(text: str, entities: Sequence[Span], words: Sequence[Word], *, tier: str, window: int = 3) -> list[Span]:
    """The sensitive character spans of ``text`` at ``tier`` (sorted; they may overlap).

    ``entities`` are the entity tagger's spans; ``words`` the text's words with their tags and
    sentence numbers (ignored by the entity tiers). A word is near an entity if they share a
    sentence and at most ``window`` words lie between them (the entity's own words count as 0).
    """
    check_tier(tier)
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise InvalidParameterError(f"window must be an integer >= 0, got {window!r}")
    keep = entities if tier != "low-entity" else [s for s in entities if s.label in DIRECT_LABELS]
    spans = sorted([*keep, *_digit_spans(text)])
    if tier in ("low-entity", "high-entity"):
        return spans
    inside = [any(w.start < s.end and s.start < w.end for s in spans) for w in words]
    anchors = [i for i, hit in enumerate(inside) if hit]

    def near(i: int, centres: Sequence[int]) -> bool:
        return any(words[c].sentence == words[i].sentence and abs(c - i) <= window + 1 for c in centres)

    verbs = [i for i, w in enumerate(words) if w.upos == "VERB" and near(i, anchors)]
    extra = [i for i, w in enumerate(words) if w.upos == "PROPN"] + verbs
    if tier == "high-contextual":
        extra += [i for i, w in enumerate(words) if w.upos in _ARGUMENTS and near(i, verbs)]
    labels = {i: "VERB" if i in verbs else words[i].upos for i in extra}
    return sorted(spans + [Span(words[i].start, words[i].end, f"CONTEXT_{label}", 1.0, "context")
                           for i, label in labels.items()])


def sentence_words(text: str) -> list[tuple[int, int, int]]:
    """(start, end, sentence number) of the word tokens of ``text`` (punctuation dropped, a
    sentence ending at . ! ? ; or a line break)."""
    out, sentence, last = [], 0, 0
    for token in tokenize(text):
        if "\n" in text[last:token.start]:
            sentence += 1
        last = token.end
        if token.text in _SENTENCE_END:
            sentence += 1
        elif token.text[0].isalnum() or token.text[0] == "_":
            out.append((token.start, token.end, sentence))
    return out


# Penn Treebank tag -> universal tag. The table of Petrov, Das and McDonald, "A Universal
# Part-of-Speech Tagset" (LREC 2012; en-ptb.map), in UD v2's names (CONJ -> CCONJ, PRT -> PART,
# "." -> PUNCT) and with UD English's splits of its classes: NNP/NNPS -> PROPN (not NOUN),
# MD -> AUX, EX -> PRON (not DET). Tags not listed are punctuation (PUNCT) or, for a word, X.
_PTB_UPOS = {
    "NN": "NOUN", "NNS": "NOUN", "NNP": "PROPN", "NNPS": "PROPN",
    "VB": "VERB", "VBD": "VERB", "VBG": "VERB", "VBN": "VERB", "VBP": "VERB", "VBZ": "VERB", "MD": "AUX",
    "JJ": "ADJ", "JJR": "ADJ", "JJS": "ADJ", "RB": "ADV", "RBR": "ADV", "RBS": "ADV", "WRB": "ADV",
    "PRP": "PRON", "PRP$": "PRON", "WP": "PRON", "WP$": "PRON", "EX": "PRON",
    "DT": "DET", "PDT": "DET", "WDT": "DET", "IN": "ADP", "CD": "NUM", "CC": "CCONJ",
    "POS": "PART", "RP": "PART", "TO": "PART", "UH": "INTJ", "SYM": "SYM", "FW": "X", "LS": "X",
}
_BE = frozenset("be am is are was were been being".split())
_HAVE_DO = frozenset("have has had having do does did".split())


def universal_tags(words: Sequence[str], ptb: Sequence[str]) -> list[str]:
    """Universal POS tags of one sentence's ``words`` from their Penn Treebank tags ``ptb``.

    PTB gives "be", "have" and "do" verb tags; UD English tags them AUX when they are copulas or
    auxiliaries. Here "be" is AUX except after existential "there" (EX), and "have"/"do" are AUX
    when the next word that is not an adverb is a verb ("has signed", "did not go"), else VERB.
    A combined tag (Pattern's lexicon has a few, "NN|JJ") counts as its first part.
    """
    base = [tag.partition("|")[0] for tag in ptb]
    out = [_PTB_UPOS.get(tag, "X" if word[:1].isalnum() else "PUNCT") for word, tag in zip(words, base)]
    for i, word in enumerate(words):
        lower = word.lower()
        if out[i] != "VERB" or lower not in _BE | _HAVE_DO:
            continue
        if lower in _BE:
            out[i] = "VERB" if i and base[i - 1] == "EX" else "AUX"
        else:
            after = next((tag for tag in base[i + 1:] if not tag.startswith("RB")), "")
            out[i] = "AUX" if after.startswith("VB") else "VERB"
    return out


def pattern_pos() -> Callable[[Sequence[str]], list[str]]:
    """Universal POS tags of one sentence's words, from the tagger of TextBlob's
    ``PatternTagger`` (a port of Pattern's, De Smedt and Daelemans, "Pattern for Python", JMLR
    13, 2012): each known word takes its tag in the lexicon (Brill's, "A simple rule-based part
    of speech tagger", ANLP 1992, from the Brown corpus and the Penn Treebank, with additions
    from CMU's Twitter POS data); an unknown word is NNP if capitalised, CD if a number, else
    tagged by its suffix. :func:`universal_tags` maps the tags.

    Offline: the lexicon ships in the ``textblob`` wheel and the words come from tokendp's
    tokenizer, not NLTK's (no ``nltk_data``). Two repairs for tokendp's words: a lone "s" (the
    detector drops the apostrophe of "applicant's") is looked up as "'s", and a run of digits is
    CD (the Twitter additions read "2" and "4" as "to" and "for"). The Brill contextual rules in
    the same wheel (``textblob.en.lexicon.context``) are not applied, as TextBlob does not: on
    TAB's reporting half they lowered agreement with a UD-trained tagger from 0.874 to 0.859
    ("an application" became a verb; ``benchmarks/pos_tiers.py --context-rules``).
    """
    from tokendp._optional import require

    en = require("textblob.en", "train", "the contextual tiers of the ATDP detector", package="textblob")

    def tag(words: Sequence[str]) -> list[str]:
        tagged = en.parser.find_tags(["'s" if w == "s" else w for w in words])
        return universal_tags(words, ["CD" if w.isdigit() else t for w, (_, t) in zip(words, tagged)])

    return tag


class TieredDetector:
    """The sensitive spans of a text at one tier: ``spans(text) -> list[Span]``."""

    def __init__(self, tier: str, *, tagger: Tagger | None = None, pos: Callable[[Sequence[str]], list[str]] | None = None,
                 window: int = 3) -> None:
        self.tier = check_tier(tier)
        if tagger is None:
            from tokendp.text.taggers import get_tagger

            tagger = get_tagger("auto")
        self.tagger = tagger
        self.contextual = tier.endswith("contextual")
        self.pos = (pos or pattern_pos()) if self.contextual else None
        self.window = window

    def _words(self, text: str) -> list[Word]:
        found = sentence_words(text)
        words: list[Word] = []
        for sentence in sorted({s for _, _, s in found}):
            part = [(a, b) for a, b, s in found if s == sentence]
            tags = self.pos([text[a:b] for a, b in part])
            words.extend(Word(a, b, tag, sentence) for (a, b), tag in zip(part, tags))
        return words

    def spans(self, text: str) -> list[Span]:
        words = self._words(text) if self.contextual else []
        return tier_spans(text, self.tagger.tag(text), words, tier=self.tier, window=self.window)
