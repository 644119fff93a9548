"""Presidio and spaCy adapters: skipped cleanly when the optional packages are missing."""

import pytest

from tokendp.errors import InvalidParameterError, MissingDependencyError
from tokendp.text.taggers import get_tagger


def test_unknown_tagger_name():
    with pytest.raises(InvalidParameterError, match="auto, patterns, model, presidio, spacy"):
        get_tagger("magic")


@pytest.mark.slow
def test_presidio_pattern_recognisers_without_a_spacy_model():
    pytest.importorskip("presidio_analyzer")
    tagger = get_tagger("presidio", spacy_model="no_such_spacy_model_xyz")
    assert not tagger.uses_ner
    text = "Mail jane@example.com or IBAN GB82 WEST 1234 5698 7654 32 today."
    found = {(text[s.start:s.end], s.label) for s in tagger.tag(text)}
    assert ("jane@example.com", "CODE") in found
    assert ("GB82 WEST 1234 5698 7654 32", "CODE") in found
    spans = tagger.tag(text)
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))


def test_spacy_adapter_names_the_missing_model():
    try:
        import spacy  # noqa: F401
    except ImportError:
        with pytest.raises(MissingDependencyError, match="pip install spacy"):
            get_tagger("spacy")
        return
    with pytest.raises(InvalidParameterError, match="no_such_spacy_model_xyz"):
        get_tagger("spacy", model="no_such_spacy_model_xyz")


def test_spacy_adapter_maps_entity_labels(tmp_path):
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    nlp.to_disk(tmp_path / "blank")
    with pytest.raises(InvalidParameterError, match="no 'ner'"):
        get_tagger("spacy", model=str(tmp_path / "blank"))
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns([{"label": "GPE", "pattern": "Paris"}, {"label": "NORP", "pattern": "French"}])
    nlp.to_disk(tmp_path / "pipe")
    tagger = get_tagger("spacy", model=str(tmp_path / "pipe"))
    text = "The French court sat in Paris."
    labels = {text[s.start:s.end]: s.label for s in tagger.tag(text)}
    assert labels.get("Paris") == "LOC" and labels.get("French") == "DEM"
