"""Issue 33, items 1 and 2, end to end through every entry point: spans are offsets into the text
exactly as the user gave it (a BOM, CRLF and lone CR line ends, tabs and decomposed accents
count), so ``tag`` piped into ``sanitize --spans`` hides exactly the tagged characters; and a
label named in neither ``labels`` nor ``keep`` is refused, never released.

The model is the "perfect copier" (tests/tinylm.py): it rewrites whatever its row shows, so a
tagged character reaches the output only if a row showed it.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import tokendp
from tokendp.cli import main
from tokendp.errors import InvalidParameterError
from tokendp.text.spans import Span

OPTIONS = {"prompt_template": "<|doc|>{document}<|rewrite|>", "placeholder": "<|mask|>"}
NAMES = ["Anna Ivanova", "Zoë Lindqvist", "Jose\u0301 Marti\u0301", "王小明", "Tomas 😀 Berg"]
FILLERS = ["Dear Dr", "I write about", "who was seen", "\t", "  ", "at the clinic", "thanks"]
BREAKS = ["\r\n", "\r", "\n", "\r\n\r\n", " "]


class NameTagger:
    """Finds the names of :data:`NAMES` (a tagger the test controls, on any script)."""

    name = "names"

    def tag(self, text: str) -> list[Span]:
        pattern = "|".join(re.escape(n) for n in NAMES)
        return [Span(m.start(), m.end(), "PERSON") for m in re.finditer(pattern, text)]


@st.composite
def letters(draw):
    parts = []
    for _ in range(draw(st.integers(2, 6))):
        parts += [draw(st.sampled_from(FILLERS)), " ", draw(st.sampled_from(NAMES)), draw(st.sampled_from(BREAKS))]
    body = "".join(parts) + draw(st.sampled_from(["", " ", "\r\n", "  \r\n"]))
    return ("\ufeff" if draw(st.booleans()) else "") + body


def _hidden(output: str, raw: str, spans: list[Span]) -> None:
    """No tagged name reaches the output; the text between the names does."""
    for s in spans:
        assert raw[s.start:s.end] not in output
    assert "clinic" in output or "clinic" not in raw


@pytest.fixture(scope="module")
def copier():
    import tinylm

    return tinylm.backend(OPTIONS, copier=True)


@settings(max_examples=25, deadline=None)
@given(letters())
def test_python_tag_then_sanitize_hides_exactly_the_tagged_characters(copier, raw):
    spans = tokendp.tag(raw, tagger=NameTagger())
    assert [raw[s.start:s.end] for s in spans] == re.findall("|".join(re.escape(n) for n in NAMES), raw)
    res = tokendp.sanitize(raw, spans=spans, model=copier, method="public", temperature=0,
                           no_repeat_ngram_size=0)  # the copier copies repeated text too
    _hidden(res.text, raw, spans)
    assert res.report.groups[0].n_spans == len(spans)


def test_the_cli_tag_json_piped_into_sanitize_spans_hides_the_tagged_text(copier, tmp_path, monkeypatch):
    """The issue's reproduction: the bundled letter saved with Windows line endings and a BOM;
    `tag --json` offsets into the raw file, `sanitize --spans` applies them to the same bytes."""
    import tokendp.jobs.sanitize as job

    monkeypatch.setattr(job, "load_backend", lambda *a, **k: copier)
    raw = "\ufeffDear Dr Helen Marsh,\r\n\r\nMr Tomas Lindqvist, born on 14 March 1961,\r\nnumber RX-448120.\r\n"
    path = tmp_path / "letter_crlf.txt"
    path.write_bytes(raw.encode("utf-8"))
    res = CliRunner().invoke(main, ["tag", str(path), "--tagger", "patterns", "--json"])
    assert res.exit_code == 0, res.output
    spans = json.loads(res.stdout)
    tagged = [raw[s["start"]:s["end"]] for s in spans]
    assert "14 March 1961" in tagged and "RX-448120" in tagged  # offsets into the file as given
    (tmp_path / "spans.json").write_text(json.dumps(spans))
    res = CliRunner().invoke(main, ["sanitize", str(path), "--spans", str(tmp_path / "spans.json"), "--model", "copy",
                                    "--method", "public", "--temperature", "0", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert "1961" not in out["text"] and "448120" not in out["text"] and "Lindqvist" in out["text"]
    assert out["report"]["spans_source"] == "given"


def test_the_service_plan_maps_spans_given_on_the_raw_text(copier):
    """The service's own path (schemas -> plans -> the prepared job) on a CRLF document."""
    from tokendp.jobs.sanitize import run_sanitize
    from tokendp.service.plans import plan_sanitize
    from tokendp.service.schemas import SanitizeRequest

    raw = "Dear Dr Helen Marsh,\r\nI write about\r\nMr Tomas Lindqvist.\r\n"
    spans = [{"start": raw.index("Helen"), "end": raw.index("Marsh") + 5, "label": "PERSON"},
             {"start": raw.index("Tomas"), "end": raw.index("Lindqvist") + 9, "label": "PERSON"}]
    req = SanitizeRequest(id="crlf", text=raw, spans=spans, method="public", temperature=0.7)
    plan = plan_sanitize(req, copier, None, max_tokens=256)
    (out,) = run_sanitize(plan.job, seed=0)
    assert "Helen" not in out.text and "Lindqvist" not in out.text and "write about" in out.text
    refused = SanitizeRequest(id="typo", text=raw, spans=spans, labels=["DATE"], method="public")
    with pytest.raises(InvalidParameterError, match="PERSON"):
        plan_sanitize(refused, copier, None, max_tokens=256)


def test_the_issue_labels_command_is_refused_before_the_model_loads(tmp_path):
    """`sanitize letter.txt --spans letter.spans.json --labels PERSON,CODE,DATE` released the two
    DATETIME spans; now it exits 2, naming every label left open, before any model loads: with
    the bundled spans (which now say DATE) the LOC, ORG and DEM spans, and with spans in TAB's
    vocabulary (DATETIME) the dates too."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "examples"
    tab = json.loads((root / "letter.spans.json").read_text().replace('"DATE"', '"DATETIME"'))
    (tmp_path / "tab.spans.json").write_text(json.dumps(tab))
    for spans, open_labels in ((root / "letter.spans.json", "DEM (1 span), LOC (1 span), ORG (1 span)"),
                               (tmp_path / "tab.spans.json", "DATETIME (2 spans), DEM (1 span)")):
        res = CliRunner().invoke(main, ["sanitize", str(root / "letter.txt"), "--spans", str(spans), "--epsilon", "8",
                                        "--labels", "PERSON,CODE,DATE", "--model", "no-such-model"])
        assert res.exit_code == 2 and open_labels in res.output and "no-such-model" not in res.output
        assert "1961" not in res.output and "Leeds" not in res.output
