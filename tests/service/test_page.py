"""The page at / driven by Playwright in a real headless Chromium (Debian's ``chromium``).

With TOKENDP_UPDATE_SCREENSHOT=1 the final screenshot replaces docs/service/page.png."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.service.conftest import LETTER

pytestmark = pytest.mark.slow
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "service" / "page.png"

SELECT = """([doc, needle]) => {
  const root = document.getElementById(doc);
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.textContent.indexOf(needle);
    if (at >= 0) {
      const range = document.createRange();
      range.setStart(node, at);
      range.setEnd(node, at + needle.length);
      window.getSelection().removeAllRanges();
      window.getSelection().addRange(range);
      return true;
    }
  }
  return false;
}"""


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH: apt-get install chromium (Playwright's own download is not used)")
def test_the_page_tags_edits_spans_rewrites_streaming_and_shows_report_and_budget(service, tmp_path):
    server, keys = service
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(server.url + "/")
            page.fill("#key", keys["page"])
            page.fill("#doc-id", "page-letter")
            page.fill("#text", LETTER)
            page.click("#tag")
            page.wait_for_selector("#doc mark[data-label=DATETIME]")
            assert page.locator("#doc mark[data-label=PERSON]").count() == 2

            # remove the date, add it back from a selection, relabel it and back
            page.locator("#spans tbody tr", has_text="2 June 2024").get_by_role("button", name="remove").click()
            assert page.locator("#doc mark[data-label=DATETIME]").count() == 0
            assert page.evaluate(SELECT, ["doc", "2 June 2024"])
            page.select_option("#new-label", "DATETIME")
            page.click("#add-span")
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
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
        finally:
            browser.close()
    if os.environ.get("TOKENDP_UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "page.png", SCREENSHOT)
