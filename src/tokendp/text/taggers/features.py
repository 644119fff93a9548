"""Tokens and CRF features for the learned tagger.

Tokens are maximal runs of word characters (Unicode letters with their combining marks, so a
Devanagari or vocalised Arabic word stays one token) or single other non-space characters, with
their character offsets. Each token gets word-identity, affix, shape, casing, Unicode script,
context (two tokens either side), layout (line start, all-caps heading) and gazetteer features
(place and organisation words, and the given names and surnames of the model's name list), plus
the label of the pattern span covering it (from
:class:`~tokendp.text.taggers.patterns.PatternTagger`), so the model learns when to trust each
recogniser.
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import regex

from tokendp.text.spans import Span
from tokendp.text.taggers.gazetteer import name_kinds
from tokendp.text.taggers.writing import is_cjk, script_of

TOKEN_RE = regex.compile(r"\w+|[^\w\s]")

TITLES = frozenset("mr mrs ms miss dr judge lord lady sir messrs mme mlle m prof professor "
                   "baroness baron dame president".split())
MONTHS = frozenset("january february march april may june july august september october "
                   "november december".split())
ORG_WORDS = frozenset(
    "court courts tribunal ministry office department agency board council police prosecutor "
    "prosecutor's government commission committee authority authorities service services hospital "
    "university bank company ltd plc inc party association union bureau directorate gendarmerie "
    "command headquarters station prison registry parliament assembly administration institute "
    "centre center foundation organisation organization federation chamber army navy unit "
    "inspectorate ombudsman society church municipality".split())
LOC_WORDS = frozenset("street road avenue city town village district province county region "
                      "island airport square river".split())
COUNTRIES = frozenset(
    "albania andorra armenia austria azerbaijan belarus belgium bosnia bulgaria croatia cyprus "
    "czech denmark england estonia finland france georgia germany greece hungary iceland ireland "
    "italy kosovo latvia liechtenstein lithuania luxembourg macedonia malta moldova monaco "
    "montenegro netherlands norway poland portugal romania russia scotland serbia slovakia "
    "slovenia spain sweden switzerland turkey ukraine wales kingdom america canada iran iraq "
    "syria lebanon israel palestine egypt libya tunisia algeria morocco nigeria ghana kenya "
    "somalia ethiopia sudan afghanistan pakistan india china japan chechnya ingushetia dagestan "
    "kurdistan istanbul ankara izmir london warsaw stockholm copenhagen helsinki oslo paris "
    "berlin rome madrid moscow kiev kyiv athens vienna brussels nicosia strasbourg".split())
DEMONYMS = frozenset(
    "albanian armenian austrian azerbaijani belarusian belgian bosnian british bulgarian croatian "
    "cypriot czech danish dutch english estonian finnish french georgian german greek hungarian "
    "icelandic irish italian latvian lithuanian maltese moldovan polish portuguese romanian "
    "russian scottish serbian slovak slovenian spanish swedish swiss turkish ukrainian welsh "
    "american canadian iranian iraqi syrian lebanese israeli palestinian egyptian libyan "
    "algerian moroccan nigerian somali ethiopian sudanese afghan pakistani indian chinese "
    "japanese chechen kurdish kurd kurds muslim christian jewish catholic orthodox roma "
    "gypsy".split())


@dataclass(frozen=True)
class Token:
    start: int
    end: int
    text: str


def tokenize(text: str) -> list[Token]:
    """Word-character runs and single punctuation characters, with offsets."""
    return [Token(m.start(), m.end(), m.group()) for m in TOKEN_RE.finditer(text)]


def _char_class(ch: str) -> str:
    if ch.isupper():
        return "X"
    if ch.islower():
        return "x"
    if ch.isdigit():
        return "d"
    if ch.isalpha():
        return "L"  # a letter of a script without case
    return "" if unicodedata.category(ch).startswith("M") else ch


@lru_cache(maxsize=1 << 16)
def _shape(word: str) -> str:
    """Character classes with runs collapsed: "Mr" -> "Xx", "36110" -> "d", "K.1" -> "X.d",
    "Łódź" -> "Xx", "محمد" -> "L" (uncased letters), combining marks dropped."""
    classes = [c for c in map(_char_class, word) if c]
    return "".join(c for i, c in enumerate(classes) if i == 0 or c != classes[i - 1])


@lru_cache(maxsize=1 << 16)
def _word_features(word: str, prefix: str) -> dict[str, float | str]:
    """Cached: callers must not mutate the returned dict."""
    lower = word.lower()
    return {f"{prefix}w": lower, f"{prefix}shape": _shape(word), f"{prefix}title": float(word.istitle()),
            f"{prefix}upper": float(word.isupper()), f"{prefix}script": script_of(word)}


def _name_features(word: str, names: Mapping[str, str]) -> dict[str, float]:
    """Gazetteer hits: the word is a listed given name / surname; for a CJK run ("王小明"), its
    first one or two characters are a listed surname (such names are written without a space)."""
    feats = {f"gaz_{kind}": 1.0 for kind in name_kinds(word, names)}
    if len(word) > 1 and is_cjk(script_of(word)):
        if "s" in name_kinds(word[:1], names) or "s" in name_kinds(word[:2], names):
            feats["cjk_surname_first"] = 1.0
        feats["cjk_len"] = float(min(len(word), 5))
    return feats


@lru_cache(maxsize=1 << 16)
def _gazetteer(lower: str) -> tuple[str, ...]:
    tables = (("title", TITLES), ("month", MONTHS), ("orgw", ORG_WORDS), ("locw", LOC_WORDS),
              ("place", COUNTRIES), ("demonym", DEMONYMS))
    return tuple(name for name, table in tables if lower in table)


def capitalisation_rates(tokens: list[Token]) -> dict[str, float]:
    """Per lower-cased word, the share of its occurrences not after a full stop that are capitalised.

    A proper noun is capitalised everywhere in a document; a common word only where a sentence
    starts, so this document-level rate separates "Court" the party from "court" the noun.
    """
    seen: dict[str, list[int]] = {}
    for i, tok in enumerate(tokens):
        if i == 0 or tokens[i - 1].text in ".:;!?\"“(":
            continue
        counts = seen.setdefault(tok.text.lower(), [0, 0])
        counts[0] += tok.text[:1].isupper()
        counts[1] += 1
    return {word: up / total for word, (up, total) in seen.items()}


def _token_features(tokens: list[Token], i: int, text: str, pattern_tags: list[str],
                    cap_rate: dict[str, float], name_feats: list[dict[str, float]]) -> dict:
    tok = tokens[i]
    word, lower = tok.text, tok.text.lower()
    line_start = text.rfind("\n", 0, tok.start) + 1
    line_end = text.find("\n", tok.end)
    line = text[line_start:len(text) if line_end < 0 else line_end]
    feats: dict = {"bias": 1.0, **_word_features(word, ""),
                   "suf2": lower[-2:], "suf3": lower[-3:], "suf4": lower[-4:], "pre2": lower[:2],
                   "pre3": lower[:3], "digit": float(word.isdigit()), "len": str(min(len(word), 8)),
                   "line_start": float(not text[line_start:tok.start].strip()),
                   "caps_line": float(line.isupper()), "pat": pattern_tags[i],
                   "cap_rate": str(round(cap_rate.get(lower, -0.25) * 4)),
                   "sent_start": float(i == 0 or tokens[i - 1].text in ".:;!?")}
    for name in _gazetteer(lower):
        feats[f"gaz_{name}"] = 1.0
    feats.update(name_feats[i])
    for offset in (-2, -1, 1, 2):
        j = i + offset
        if 0 <= j < len(tokens):
            other = tokens[j].text
            feats.update(_word_features(other, f"{offset}:"))
            feats[f"{offset}:pat"] = pattern_tags[j]
            for name in _gazetteer(other.lower()):
                feats[f"{offset}:gaz_{name}"] = 1.0
            feats.update({f"{offset}:{key}": value for key, value in name_feats[j].items()})
        else:
            feats[f"{offset}:edge"] = 1.0
    if i > 0:
        feats["bigram"] = f"{tokens[i - 1].text.lower()}|{lower}"
    if i + 1 < len(tokens):
        feats["bigram+"] = f"{lower}|{tokens[i + 1].text.lower()}"
    return feats


def bio_from_spans(tokens: list[Token], spans: list[Span]) -> list[str]:
    """BIO tags: a token inside a span gets its label, B- when it starts the span."""
    tags = ["O"] * len(tokens)
    ends = [tok.end for tok in tokens]
    for span in sorted(spans, key=lambda s: (s.start, -s.end)):
        first = True
        i = bisect_right(ends, span.start)  # first token ending after the span starts
        while i < len(tokens) and tokens[i].start < span.end:
            if tags[i] == "O":
                tags[i] = ("B-" if first else "I-") + span.label
                first = False
            i += 1
    return tags


def sentence_features(text: str, tokens: list[Token], pattern_spans: list[Span],
                      names: Mapping[str, str]) -> list[dict]:
    """CRF feature dictionaries, one per token; ``names`` is the gazetteer (word -> kinds, see
    :mod:`~tokendp.text.taggers.gazetteer`; empty for none)."""
    pattern_tags = [t.split("-", 1)[-1] for t in bio_from_spans(tokens, pattern_spans)]
    cap_rate = capitalisation_rates(tokens)
    name_feats = [_name_features(tok.text, names) for tok in tokens]
    return [_token_features(tokens, i, text, pattern_tags, cap_rate, name_feats) for i in range(len(tokens))]
