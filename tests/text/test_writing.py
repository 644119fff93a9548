"""Unicode scripts, and tokens and shapes of words in scripts other than Latin."""

import pytest

from tokendp.text.taggers.features import _shape, tokenize
from tokendp.text.taggers.writing import is_cjk, script_of


@pytest.mark.parametrize("word,script", [
    ("Smith", "Latin"), ("Łódź", "Latin"), ("Анна", "Cyrillic"), ("Παπαδόπουλος", "Greek"),
    ("محمد", "Arabic"), ("דוד", "Hebrew"), ("शर्मा", "Devanagari"), ("王小明", "Han"),
    ("さくら", "Hiragana"), ("김민준", "Hangul"), ("12", ""), (".", ""),
])
def test_script_of_a_word(word, script):
    assert script_of(word) == script


def test_cjk_scripts():
    assert is_cjk("Han") and is_cjk("Hangul") and is_cjk("Katakana") and not is_cjk("Arabic")


@pytest.mark.parametrize("text", ["राहुल शर्मा", "تاج الدّين", "אֲבִיגַיִל כֹּהֵן",
                                  "Анна Иванова"])
def test_words_with_combining_marks_stay_one_token(text):
    assert [t.text for t in tokenize(text)] == text.split()


def test_shapes_know_case_in_every_script():
    assert _shape("Łódź") == "Xx" and _shape("Анна") == "Xx" and _shape("ΑΒΓ") == "X"
    assert _shape("محمد") == "L" and _shape("शर्मा") == "L" and _shape("36110/97") == "d/d"
