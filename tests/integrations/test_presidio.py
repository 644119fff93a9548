"""tokendp for Presidio users (docs/integrations.md, "Presidio"): RecognizerResults as spans in Python
and as JSON on the command line, the documented label mapping, and DPAnonymizerEngine in place of
AnonymizerEngine; against the real presidio-analyzer, with pattern recognisers only (no spaCy model)."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("presidio_analyzer", reason="the presidio extra is not installed")

from click.testing import CliRunner  # noqa: E402
from presidio_analyzer import RecognizerResult  # noqa: E402

import tokendp  # noqa: E402
from tests.engines.corpora import model_dir  # noqa: E402
from tests.integrations.examples import DOC, run  # noqa: E402
from tokendp.cli import main  # noqa: E402
from tokendp.errors import InvalidInputError, InvalidParameterError  # noqa: E402
from tokendp.integrations.presidio import DEFAULT_LABELS, DPAnonymizerEngine, to_spans  # noqa: E402
from tokendp.text.taggers import spans_from_json  # noqa: E402

TEXT = ("Dear Dr Helen Marsh, my patient Mr Tomas Lindqvist (tomas@example.com, 212-555-0147) "
        "was admitted on 2 June 2024.")
# What an AnalyzerEngine with a name list and the pattern recognisers returns for TEXT (the email's
# domain is also a URL: overlapping results, as Presidio gives them).
RESULTS = [RecognizerResult("PERSON", 8, 19, 1.0), RecognizerResult("PERSON", 35, 50, 1.0),
           RecognizerResult("EMAIL_ADDRESS", 52, 69, 1.0), RecognizerResult("URL", 58, 69, 0.5),
           RecognizerResult("PHONE_NUMBER", 71, 83, 0.4), RecognizerResult("DATE_TIME", 101, 112, 0.85)]
FAST = {"model": model_dir(), "max_new_tokens": 4, "seed": 0}


def test_results_are_spans_wherever_spans_are_and_json_reads_the_same():
    assert TEXT[8:19] == "Helen Marsh" and TEXT[101:112] == "2 June 2024"
    spans = to_spans(RESULTS, TEXT)
    assert [(s.start, s.end, s.label, s.source) for s in spans][:3] == [
        (8, 19, "PERSON", "presidio:PERSON"), (35, 50, "PERSON", "presidio:PERSON"),
        (52, 69, "CODE", "presidio:EMAIL_ADDRESS")]
    assert {s.label for s in spans} == {"PERSON", "CODE", "DATETIME"}
    as_json = json.loads(json.dumps([r.to_dict() for r in RESULTS]))  # what --spans FILE reads
    assert [(s.start, s.end, s.label, s.score) for s in spans_from_json(as_json, TEXT)] == \
        [(s.start, s.end, s.label, s.score) for s in spans]
    direct = tokendp.sanitize(TEXT, spans=RESULTS, epsilon=8, **FAST)
    by_dicts = tokendp.sanitize(TEXT, spans=as_json, epsilon=8, **FAST)
    assert direct.report.to_dict() == by_dicts.report.to_dict() and direct.text == by_dicts.text
    assert {g["label"] for g in direct.report.to_dict()["groups"]} == {"PERSON", "CODE", "DATETIME"}


def test_the_command_line_reads_analyzer_results_as_json(tmp_path):
    doc, spans = tmp_path / "letter.txt", tmp_path / "letter.spans.json"
    doc.write_text(TEXT, encoding="utf-8")
    spans.write_text(json.dumps([r.to_dict() for r in RESULTS]), encoding="utf-8")
    result = CliRunner().invoke(main, ["sanitize", str(doc), "--spans", str(spans), "--epsilon", "8", "--model",
                                       FAST["model"], "--max-new-tokens", "4", "--seed", "0", "--json"])
    assert result.exit_code == 0, result.output
    groups = json.loads(result.stdout)["report"]["groups"]
    assert {g["label"]: g["n_spans"] for g in groups} == {"PERSON": 2, "CODE": 3, "DATETIME": 1}


def test_the_mapping_is_overridable_and_unknown_types_are_their_own_protected_group():
    custom = [RecognizerResult("MEDICAL_RECORD", 0, 4, 0.9), RecognizerResult("AU_TFN", 5, 7, 0.9)]
    assert [s.label for s in to_spans(custom)] == ["MEDICAL_RECORD", "AU_TFN"]
    assert [s.label for s in to_spans(custom, labels={"medical_record": "CODE"})] == ["CODE", "AU_TFN"]
    assert [s.label for s in to_spans(RESULTS[:1], labels={"PERSON": "ORG"})] == ["ORG"]
    with pytest.raises(InvalidParameterError, match="labels maps Presidio entity types"):
        to_spans(custom, labels={"MEDICAL_RECORD": ""})


def test_the_docs_table_lists_the_default_mapping():
    """docs/integrations.md's label table says what DEFAULT_LABELS does (and nothing else)."""
    table = DOC.read_text(encoding="utf-8").split("| Presidio entity type | tokendp label |")[1].split("\n\n")[0]
    documented = {}
    for left, right in re.findall(r"^\| (.+?) \| `(\w+)` \|$", table, flags=re.MULTILINE):
        documented.update(dict.fromkeys(re.findall(r"`(\w+)`", left), right))
    assert documented == DEFAULT_LABELS


def test_the_anonymizer_takes_labels_and_keep():
    engine = DPAnonymizerEngine(epsilon=8, keep=["DATETIME"], labels={"URL": "MISC"}, **FAST)
    report = engine.anonymize(text=TEXT, analyzer_results=RESULTS).report.to_dict()
    assert {g["label"] for g in report["groups"]} == {"PERSON", "CODE", "MISC"}
    assert report["kept_labels"] == {"DATETIME": 1}
    no_spans = engine.anonymize(text=TEXT, analyzer_results=[]).report.to_dict()
    assert no_spans["groups"] == [] and no_spans["spans_source"] == "given"  # Presidio found nothing: no tagger


@pytest.mark.parametrize("call,error,words", [
    (lambda e: e.anonymize(TEXT, RESULTS, operators={"PERSON": object()}), InvalidParameterError,
     "no per-entity operators"),
    (lambda e: e.anonymize(TEXT, RESULTS, conflict_strategy=1), InvalidParameterError, "unknown option"),
    (lambda e: e.anonymize(TEXT, RESULTS[0]), InvalidParameterError, "analyzer_results is the list"),
    (lambda e: e.anonymize(TEXT, [RecognizerResult("PERSON", 8, 500, 1.0)]), InvalidInputError,
     "span #0 ends at 500, past the end of the text"),
    (lambda e: e.anonymize(TEXT, [RecognizerResult("PERSON", 8, 19, 1.0), "Helen"]), InvalidInputError,
     "span #1 is not a Presidio RecognizerResult"),
    (lambda e: e.anonymize(TEXT, [{"entity_type": "PERSON", "start": "8", "end": 19}]), InvalidInputError,
     "span #0 is malformed: start and end must be integers"),
    (lambda e: e.anonymize(None, RESULTS), InvalidInputError, "has no text"),
])
def test_bad_input_gives_tokendps_errors_before_the_model_loads(monkeypatch, call, error, words):
    import tokendp.backends

    monkeypatch.setattr(tokendp.backends, "load_backend", lambda *a, **k: pytest.fail("the model loaded"))
    with pytest.raises(error) as info:
        call(DPAnonymizerEngine(epsilon=8))
    assert words in str(info.value) and "Helen" not in str(info.value)


def test_bad_settings_are_refused_when_the_engine_is_built():
    with pytest.raises(InvalidParameterError, match="runs no tagger"):
        DPAnonymizerEngine(epsilon=8, tagger="auto")
    with pytest.raises(InvalidParameterError, match="epsilon"):
        DPAnonymizerEngine(epsilon=-1)
    with pytest.raises(InvalidParameterError, match="labels maps"):
        DPAnonymizerEngine(epsilon=8, labels=["PERSON"])


@pytest.mark.slow
def test_the_docs_example_runs_with_the_default_rewriter(tmp_path, monkeypatch):
    """The one example on the default model: Presidio's analyzer (pattern recognisers and a name
    list, offline), then DPAnonymizerEngine in AnonymizerEngine's place, then the jobs and JSON."""
    monkeypatch.chdir(tmp_path)
    found = run("Presidio", 0, 1)
    result, results = found["result"], found["results"]
    assert result.report.model == "rewriter" and result.text.strip()
    assert {r.entity_type for r in results} >= {"PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER"}
    assert {g["label"] for g in result.report.to_dict()["groups"]} >= {"PERSON", "CODE"}
    labels = [g["label"] for g in result.report.to_dict()["groups"]]
    assert [g["label"] for g in found["rewrite"].report.to_dict()["groups"]] == labels  # the jobs read them alike
    read = spans_from_json(str(tmp_path / "letter.spans.json"), found["text"])  # what --spans FILE reads
    assert [(s.start, s.end, s.label) for s in read] == [(s.start, s.end, s.label) for s in to_spans(results)]
