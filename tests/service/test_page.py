"""The page at / driven by Playwright in a real headless Chromium (Debian's ``chromium``).

With TOKENDP_UPDATE_SCREENSHOT=1 the final screenshot replaces docs/service/page.png."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.service.conftest import LETTER, auth
from tests.service.page_helpers import browser, csp_violations, open_page, select  # noqa: F401 (browser: a fixture)

pytestmark = pytest.mark.slow
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "service" / "page.png"
# Astral characters (two UTF-16 code units, one Python code point) before and inside the spans.
ASTRAL = ("Dear 😀 Dr Helen Marsh, 👩‍⚕️ I write about my patient 𠀀 Mr Tomas Lindqvist and his wife 𠮷田 Hana, "
          "admitted on 2 June 2024.")
MARKS = "() => [...document.querySelectorAll('#doc mark')].map((m) => m.textContent)"


def add_span(page, needle: str, label: str, before: int = 0) -> None:
    select(page, needle, before)
    page.select_option("#new-label", label)
    page.click("#add-span")


def test_the_page_tags_edits_spans_rewrites_streaming_and_shows_report_and_budget(service, browser, tmp_path):
    server, keys = service
    page, console = open_page(browser, server, keys["page"])
    page.fill("#doc-id", "page-letter")
    page.fill("#text", LETTER)
    page.click("#tag")
    page.wait_for_selector("#doc mark[data-label=DATE]")
    assert page.locator("#doc mark[data-label=PERSON]").count() == 2

    # remove the date, add it back from a selection, relabel it and back
    page.locator("#spans tbody tr", has_text="2 June 2024").get_by_role("button", name="remove").click()
    assert page.locator("#doc mark[data-label=DATE]").count() == 0
    add_span(page, "2 June 2024", "DATETIME")
    assert page.locator("#doc mark[data-label=DATETIME]").inner_text() == "2 June 2024"
    page.locator("#spans tbody tr", has_text="2 June 2024").locator("select").select_option("MISC")
    assert page.locator("#doc mark[data-label=MISC]").count() == 1
    page.locator("#spans tbody tr", has_text="2 June 2024").locator("select").select_option("DATETIME")

    page.fill("#groups input[data-group=PERSON]", "6")
    page.fill("#groups input[data-group=DATETIME]", "4")
    page.fill("#max-tokens", "32")
    page.click("#run")
    page.wait_for_selector("#report tbody tr >> nth=1", timeout=120_000)
    page.wait_for_selector("#budget tbody tr >> nth=1", timeout=60_000)
    assert page.inner_text("#output").strip()
    report = page.inner_text("#report")
    assert "PERSON" in report and "DATETIME" in report and "6.000" in report and "4.000" in report
    assert "page-letter" in page.inner_text("#budget")
    assert page.inner_text("#error") == ""
    assert csp_violations(page, console) == []
    page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    if os.environ.get("TOKENDP_UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "page.png", SCREENSHOT)


def test_the_page_converts_offsets_between_utf16_and_code_points_with_emoji_and_astral_cjk(service, browser):
    """JavaScript counts UTF-16 code units, the server code points: a span after an emoji must
    still cover exactly the name, both for /v1/tag's spans shown and for the spans sent."""
    httpx = pytest.importorskip("httpx")
    server, keys = service
    page, console = open_page(browser, server, keys["page"])
    sent = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.url.endswith("/v1/sanitize") else None)
    page.fill("#doc-id", "astral-letter")
    page.set_input_files("#file", files=[{"name": "letter.txt", "mimeType": "text/plain",
                                          "buffer": ASTRAL.encode()}])
    page.wait_for_function("(text) => document.getElementById('text').value === text", arg=ASTRAL)
    page.click("#tag")
    page.wait_for_selector("#doc mark[data-label=DATE]")
    tagged = httpx.post(server.url + "/v1/tag", json={"text": ASTRAL}, headers=auth(keys["page"])).json()["spans"]
    assert page.evaluate(MARKS) == [ASTRAL[s["start"]:s["end"]] for s in tagged]
    assert "2 June 2024" in page.evaluate(MARKS)

    add_span(page, "Helen Marsh", "PERSON")          # after 😀: replaces the tagger's "Dr Helen Marsh"
    add_span(page, "𠮷田 Hana", "PERSON")             # a span with an astral character inside
    add_span(page, " Dr", "MISC", before=1)          # starts inside 😀's surrogate pair: widened to all of 😀
    assert page.evaluate(MARKS) == ["😀 Dr", "Helen Marsh", "Mr Tomas Lindqvist", "𠮷田 Hana", "2 June 2024"]
    assert page.locator("#spans tbody tr td:first-child").all_inner_texts() == page.evaluate(MARKS)

    page.fill("#max-tokens", "16")
    page.click("#run")
    page.wait_for_selector("#report tbody tr >> nth=2", timeout=120_000)
    assert page.inner_text("#error") == ""
    [body] = sent
    assert body["text"] == ASTRAL
    assert sorted((s["label"], ASTRAL[s["start"]:s["end"]]) for s in body["spans"]) == [
        ("DATE", "2 June 2024"), ("MISC", "😀 Dr"), ("PERSON", "Helen Marsh"),
        ("PERSON", "Mr Tomas Lindqvist"), ("PERSON", "𠮷田 Hana")]
    rows = [row.split("\t")[:2] for row in page.locator("#report tbody tr").all_inner_texts()]
    assert dict(rows) == {"DATE": "1", "MISC": "1", "PERSON": "3"}
    assert csp_violations(page, console) == []


def test_spans_the_tagger_found_for_an_older_text_are_not_laid_on_an_edited_one(service, browser):
    server, keys = service
    page, _ = open_page(browser, server, keys["page"])
    held = []
    page.route("**/v1/tag", lambda route: held.append(route))
    page.fill("#text", LETTER)
    page.click("#tag")
    while not held:
        page.wait_for_timeout(20)
    page.fill("#text", "P.S. " + LETTER)
    held[0].continue_()
    page.wait_for_selector("#error:has-text('changed while the tagger ran')")
    assert page.evaluate(MARKS) == []


def test_the_csp_blocks_inline_style_foreign_fetches_and_html_sinks_in_the_browser(service, browser):
    """The control for the tests above: a violation is seen when there is one."""
    server, keys = service
    page, console = open_page(browser, server, keys["page"])
    page.evaluate("""() => {
      const style = document.createElement("style");
      style.textContent = "body { background: red }";
      document.head.append(style);
    }""")
    page.evaluate("fetch('http://example.invalid/').catch(() => null)")
    assert page.evaluate("() => { try { document.body.innerHTML = '<b>x</b>'; return 'set'; } "
                         "catch { return 'refused'; } }") == "refused"
    page.wait_for_function("window.cspViolations.length >= 3")
    assert {"style-src-elem", "connect-src", "require-trusted-types-for"} <= set(page.evaluate("window.cspViolations"))
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") != "rgb(255, 0, 0)"
    assert any("Content Security Policy" in m for m in console)
