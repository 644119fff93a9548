"""The Unicode script a word is written in (UAX #24 Script property, through the ``regex`` module).

The CRF reads it as a feature: in English text a word in Arabic, Hebrew, Devanagari, Han,
Hangul or kana script is nearly always a name, a place or an organisation, and a capital
letter, which marks names in Latin, Cyrillic and Greek, does not exist in those scripts.
"""

from __future__ import annotations

from functools import lru_cache

import regex

SCRIPTS: tuple[str, ...] = ("Latin", "Cyrillic", "Greek", "Arabic", "Hebrew", "Devanagari", "Han",
                            "Hiragana", "Katakana", "Hangul", "Armenian", "Georgian", "Thai", "Bengali")
_SCRIPT_RES = tuple((name, regex.compile(rf"\p{{Script={name}}}")) for name in SCRIPTS)
_LETTER = regex.compile(r"\p{L}")


@lru_cache(maxsize=1 << 16)
def script_of(word: str) -> str:
    """The script of ``word``'s first letter (kana and Han words of Japanese names count as "Han"
    when they start with a Han character), "Other" for a letter of another script, "" for none."""
    letter = _LETTER.search(word)
    if letter is None:
        return ""
    ch = letter.group()
    for name, pattern in _SCRIPT_RES:
        if pattern.match(ch):
            return name
    return "Other"


def is_cjk(script: str) -> bool:
    """Han, kana or Hangul: the scripts that write names without spaces between their parts."""
    return script in ("Han", "Hiragana", "Katakana", "Hangul")
