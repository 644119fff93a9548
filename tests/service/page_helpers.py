"""Shared by the page's browser tests: Debian's ``chromium`` driven by Playwright, the page opened
with a key after its hardening headers are checked, CSP violations, and selecting text."""

from __future__ import annotations

import shutil

import pytest

from tokendp.service.headers import CSP

playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

SELECT = """([doc, needle, before]) => {
  const root = document.getElementById(doc);
  const from = root.textContent.indexOf(needle) - before, to = from + before + needle.length;
  const range = document.createRange();
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(), at = 0; node; at += node.length, node = walker.nextNode()) {
    if (at <= from && from <= at + node.length) range.setStart(node, from - at);
    if (at <= to && to <= at + node.length) { range.setEnd(node, to - at); break; }
  }
  window.getSelection().removeAllRanges();
  window.getSelection().addRange(range);
  return from + before >= 0;
}"""
MODULES = ("app", "api", "dom", "spans", "report", "sanitize", "owner", "reader", "ask")
PAGE_FILES = {"/", "/static/style.css", *(f"/static/{m}.js" for m in MODULES)}
WATCH_CSP = """window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => window.cspViolations.push(e.effectiveDirective));"""


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH: apt-get install chromium (Playwright's own download is not used)")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield browser
        browser.close()


def open_page(browser, server, key: str, *, watch=None):
    """(page, console): the page with ``key`` filled in, after checking the hardening headers of it
    and its static files; ``console`` collects its Content-Security-Policy errors (the page's
    ``cspViolations`` its securitypolicyviolation events, Trusted Types included). ``watch(page)``
    runs before the page loads (to record its traffic from the start)."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.add_init_script(WATCH_CSP)
    if watch is not None:
        watch(page)
    console = []
    page.on("console", lambda m: console.append(m.text) if "Content Security Policy" in m.text else None)
    loaded = []
    page.on("response", lambda r: loaded.append(r) if r.url.startswith(server.url) else None)
    page.goto(server.url + "/")
    page.wait_for_load_state("load")
    assert {r.url.removeprefix(server.url) for r in loaded} >= PAGE_FILES
    for response in loaded:
        assert response.headers["x-content-type-options"] == "nosniff"
        if response.url.removeprefix(server.url) in PAGE_FILES:
            assert response.headers["content-security-policy"] == CSP and response.headers["x-frame-options"] == "DENY"
            assert response.headers["referrer-policy"] == "no-referrer"
    page.fill("#key", key)
    return page, console


def csp_violations(page, console: list[str]) -> list[str]:
    return page.evaluate("window.cspViolations") + console


def select(page, needle: str, before: int = 0, view: str = "doc") -> None:
    """Select ``needle`` in the view ``view``, widened by ``before`` UTF-16 code units to the left."""
    assert page.evaluate(SELECT, [view, needle, before])
