"""Issue 25, items 1 to 3, against a real ``tokendp serve``: what a request charges comes from the
job that runs it, every refusal comes before anything is reserved, and a refused request never
changes /v1/budget (tests/service/conftest.py starts the server)."""

from __future__ import annotations

import json

import pytest

httpx = pytest.importorskip("httpx", reason="the service tests need httpx (the dev extra)")

from tests.service.conftest import LETTER, PERSONS, Server, auth, make_key  # noqa: E402

pytestmark = pytest.mark.slow
BUDGET = 5.0
NAME = {"start": 8, "end": 19}  # "Helen Marsh"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("refusals")
    key = make_key(root / "service.db", "small", BUDGET)
    server = Server(root / "service.db", root / "server.log", "--rate-limit", "1000", "--max-new-tokens", "32").start()
    yield server, key
    server.stop()


def post(server, key, path, body):
    return httpx.post(server.url + path, json=body, headers=auth(key), timeout=120)


def budget(server, key) -> dict:
    return httpx.get(server.url + "/v1/budget", headers=auth(key), timeout=60).json()


@pytest.mark.parametrize("label", ["untrusted-x", "UNTRUSTED-1", "Untrusted-PERSON"])
@pytest.mark.parametrize("path", ["/v1/sanitize", "/v1/generate"])
def test_a_span_labelled_as_an_untrusted_chunk_is_refused_not_run_for_free(server, label, path):
    """Before: the label skipped the charges while the job read the span as a private group, so
    epsilon 50 ran against a budget of 5 with nothing charged."""
    server, key = server
    before = budget(server, key)
    span = [{**NAME, "label": label}]
    body = ({"id": "bypass", "text": LETTER, "spans": span} if path == "/v1/sanitize" else
            {"id": "bypass", "prompt": "Who?", "context": LETTER, "spans": span})
    r = post(server, key, path, {**body, "epsilon": 50, "max_new_tokens": 4})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_input"
    assert "untrusted-" in r.json()["error"]["message"]
    assert budget(server, key) == before


def test_epsilon_beyond_the_budget_is_refused_for_every_group_the_job_reads(server):
    server, key = server
    spans = [{**NAME, "label": "PERSON"}, {"start": 83, "end": 94, "label": "DATETIME"}]
    r = post(server, key, "/v1/sanitize", {"id": "over", "text": LETTER, "spans": spans, "epsilon": 50,
                                           "max_new_tokens": 4})
    assert r.status_code == 403 and r.json()["error"]["code"] == "budget_exceeded"
    assert budget(server, key)["units"] == [] or all(u["id"] != "over" for u in budget(server, key)["units"])


SANITIZE = {"text": LETTER, "spans": PERSONS, "epsilon": 1, "max_new_tokens": 4}
GENERATE = {"prompt": "Who wrote?", "context": LETTER, "spans": PERSONS, "epsilon": 1, "max_new_tokens": 4}
SYNTHESIZE = {"references": [LETTER, LETTER[::-1]], "epsilon": 1, "batch_size": 2, "max_tokens": 4}
REFUSED = [
    ("/v1/sanitize", {**SANITIZE, "temperature": 1e-300}, 422),  # below MIN_TEMPERATURE: the schema says so
    ("/v1/generate", {**GENERATE, "temperature": 1e-300}, 422),
    ("/v1/synthesize", {**SYNTHESIZE, "temperature": 1e-300}, 422),
    ("/v1/sanitize", {**SANITIZE, "epsilon": None, "beta": 0.01, "alpha": 1e308}, 422),  # above MAX_ALPHA
    ("/v1/sanitize", {**SANITIZE, "epsilon": None, "beta": 0.01, "alpha": 1 + 1e-10}, 403),  # epsilon 1e11
    ("/v1/sanitize", {**SANITIZE, "max_new_tokens": 33}, 400),
    ("/v1/sanitize", {**SANITIZE, "labels": ["DATE"]}, 400),  # the PERSON spans: neither protected nor kept
    ("/v1/sanitize", {**SANITIZE, "labels": ["PERSON", "CODE"]}, 400),  # CODE matches no span: a typo
    ("/v1/sanitize", {"text": LETTER * 300, "epsilon": 1}, 400),  # past the context: refused before tagging
    ("/v1/generate", {"prompt": "Who?", "context": LETTER * 300, "epsilon": 1}, 400),
    ("/v1/generate", {**GENERATE, "epsilon": {"untrusted-1": 1}}, 400),
    ("/v1/synthesize", {**SYNTHESIZE, "top_k": -3}, 422),
    ("/v1/synthesize", {**SYNTHESIZE, "num": 2}, 400),
    ("/v1/synthesize", {**SYNTHESIZE, "max_tokens": 33}, 400),
]


@pytest.mark.parametrize("path, body, status, stream",
                         [(*case, False) for case in REFUSED] + [(*case, True) for case in REFUSED
                                                                 if case[0] == "/v1/sanitize"])
def test_a_refused_request_charges_nothing_and_leaves_the_budget_as_it_was(server, path, body, status, stream):
    """Before: temperature 1e-300 (and alpha 1e308, a 500) were refused inside the job, after the
    reservation, so the client got an error and was charged all the same."""
    server, key = server
    before = budget(server, key)
    r = post(server, key, path, {"id": "refused", **{k: v for k, v in body.items() if v is not None},
                                 **({"stream": True} if stream else {})})
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")  # refused before any event
    assert budget(server, key) == before


def test_the_server_keeps_answering_after_refusals_and_charges_what_it_certifies(server):
    server, key = server
    r = post(server, key, "/v1/sanitize", {"id": "fine", **SANITIZE})
    assert r.status_code == 200, r.text
    (unit,) = [u for u in budget(server, key)["units"] if u["id"] == "fine"]
    assert unit["group"] == "PERSON" and unit["epsilon_spent"] == pytest.approx(1.0, rel=1e-9)
    assert unit["epsilon_spent"] >= r.json()["report"]["groups"][0]["epsilon"] - 1e-12


def test_a_stream_sends_its_first_token_only_after_the_reservation(server):
    server, key = server
    events = []
    body = {"id": "streamed", **SANITIZE, "max_new_tokens": 6, "stream": True}
    with httpx.stream("POST", server.url + "/v1/sanitize", json=body, headers=auth(key), timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("event: "):
                events.append(line[7:])
                if events == ["token"]:  # the first token: its unit is already charged in the store
                    assert [u["id"] for u in budget(server, key)["units"]].count("streamed") == 1
            elif line.startswith("data: ") and events[-1] == "result":
                assert json.loads(line[6:])["id"] == "streamed"
    assert events[-1] == "result" and "token" in events


def test_the_access_log_holds_no_query_string_and_so_no_document_id(server):
    server, key = server
    r = httpx.get(server.url + "/v1/budget", params={"id": "Zebedee-Quartermaine-1987"}, headers=auth(key), timeout=60)
    assert r.status_code == 200
    log = server.log.read_text(errors="replace")
    assert "GET /v1/budget HTTP" in log and "Zebedee" not in log and "Quartermaine" not in log
