"""benchmarks/multilingual_tagger.py: its letters are deterministic, consistent and held out."""

import json
import os
import subprocess
import sys

import pytest

from tests.repo_scripts import ROOT, load_script

pytest.importorskip("faker")

from tokendp.text.taggers.gazetteer import NAMES_FILE, load_names, name_kinds  # noqa: E402
from tokendp.text.taggers.model import default_model_dir  # noqa: E402
from tokendp.text.taggers.name_lists import SCRIPT_GROUPS, part_of_word  # noqa: E402

BENCH = load_script("benchmarks/multilingual_tagger.py")
_DIGEST = ("import hashlib, json, sys; sys.path.insert(0, 'benchmarks'); import multilingual_tagger as m; "
           "print(hashlib.sha256(json.dumps([(d.text, [(s.start, s.end, s.label) for s in d.spans], d.names) "
           "for d in m.letters(12, 4)], ensure_ascii=False).encode()).hexdigest())")


def test_the_same_seed_gives_the_same_letters_in_any_process():
    assert [(d.text, d.spans, d.names) for d in BENCH.letters(12, 4)] == \
        [(d.text, d.spans, d.names) for d in BENCH.letters(12, 4)]
    digests = set()
    for hash_seed in ("1", "2"):  # Python's hash seed must not matter (set orders, Faker's lists)
        env = {**os.environ, "PYTHONHASHSEED": hash_seed,
               "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run([sys.executable, "-c", _DIGEST], cwd=ROOT, env=env, capture_output=True, text=True,
                             check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1
    assert BENCH.letters(4, 5)[0].text != BENCH.letters(4, 4)[0].text


def test_letters_have_every_kind_and_script_and_consistent_spans():
    docs = BENCH.letters(8, 0)
    assert {d.kind for d in docs} == set(BENCH.LETTERS)
    assert {group for d in docs for group, _, _ in d.names} == set(SCRIPT_GROUPS)
    for d in docs:
        people = [s for s in d.spans if s.label == "PERSON"]
        assert len(people) == len(d.names)
        for (_, a, b), span in zip(d.names, people):
            assert span.start <= a < b == span.end and d.text[a:b].strip() == d.text[a:b]
        assert {"LOC", "ORG", "DATETIME", "CODE"} <= {s.label for s in d.spans}


def test_letters_name_only_held_out_words_absent_from_the_gazetteer():
    shipped = load_names(default_model_dir() / NAMES_FILE)
    used = [w for d in BENCH.letters(40, 0) for w in d.name_words]
    assert used and all(part_of_word(w) == "heldout" and not name_kinds(w, shipped) for w in used)


def test_score_reports_every_script_group():
    class Nothing:
        def tag(self, text):
            return []

    result = BENCH.score(Nothing(), BENCH.letters(7, 0))
    assert set(result["person_recall_by_script"]) == set(SCRIPT_GROUPS)
    assert result["recall"] == 0.0
    json.dumps(result)
