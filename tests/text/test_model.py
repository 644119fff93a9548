"""The learned CRF: features/BIO, a tiny training run, and the shipped model loads and tags."""

import json

import pytest

from tokendp.errors import InvalidInputError, InvalidParameterError
from tokendp.text.spans import Span
from tokendp.text.taggers import get_tagger
from tokendp.text.taggers.features import bio_from_spans, tokenize
from tokendp.text.taggers.model import META_FILE, MODEL_FILE, ModelTagger, TrainingSettings, default_model_dir, train_crf

NAMES = ["Anna Berg", "Carl Olsen", "Dora Lind", "Erik Holm", "Frida Dahl", "Gustav Ek"]
CITIES = ["Oslo", "Bergen", "Malmö", "Turku", "Aarhus", "Tampere"]


def _doc(i):
    name, city = NAMES[i % len(NAMES)], CITIES[(i * 5) % len(CITIES)]
    text = f"The applicant, Mr {name}, lives in {city}.\nHe was heard by the court."
    start = text.index(name)
    gold = [Span(start - 3, start + len(name), "PERSON"), Span(text.index(city), text.index(city) + len(city), "LOC")]
    return text, gold


def test_tokens_and_bio_tags():
    text = "Mr Anna Berg, no. 36110/97"
    tokens = tokenize(text)
    assert [t.text for t in tokens] == ["Mr", "Anna", "Berg", ",", "no", ".", "36110", "/", "97"]
    tags = bio_from_spans(tokens, [Span(0, 12, "PERSON"), Span(18, 26, "CODE")])
    assert tags == ["B-PERSON", "I-PERSON", "I-PERSON", "O", "O", "O", "B-CODE", "I-CODE", "I-CODE"]


def test_a_tiny_crf_learns_names_and_places(tmp_path):
    docs = [_doc(i) for i in range(12)]
    train_crf([t for t, _ in docs], [g for _, g in docs], tmp_path / MODEL_FILE,
              TrainingSettings(c1=0.0, c2=0.01, max_iterations=60))
    (tmp_path / META_FILE).write_text(json.dumps({"threshold": 0.5}))
    tagger = ModelTagger(tmp_path)
    text = "The applicant, Mr Erik Holm, lives in Oslo.\nHe was heard by the court."
    found = {(text[s.start:s.end], s.label) for s in tagger.tag(text)}
    assert ("Mr Erik Holm", "PERSON") in found and ("Oslo", "LOC") in found
    assert all(0.0 < s.score <= 1.0 and s.source == "model" for s in tagger.tag(text))


def test_bad_model_folder_and_threshold(tmp_path):
    with pytest.raises(InvalidInputError, match="train_tagger"):
        ModelTagger(tmp_path)
    with pytest.raises(InvalidParameterError, match="threshold"):
        ModelTagger(default_model_dir(), threshold=1.5)


def test_the_shipped_model_loads_and_tags():
    assert (default_model_dir() / MODEL_FILE).stat().st_size < 20_000_000
    meta = json.loads((default_model_dir() / META_FILE).read_text())
    assert "tuning half" in meta["trained_on"]
    text = ("The case originated in an application (no. 36110/97) against the Republic of Turkey "
            "lodged with the Court by a Turkish national, Mr Ahmet Yılmaz, on 30 May 1996.")
    for name in ("model", "auto"):
        found = {(text[s.start:s.end], s.label) for s in get_tagger(name).tag(text)}
        assert any(label == "PERSON" and "Yılmaz" in frag for frag, label in found), name
    auto = get_tagger("auto").tag(text)
    assert ("30 May 1996", "DATE") in {(text[s.start:s.end], s.label) for s in auto}
    assert all(a.end <= b.start for a, b in zip(auto, auto[1:]))


def test_capitalisation_rate_separates_proper_nouns_from_sentence_starts():
    from tokendp.text.taggers.features import capitalisation_rates
    rates = capitalisation_rates(tokenize("The court met. The Court and Smith saw Smith and the court."))
    assert rates["smith"] == 1.0
    assert rates["court"] == 1 / 3  # "court", "Court", "court" away from sentence starts
    assert "the" in rates and rates["the"] == 0.0  # the sentence-initial "The"s are not counted


def test_pronouns_alone_are_never_spans_but_stay_inside_names():
    """Letters are outside the CRF's training data: at its low threshold it proposed "I" (MISC)
    and "Yours" (PERSON), and with them hidden the rewriter lost the letter's thread."""
    from tokendp.text.taggers.model import _pronouns_only

    text = ("Dear Dr Helen Marsh,\n\nI am writing about my patient Mr Tomas Lindqvist, born on 14 March 1961, who "
            "lives in Leeds. He was admitted to St James's Hospital on 2 June 2024.\n\nYours sincerely,\nDr Amir Patel")
    found = {text[s.start:s.end]: s.label for s in get_tagger("auto").tag(text)}
    assert "I" not in found and "Yours" not in found and "He" not in found
    assert {"Dr Helen Marsh", "Mr Tomas Lindqvist", "Dr Amir Patel"} <= set(found)
    assert _pronouns_only("I") and _pronouns_only("yours") and _pronouns_only("Him Her")
    assert not _pronouns_only("Our Lady of Lourdes") and not _pronouns_only("") and not _pronouns_only("I.")
