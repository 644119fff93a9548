"""People's names in many scripts from Faker's per-locale lists, split into two disjoint parts.

Faker (MIT licence) keeps given-name and surname lists per locale. Every word of every entry (a
run of word characters, as the tagger's tokenizer cuts it: "Hans-Karl" is two) is assigned by a
hash to one of two parts: "train" (the shipped gazetteer and the synthetic training
sentences of the CRF) or "heldout" (only the evaluation set of
``benchmarks/multilingual_tagger.py``). An entry belongs to a part when all its words do, so no
word of a held-out name is ever seen in training. Needs the ``train`` or ``eval`` extra (Faker);
the tagger itself reads only the shipped gazetteer.
"""

from __future__ import annotations

import hashlib
import random
import importlib
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import regex

from tokendp._optional import require

# Script group -> Faker locales whose person lists are written in it.
LOCALES: dict[str, tuple[str, ...]] = {
    "Arabic": ("ar_AA", "ar_SA", "fa_IR"),
    "Hebrew": ("he_IL",),
    "Devanagari": ("hi_IN", "ne_NP"),
    "CJK": ("zh_CN", "zh_TW", "ja_JP", "ko_KR"),
    "Cyrillic": ("ru_RU", "uk_UA", "bg_BG"),
    "Greek": ("el_GR",),
    "Latin": ("cs_CZ", "hr_HR", "hu_HU", "ro_RO", "tr_TR", "de_DE", "lt_LT", "vi_VN", "it_IT",
              "fr_FR", "no_NO", "da_DK", "sv_SE"),
}
SCRIPT_GROUPS: tuple[str, ...] = tuple(LOCALES)
PARTS = ("train", "heldout")
HELDOUT_SHARE = 4  # one word in four (by hash) is held out
_WORD = regex.compile(r"\w+")


def _nfc(word: str) -> str:
    return unicodedata.normalize("NFC", word)


def part_of_word(word: str) -> str:
    """"heldout" for one word in :data:`HELDOUT_SHARE` (SHA-256 of its NFC form), else "train"."""
    digest = hashlib.sha256(_nfc(word).casefold().encode("utf-8")).digest()
    return "heldout" if digest[0] % HELDOUT_SHARE == 0 else "train"


def entry_words(entry: str) -> list[str]:
    """The words of a list entry: "تاج الدّين" -> two, "Hans-Karl" -> "Hans", "Karl"."""
    return _WORD.findall(entry)


def part_of_entry(entry: str) -> str | None:
    """The part of a list entry: the part of all its words, or None when they differ."""
    parts = {part_of_word(w) for w in entry_words(entry)}
    return parts.pop() if len(parts) == 1 else None


@dataclass(frozen=True)
class Pools:
    """One locale's given names and surnames, by sex where Faker has separate lists ("" for both)."""

    locale: str
    given: dict[str, tuple[str, ...]]
    surnames: dict[str, tuple[str, ...]]


def _lists(provider: type, stem: str) -> dict[str, tuple[str, ...]]:
    found = {}
    for sex in ("female", "male"):
        entries = getattr(provider, f"{stem}_{sex}", ())
        if len(entries) > 1:
            found[sex] = tuple(entries)
    plain = getattr(provider, stem, ())
    if not found and len(plain) > 1:
        found[""] = tuple(plain)
    unisex = getattr(provider, f"{stem}_unisex", ())
    if len(unisex) > 1:
        found = {sex: names + tuple(unisex) for sex, names in found.items()} or {"": tuple(unisex)}
    return found


@lru_cache(maxsize=None)
def pools(locale: str, part: str) -> Pools:
    """The names of ``locale`` (a Faker locale) in ``part`` ("train" or "heldout"), NFC, in list order."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    require("faker", "train", "the tagger's name lists")
    provider = importlib.import_module(f"faker.providers.person.{locale}").Provider

    def keep(lists: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        chosen = {sex: tuple(dict.fromkeys(_nfc(e) for e in entries if part_of_entry(_nfc(e)) == part))
                  for sex, entries in lists.items()}
        return {sex: entries for sex, entries in chosen.items() if entries}

    return Pools(locale, keep(_lists(provider, "first_names")), keep(_lists(provider, "last_names")))


def words(part: str) -> dict[str, set[str]]:
    """Every word of ``part``'s given names ("given") and surnames ("surname"), over all locales."""
    found: dict[str, set[str]] = {"given": set(), "surname": set()}
    for locales in LOCALES.values():
        for locale in locales:
            p = pools(locale, part)
            for kind, lists in (("given", p.given), ("surname", p.surnames)):
                for entries in lists.values():
                    found[kind].update(w for e in entries for w in entry_words(e))
    return found


SURNAME_FIRST = ("zh_CN", "zh_TW", "ja_JP", "ko_KR")  # written surname first, without a space (ja: either)


def person(rng: random.Random, group: str, part: str) -> tuple[str, list[str]]:
    """A person's name of script ``group`` from ``part``'s lists, in a form seen in letters (given
    name and surname, surname first for Chinese, Japanese and Korean; sometimes the surname or
    the given name alone, or an initial and the surname), and the list words it was made of."""
    locale = rng.choice(LOCALES[group])
    p = pools(locale, part)
    sex = rng.choice(sorted(p.given))
    given = rng.choice(p.given[sex])
    surnames = p.surnames.get(sex) or p.surnames.get("") or rng.choice(list(p.surnames.values()))
    surname = rng.choice(surnames)
    both = entry_words(given) + entry_words(surname)
    form = rng.random()
    if locale in SURNAME_FIRST:
        gap = " " if locale == "ja_JP" and form < 0.5 else ""
        return (surname, entry_words(surname)) if form > 0.85 else (f"{surname}{gap}{given}", both)
    if form > 0.9:
        return surname, entry_words(surname)
    if form > 0.8 and group in ("Latin", "Cyrillic", "Greek"):
        return f"{given[0]}. {surname}", entry_words(surname)
    if form > 0.75:
        return given, entry_words(given)
    return f"{given} {surname}", both
