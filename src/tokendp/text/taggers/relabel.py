"""Names the CRF labelled as organisations: capitalised words that read as a name.

A Latin-script name that is not in the gazetteer and has no title ("Later that evening Éric
Robert telephoned") often comes out of the CRF as ORG, where an organisation could stand. Its
characters are protected either way, but under the wrong label: a job that keeps ORG, or gives
PERSON its own budget, treats it as an organisation. :func:`names_as_person` relabels a model
span as PERSON when it is two or three words (one to three after a personal title or rank:
"Sergeant Gamble", "Dr Okafor"), each a capital followed by lower-case letters
(hyphens inside, an apostrophe only before a capital: "O'Brien", not "Court’s"), none of them a
word the document also writes in lower case ("Revenue" beside "revenue") or a word of an
organisation, a place, a month, a country or a nationality (``features``' gazetteers and the
list here), and the word after it is not one either
("Kestrel Mutual" before "Assurance"), and no number stands just before it (a postcode before a
town). Offsets are unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import regex

from tokendp.text.spans import Span
from tokendp.text.taggers.features import COUNTRIES, DEMONYMS, LOC_WORDS, MONTHS, ORG_WORDS, TITLES

_NAME_WORD = regex.compile(r"\p{Lu}[\p{Ll}\p{M}]+(?:(?:['’]\p{Lu}|-\p{Lu}?)[\p{Ll}\p{M}]+)*")
_NEXT_WORD = regex.compile(r"[^\S\n]+(\p{L}+)")
_NOT_NAME = ORG_WORDS | LOC_WORDS | MONTHS | COUNTRIES | DEMONYMS | TITLES | frozenset(
    "the of and for national general central state royal federal european international united regional "
    "district county city municipal public private group holdings insurance assurance trust partners "
    "solicitors associates services systems medical clinic practice surgery pharmacy school college "
    "academy hotel house street road hall centre center szpital klinika klinikum krankenhaus hôpital clinique "
    "ospedale policlinico sykehus sjukhus via viale piazza corso largo rue avenue ulica limited revenue tax act "
    "code law section minister registrar deputy solicitor officer chief rights civil criminal military supreme "
    "administrative high relevant domestic partnership inland".split())
_LOWER_WORD = regex.compile(r"(?<![\p{L}\p{M}])\p{Ll}[\p{Ll}\p{M}]+")
_AFTER_NUMBER = regex.compile(r"\d[,\s]*\Z")
_AFTER_TITLE = regex.compile(r"(?<![\p{L}\p{M}])(?:Mr|Mrs|Ms|Miss|Mx|Dr|Prof|Professor|Sir|Dame|Judge|Sergeant|Sgt"
                             r"|Corporal|Cpl|Constable|Inspector|Detective|Captain|Capt|Colonel|Major|Lieutenant"
                             r"|Garda|Father|Reverend|Rev|Nurse)\.?[^\S\n]\Z")


def _reads_as_name(words: list[str], lower_case: frozenset[str], titled: bool) -> bool:
    return (1 if titled else 2) <= len(words) <= 3 and all(_NAME_WORD.fullmatch(w) and w.lower() not in _NOT_NAME
                                        and w.lower() not in lower_case for w in words)


def names_as_person(spans: Iterable[Span], text: str) -> list[Span]:
    """``spans`` with the CRF's ORG spans that read as a person's name (module docstring) relabelled PERSON."""
    lower_case = frozenset(_LOWER_WORD.findall(text))
    out = []
    for span in spans:
        if (span.label == "ORG" and span.source == "model"
                and _reads_as_name(text[span.start:span.end].split(), lower_case,
                                   bool(_AFTER_TITLE.search(text, max(0, span.start - 16), span.start)))
                and not _AFTER_NUMBER.search(text, max(0, span.start - 8), span.start)):
            after = _NEXT_WORD.match(text, span.end)
            if after is None or after.group(1).lower() not in _NOT_NAME:
                span = replace(span, label="PERSON")
        out.append(span)
    return out
