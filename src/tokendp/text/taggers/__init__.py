"""Taggers that find private spans, labelled with TAB's categories (DATETIME and DEM split finer).

``tag(text, tagger=name)`` finds a text's spans (``tokendp.tag``); ``get_tagger(name)`` builds one
of ``auto|patterns|model|presidio|spacy``; ``spans_from_json`` reads spans a user already has;
``resolve_overlaps`` makes spans from several taggers disjoint.
"""

from tokendp.text.taggers.base import Tagger
from tokendp.text.taggers.json_spans import spans_from_json
from tokendp.text.taggers.labels import LABELS, TAB_LABELS, to_presidio, to_tab
from tokendp.text.taggers.registry import TAGGER_NAMES, get_tagger, tag
from tokendp.text.taggers.resolve import merge_same_label, resolve_overlaps

__all__ = ["LABELS", "TAB_LABELS", "TAGGER_NAMES", "Tagger", "get_tagger", "merge_same_label",
           "resolve_overlaps", "spans_from_json", "tag", "to_presidio", "to_tab"]
