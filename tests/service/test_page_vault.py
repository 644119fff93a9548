"""The vault's page (docs/vault.md, "The page") in a real headless Chromium against a real
``tokendp serve`` (the tiny model): the owner's view (documents, a draft's proposed spans removed,
added by selection and confirmed, the ledger, quotas) and the reader's view (ids and public titles,
a streamed rewrite and its certificate), which never receives a stored document's text."""

from __future__ import annotations

import json
from urllib.parse import urlparse

import pytest

httpx = pytest.importorskip("httpx", reason="the service tests need httpx (the dev extra)")

from tests.service.conftest import LETTER  # noqa: E402
from tests.service.page_helpers import browser, csp_violations, open_page, select  # noqa: E402,F401 (a fixture)
from tests.service.vault.helpers import call, make_keys  # noqa: E402

pytestmark = pytest.mark.slow

TENANT = "vault-page"
# A confirmed document whose private spans no model would write by chance, and a draft.
WARD = "Ward 3 note: Dr Quorvath Zindelby saw Mrs Ylvarra Brennick-Oss on 14 Smarch 2031 about her knee."
WARD_SPANS = [("Dr Quorvath Zindelby", "PERSON", "dr-quorvath"), ("Mrs Ylvarra Brennick-Oss", "PERSON", None),
              ("14 Smarch 2031", "DATE", None)]
DRAFT = "Xyphorine Quallbeck was admitted to the ward by Dr Quorvath Zindelby."
STORED = (WARD, DRAFT, "Quorvath", "Zindelby", "Ylvarra", "Brennick", "Smarch", "Xyphorine", "Quallbeck",
          "dr-quorvath", "patient-k")
READER_CALLS = {("GET", "/v1/whoami"), ("GET", "/v1/documents"), ("GET", "/v1/documents/ward-letter/rewrite"),
                ("POST", "/v1/ask")}
MARKS = "(view) => [...document.querySelectorAll(`#${view} mark`)].map((m) => m.textContent)"
SHOWN = "#{}:not([hidden])"


def spans_of(text: str, spans) -> list[dict]:
    return [{"start": text.index(t), "end": text.index(t) + len(t), "label": label, **({"subject": s} if s else {})}
            for t, label, s in spans]


@pytest.fixture(scope="module")
def vault_page(service):
    """(server, keys): tenant vault-page on the shared server, with an owner and a reader key, the
    confirmed document ward-letter and the drafts hidden-draft and kept-draft."""
    server, _ = service
    owner, reader = make_keys(server.db, TENANT, "owner", "reader")
    ward = {"id": "ward-letter", "title": "Ward 3 note", "subject": "patient-k", "text": WARD,
            "spans": spans_of(WARD, WARD_SPANS)}
    assert call(server, "POST", "/v1/documents", owner, json=ward).status_code == 201
    for id in ("hidden-draft", "kept-draft"):  # the owner's test confirms the first
        draft = {"id": id, "title": "not yet", "text": DRAFT}
        assert call(server, "POST", "/v1/documents", owner, json=draft).json()["state"] == "draft"
    return server, {"owner": owner, "reader": reader}


def streamed(body: str) -> tuple[str, dict]:
    """(the token events' text joined, the result event's body) of a server-sent events body."""
    events = [(block.split("\n")[0].removeprefix("event: "), json.loads(block.split("\n")[1].removeprefix("data: ")))
              for block in body.strip().split("\n\n")]
    assert [name for name, _ in events][-1] == "result" and len(events) > 2, "streamed token by token, then the result"
    return "".join(data["text"] for name, data in events if name == "token"), events[-1][1]


def marks(page, view: str) -> list[str]:
    return page.evaluate(MARKS, view)


def test_the_owner_adds_a_draft_removes_and_adds_spans_confirms_and_sees_units_and_quotas(vault_page, browser):
    server, keys = vault_page
    sent = []
    page, console = open_page(browser, server, keys["owner"],
                              watch=lambda p: p.on("request", lambda r: sent.append((r.method, urlparse(r.url).path))))
    page.wait_for_selector(SHOWN.format("owner-view"))
    assert page.is_hidden("#reader-view") and page.inner_text("#whoami") == f"owner of {TENANT}"
    page.wait_for_selector("#documents tbody tr:has-text('ward-letter')")
    assert "draft" in page.locator("#documents tbody tr", has_text="hidden-draft").inner_text()

    # a document without spans: the server's tagger proposes them, and it is a draft
    page.fill("#new-id", "draft-letter")
    page.fill("#new-title", "Discharge letter")
    page.fill("#new-subject", "patient-7")
    page.fill("#new-text", LETTER)
    page.click("#add-document")
    page.wait_for_selector("#review-doc mark[data-label=DATE]")
    assert marks(page, "review-doc") == ["Dr Helen Marsh", "Mr Tomas Lindqvist", "2 June 2024"]
    assert page.inner_text("#review-state") == "draft"
    assert "draft" in page.locator("#documents tbody tr", has_text="draft-letter").inner_text()

    # remove the date (click its mark), add it back by selection as DATETIME of a subject, give Dr Marsh hers
    page.click("#review-doc mark[data-label=DATE]")
    assert marks(page, "review-doc") == ["Dr Helen Marsh", "Mr Tomas Lindqvist"]
    select(page, "2 June 2024", view="review-doc")
    page.select_option("#review-label", "DATETIME")
    page.fill("#review-subject", "admissions")  # the selection moves into the input: the page kept the one made
    page.click("#review-add")
    assert page.inner_text("#review-doc mark[data-label=DATETIME]") == "2 June 2024"
    page.locator("#review-spans tbody tr", has_text="Dr Helen Marsh").locator("input").fill("dr-marsh")
    page.keyboard.press("Tab")
    page.click("#review-confirm")
    page.wait_for_selector("#review-card", state="hidden")
    assert ("PUT", "/v1/documents/draft-letter") in sent  # changed spans: the document is stored with them
    stored = call(server, "GET", "/v1/documents/draft-letter", keys["owner"]).json()
    assert stored["state"] == "confirmed" and stored["subject"] == "patient-7" and stored["text"] == LETTER
    assert stored["spans"] == [{"start": 5, "end": 19, "label": "PERSON", "subject": "dr-marsh"},
                               {"start": 51, "end": 69, "label": "PERSON"},
                               {"start": 83, "end": 94, "label": "DATETIME", "subject": "admissions"}]
    page.wait_for_selector("#documents tbody tr:has-text('draft-letter') .state-confirmed")

    # a draft whose proposed spans are right is confirmed as it is
    page.locator("#documents tbody tr", has_text="hidden-draft").get_by_role("button", name="review spans").click()
    page.wait_for_selector(SHOWN.format("review-card"))
    page.click("#review-confirm")
    page.wait_for_selector("#review-card", state="hidden")
    assert ("POST", "/v1/documents/hidden-draft/confirm") in sent
    assert call(server, "GET", "/v1/documents/hidden-draft", keys["owner"]).json()["state"] == "confirmed"

    # a document with its spans as JSON is stored confirmed (JSON that does not parse is refused on the
    # page); the owner deletes it
    page.fill("#new-id", "given-spans")
    page.fill("#new-text", LETTER)
    page.fill("#new-spans", "[{")
    page.click("#add-document")
    assert "not valid JSON" in page.inner_text("#owner-error")
    page.fill("#new-spans", '[{"start": 8, "end": 19, "label": "PERSON", "subject": "dr-marsh"}]')
    page.click("#add-document")
    page.wait_for_selector("#documents tbody tr:has-text('given-spans') .state-confirmed")
    assert page.is_hidden("#review-card") and page.inner_text("#owner-error") == ""
    assert call(server, "GET", "/v1/documents/given-spans", keys["owner"]).json()["spans"] == [
        {"start": 8, "end": 19, "label": "PERSON", "subject": "dr-marsh"}]
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#documents tbody tr", has_text="given-spans").get_by_role("button", name="delete").click()
    page.wait_for_selector("#documents tbody tr:has-text('given-spans')", state="detached")
    assert call(server, "GET", "/v1/documents/given-spans", keys["owner"]).status_code == 404

    # a release charges the units, which the ledger shows; a reader's quota is set on the page
    released = call(server, "GET", "/v1/documents/draft-letter/rewrite", keys["reader"],
                    params={"epsilon": 3, "max_new_tokens": 4})
    assert released.status_code == 200, released.text
    page.click("#ledger-refresh")
    page.wait_for_selector("#ledger tbody tr:has-text('subject admissions')")
    ledger = page.inner_text("#ledger")
    assert "subject patient-7" in ledger and "subject dr-marsh" in ledger
    alpha = call(server, "GET", "/v1/ledger", keys["owner"]).json()["alpha"]
    assert f"order α {alpha:g}" in page.inner_text("#ledger-note")
    row = page.locator("#readers tbody tr", has_text=keys["reader"][:10])
    row.locator("input").first.fill("50")
    row.get_by_role("button", name="save").click()
    page.wait_for_function("() => document.querySelector('#readers tbody input').value === '50' && "
                           "!document.getElementById('owner-error').textContent")
    [reader] = call(server, "GET", "/v1/readers", keys["owner"]).json()["readers"]
    assert reader["releases_per_day"] == 50 and reader["tokens_per_day"] is None
    assert page.inner_text("#owner-error") == ""
    assert csp_violations(page, console) == []


def test_the_reader_lists_titles_gets_a_streamed_rewrite_and_answer_with_certificates_and_never_any_stored_text(
        vault_page, browser):
    server, keys = vault_page
    received = []  # (method, path, body) of every response from the server, intercepted

    def capture(route):
        response = route.fetch()
        received.append((route.request.method, urlparse(route.request.url).path, response.text()))
        route.fulfill(response=response)

    page, console = open_page(browser, server, keys["reader"], watch=lambda p: p.route(server.url + "/**", capture))
    page.wait_for_selector(SHOWN.format("reader-view"))
    assert page.is_hidden("#owner-view") and page.inner_text("#whoami") == f"reader of {TENANT}"
    page.wait_for_selector("#catalog tbody tr:has-text('ward-letter')")
    assert "Ward 3 note" in page.locator("#catalog tbody tr", has_text="ward-letter").inner_text()
    assert "kept-draft" not in page.inner_text("#catalog")  # a draft is the owner's until confirmed

    page.fill("#release-epsilon", "3")
    page.fill("#release-tokens", "6")
    page.locator("#catalog tbody tr", has_text="ward-letter").get_by_role("button", name="rewrite").click()
    page.wait_for_selector("#release-summary:not(:empty)", timeout=120_000)
    assert page.inner_text("#reader-error") == ""
    # two units: Dr Zindelby's subject, and the patient's (the document's subject) for her name and the date
    assert [r.split("\t")[:2] for r in page.locator("#release-report tbody tr").all_inner_texts()] == [
        ["unit-001", "1"], ["unit-002", "2"]]
    assert "(ε 3.000, δ 0.00001)-DP" in page.inner_text("#release-summary")
    assert "(ε 4, δ 0.00001)-DP for the vault's lifetime" in page.inner_text("#release-lifetime")
    [release] = [body for _, path, body in received if path.endswith("/rewrite")]
    tokens, result = streamed(release)
    assert page.text_content("#release-output") == tokens == result["text"]

    # the same release again is the stored one, at no cost
    page.locator("#catalog tbody tr", has_text="ward-letter").get_by_role("button", name="rewrite").click()
    page.wait_for_selector("#release-summary:has-text('returned again')")

    # a question about the chosen document, answered streamed with its certificate and the documents read
    page.fill("#ask-question", "What is the note about?")
    page.select_option("#ask-documents", ["ward-letter"])
    page.fill("#ask-epsilon", "3")
    page.fill("#ask-tokens", "6")
    page.click("#ask-run")
    page.wait_for_selector("#ask-summary:not(:empty)", timeout=120_000)
    assert page.inner_text("#ask-error") == ""
    assert page.inner_text("#ask-read") == "Read: ward-letter"
    assert page.locator("#ask-report tbody tr").count() == 2
    [answer] = [body for _, path, body in received if path == "/v1/ask"]
    tokens, result = streamed(answer)
    assert page.text_content("#ask-output") == tokens == result["text"] and result["documents"] == ["ward-letter"]

    calls = {(method, path) for method, path, _ in received if path.startswith("/v1/")}
    assert calls == READER_CALLS  # not even an attempt at anything else
    dom = page.content() + page.inner_text("body")
    for stored in STORED:
        assert not any(stored in body for _, _, body in received), stored
        assert stored not in dom, stored
    assert csp_violations(page, console) == []


def test_another_key_reloads_the_page_so_nothing_the_owner_loaded_stays_for_a_reader(vault_page, browser):
    server, keys = vault_page
    page, console = open_page(browser, server, keys["owner"])
    page.locator("#documents tbody tr", has_text="ward-letter").get_by_role("button", name="spans", exact=True).click()
    page.wait_for_selector("#review-doc mark")
    assert WARD in page.inner_text("#review-doc")
    page.fill("#key", keys["reader"])
    page.wait_for_selector(SHOWN.format("reader-view"))
    assert page.is_hidden("#owner-view")
    dom = page.content()
    assert not any(stored in dom for stored in STORED)
    assert csp_violations(page, console) == []
