"""The gazetteer of given names and surnames in many scripts that a CRF was trained with.

The shipped one is ``data/names.tsv``, beside the model (its weights were learned with it).

Built by ``scripts/train_tagger.py`` from the "train" part of Faker's per-locale name lists
(:mod:`~tokendp.text.taggers.name_lists`); the "heldout" part never enters it. One line per word:
the word (NFC) and its kinds, ``g`` (given name), ``s`` (surname) or ``gs``. Lookups are
case-insensitive.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path

NAMES_FILE = "names.tsv"
HEADER = "# word<TAB>kinds (g: given name, s: surname); the train part of Faker's per-locale lists\n"


def _key(word: str) -> str:
    return unicodedata.normalize("NFC", word).casefold()


def write_names(path: str | Path, words: Mapping[str, Iterable[str]]) -> None:
    """Write ``{"given": words, "surname": words}`` to ``path``, sorted, so a rebuild is byte-identical."""
    kinds: dict[str, set[str]] = {}
    for kind, letter in (("given", "g"), ("surname", "s")):
        for word in words[kind]:
            kinds.setdefault(_key(word), set()).add(letter)
    lines = (f"{word}\t{''.join(sorted(k))}\n" for word, k in sorted(kinds.items()))
    Path(path).write_text(HEADER + "".join(lines), encoding="utf-8")


@lru_cache(maxsize=4)
def load_names(path: str | Path) -> dict[str, str]:
    """Word (case-folded) -> kinds, from the file ``path`` (a model folder's ``names.tsv``); {} if absent."""
    file = Path(path)
    if not file.is_file():
        return {}
    table = {}
    for line in file.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            word, kinds = line.split("\t")
            table[word] = kinds
    return table


def name_kinds(word: str, table: Mapping[str, str]) -> str:
    """"g", "s", "gs" or "" for ``word`` in ``table``."""
    return table.get(_key(word), "")
