"""End to end on a tiny model and a tiny TAB-format folder: rows, resume, outputs."""

import json

import pytest

import tinylm
from tokendp.backends import HFBackend
from tokendp.eval import sanitization
from tokendp.eval.report import write_results
from tokendp.eval.sanitization import EvalConfig, evaluate_sanitization

OPTIONS = {"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>", "stop": []}
DOCS = {
    "a": ("Mr Tomas Lindqvist was admitted on 2 June 2024.", [[0, 18, "PERSON"], [35, 46, "DATETIME"]]),
    "b": ("Dr Helen Marsh wrote to Mr Amir Patel in Leeds.", [[0, 14, "PERSON"], [24, 37, "PERSON"],
                                                          [41, 46, "LOC"]]),
    "c": ("The court held a hearing on 6 May 2001 about case 123/01.", [[28, 38, "DATETIME"], [50, 56, "CODE"]]),
    "d": ("The applicant lives in Leeds.", [[23, 28, "LOC"]]),
}
POOL = {"PERSON": ["Mr Adams", "Ms Brown", "Dr Chen", "Mr Diaz", "Ms Evans"],
        "DATETIME": ["1 Jan 1990", "3 March 1999", "5 May 2005", "9 July 2011"],
        "CODE": ["1/90", "22/01", "333/02", "4444/03"]}


@pytest.fixture()
def data(tmp_path):
    folder = tmp_path / "tab"
    folder.mkdir()
    (folder / "texts.json").write_text(json.dumps({k: t for k, (t, _) in DOCS.items()}))
    (folder / "gold_spans.json").write_text(json.dumps({k: s for k, (_, s) in DOCS.items()}))
    (tmp_path / "cands.json").write_text(json.dumps(POOL))
    return folder, tmp_path / "cands.json"


def test_fixture_spans_match_the_texts():
    for text, spans in DOCS.values():
        assert all(text[a:b].strip() == text[a:b] and b <= len(text) for a, b, _ in spans)


def test_end_to_end_and_resume(data, tmp_path, monkeypatch):
    folder, cands = data
    backend = HFBackend(tinylm.model(), tinylm.tokenizer(), options=OPTIONS)
    config = EvalConfig(data_dir=str(folder), candidates=str(cands), model="tiny",
                        methods=("original", "public", "scrub", "dp-decoding", "dp-fusion"), epsilons=(50.0,),
                        split="all", max_new_tokens=6, batch_docs=3)
    out = tmp_path / "out"
    rows = evaluate_sanitization(config, out, backend=backend, progress=False)
    by = {(r["method"], r["setting"]): r for r in rows}
    assert set(by) == {("original", "-"), ("public", "-"), ("scrub", "-"), ("dp-decoding", "eps=50"),
                       ("dp-fusion", "eps=50")}
    assert by[("original", "-")]["epsilon"] is None and by[("public", "-")]["epsilon"] == 0.0
    assert by[("dp-fusion", "eps=50")]["epsilon"] == pytest.approx(50.0, rel=1e-6)
    for r in rows:
        assert r["ppl"] > 1 and r["docs"] == 4
        assert r["games"] == 5  # a: PERSON, DATETIME; b: PERSON; c: DATETIME, CODE; d: none
        assert 0 <= r["asr_loss"] <= 1 and 0 <= r["asr_mink"] <= 1
        assert r["asr_loss_CODE"] is not None and r["asr_loss_PERSON"] is not None

    def refuse(*args, **kwargs):
        raise AssertionError("a resumed run must not generate again")

    monkeypatch.setattr(sanitization, "generate", refuse)
    again = evaluate_sanitization(config, out, backend=backend, progress=False)
    assert [{k: v for k, v in r.items() if k != "seconds_total"} for r in again] == \
           [{k: v for k, v in r.items() if k != "seconds_total"} for r in rows]

    paths = write_results(rows, out, command="tokendp eval sanitize ...")
    names = {p.name for p in paths}
    assert {"results.json", "results.csv", "results.md", "epsilon_vs_ppl.png", "epsilon_vs_asr.png"} <= names
    assert json.loads((out / "results.json").read_text())[0]["method"] == "original"
    table = (out / "results.md").read_text()
    assert "| dp-fusion | eps=50 |" in table
    for text, _ in DOCS.values():  # no private text in any output or cache file
        for p in out.rglob("*.json"):
            assert text[:12] not in p.read_text()
