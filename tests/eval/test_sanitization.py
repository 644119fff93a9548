"""End to end on a tiny model and a tiny TAB-format folder: rows, resume, outputs."""

import json

import pytest

import tinylm
from tokendp.backends import HFBackend
from tokendp.eval import sanitization
from tokendp.eval.report import write_results
from tokendp.errors import InvalidInputError
from tokendp.eval.sanitization import EvalConfig, evaluate_sanitization, select_documents
from tokendp.params import default_new_tokens

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


def test_each_document_at_its_own_t_alone_whatever_else_is_evaluated(data, tmp_path):
    """``max_new_tokens=None``: every document is released at sanitize's T for it, its settings
    calibrated to that T and its groups (the fixed accounting certifies its target on each), and
    its figures do not depend on the other documents selected."""
    folder, cands = data
    backend = HFBackend(tinylm.model(), tinylm.tokenizer(), options=OPTIONS)
    config = EvalConfig(data_dir=str(folder), candidates=str(cands), model="tiny",
                        methods=("public", "dp-fusion", "dp-fusion-filter"), epsilons=(8.0,), filter_epsilons=(4.0,),
                        split="all", max_chars=None, max_new_tokens=None)
    rows = evaluate_sanitization(config, tmp_path / "all", backend=backend, progress=False)
    by = {(r["method"], r["setting"]): r for r in rows}
    assert set(by) == {("public", "-"), ("dp-fusion", "eps=8"), ("dp-fusion-filter", "eps=4")}
    assert by["dp-fusion", "eps=8"]["epsilon"] == pytest.approx(8.0, rel=1e-6)
    assert by["dp-fusion-filter", "eps=4"]["epsilon"] == pytest.approx(4.0, rel=1e-6)
    cache = next((tmp_path / "all" / "cache").iterdir())
    tokenizer = tinylm.tokenizer()
    for doc, (text, _) in DOCS.items():
        record = json.loads((cache / "dp-fusion__eps-8" / f"{doc}.json").read_text())
        assert record["max_new_tokens"] == default_new_tokens(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
        assert record["epsilon"] == pytest.approx(8.0, rel=1e-6)
    alone = EvalConfig(**{**config.__dict__, "ids": ("c", "a")})
    evaluate_sanitization(alone, tmp_path / "two", backend=backend, progress=False)
    again = next((tmp_path / "two" / "cache").iterdir())
    assert again.name == cache.name  # the selection does not enter the run: same seeds, same settings
    for key in ("public__-", "dp-fusion__eps-8", "dp-fusion-filter__eps-4"):
        for doc in ("a", "c"):
            assert json.loads((again / key / f"{doc}.json").read_text()) == \
                   json.loads((cache / key / f"{doc}.json").read_text())


def test_documents_are_selected_by_id_or_spread_over_lengths_before_the_model_loads(data, monkeypatch):
    folder, cands = data
    texts = {k: t for k, (t, _) in DOCS.items()}
    base = EvalConfig(data_dir=str(folder), candidates=str(cands), model="tiny", methods=("public",), split="all")
    assert select_documents(texts, EvalConfig(**{**base.__dict__, "ids": ("d", "b")})) == ["d", "b"]
    by_length = sorted(texts, key=lambda d: len(texts[d]))
    assert select_documents(texts, EvalConfig(**{**base.__dict__, "spread": True, "limit": 2})) == \
           [by_length[0], by_length[-1]]
    assert select_documents(texts, EvalConfig(**{**base.__dict__, "limit": 2})) == ["a", "b"]

    def refuse(*args, **kwargs):
        raise AssertionError("an unknown id must be refused before the model loads")

    monkeypatch.setattr(sanitization, "load_backend", refuse)
    with pytest.raises(InvalidInputError, match="not in the 'all' split: zz"):
        evaluate_sanitization(EvalConfig(**{**base.__dict__, "ids": ("a", "zz")}), folder / "out", progress=False)


def test_a_document_longer_than_the_context_is_refused(data, tmp_path):
    folder, cands = data
    backend = HFBackend(tinylm.model(), tinylm.tokenizer(), options=OPTIONS)
    config = EvalConfig(data_dir=str(folder), candidates=str(cands), model="tiny", methods=("public",),
                        split="all", max_new_tokens=backend.max_context)
    with pytest.raises(InvalidInputError, match="more than the model's context"):
        evaluate_sanitization(config, tmp_path / "out", backend=backend, progress=False)
