"""The name lists' two parts are disjoint: held-out names never reach the gazetteer or training."""

import random

import pytest

from tokendp.text.taggers.features import tokenize
from tokendp.text.taggers.gazetteer import NAMES_FILE, load_names, name_kinds, write_names
from tokendp.text.taggers.model import default_model_dir

pytest.importorskip("faker")

from tokendp.text.taggers.name_lists import (  # noqa: E402
    LOCALES, SCRIPT_GROUPS, entry_words, part_of_entry, part_of_word, person, pools, words)
from tokendp.text.taggers.synthetic import notes  # noqa: E402


def test_every_shipped_gazetteer_word_is_from_the_train_part():
    shipped = load_names(default_model_dir() / NAMES_FILE)
    assert len(shipped) > 5000
    assert all(part_of_word(word) == "train" for word in shipped)
    assert (default_model_dir() / NAMES_FILE).stat().st_size < 1_000_000


def test_held_out_words_are_not_in_the_shipped_gazetteer():
    shipped = load_names(default_model_dir() / NAMES_FILE)
    held = words("heldout")
    assert held["given"] and held["surname"]
    assert not [w for kind in held.values() for w in kind if name_kinds(w, shipped)]


def test_parts_are_disjoint_per_locale_and_cover_each_script_group():
    for group, locales in LOCALES.items():
        for locale in locales:
            train, held = pools(locale, "train"), pools(locale, "heldout")
            train_words = {w for lists in (train.given, train.surnames) for entries in lists.values()
                           for e in entries for w in entry_words(e)}
            held_words = {w for lists in (held.given, held.surnames) for entries in lists.values()
                          for e in entries for w in entry_words(e)}
            assert not train_words & held_words, locale
        assert any(pools(loc, "heldout").given for loc in locales), group
    assert entry_words("Hans-Karl D’Costa") == ["Hans", "Karl", "D", "Costa"]
    assert part_of_entry("x y") in ("train", "heldout", None)


@pytest.mark.parametrize("part", ["train", "heldout"])
def test_people_are_made_of_their_parts_words_only(part):
    rng = random.Random(5)
    for group in SCRIPT_GROUPS:
        for _ in range(40):
            name, used = person(rng, group, part)
            assert used and all(part_of_word(w) == part for w in used)
            assert all(w in name for w in used)


def test_notes_are_deterministic_and_cover_every_script():
    assert notes(20, seed=1) == notes(20, seed=1)
    from tokendp.text.taggers.writing import script_of
    texts, _ = notes(200, seed=0)
    seen = {script_of(tok.text) for text in texts for tok in tokenize(text)}
    assert {"Arabic", "Hebrew", "Devanagari", "Han", "Hangul", "Cyrillic", "Greek", "Latin"} <= seen
    assert len(SCRIPT_GROUPS) == 7


def test_gazetteer_file_round_trip(tmp_path):
    write_names(tmp_path / NAMES_FILE, {"given": ["Анна", "Jan"], "surname": ["Jan", "王"]})
    table = load_names(tmp_path / NAMES_FILE)
    assert name_kinds("анна", table) == "g" and name_kinds("JAN", table) == "gs" and name_kinds("王", table) == "s"
    assert name_kinds("Smith", table) == ""
