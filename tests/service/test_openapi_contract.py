"""Issue 36: the OpenAPI document is the API's contract. schemathesis runs every phase (examples,
coverage, fuzzing, stateful) with every check against a real ``tokendp serve`` over HTTP (the tiny
model), on a SQLite file and on a PostgreSQL database (issue 46: a value a column cannot hold was
a 500 there only), each once with an owner key and once with a reader key, and must find nothing:
every rule the server enforces that JSON Schema can state is stated, every status it answers is
declared with the error body, a 405 names the path's methods in ``Allow``, a stream's events
match their schema, and no request is a 500.

Two settings of the checks are this API's, both narrow:

- negative_data_rejection counts 413 as a refusal: a text above ``--max-tag-chars`` (a bound the
  schema states) is answered 413 text_too_long.
- positive_data_acceptance admits 400 on the routes whose rules JSON Schema cannot state (a span
  inside its text, labels against the spans, a document within the model's context, an epsilon
  above what converting RDP at delta costs): :data:`ALLOW_400`. There a 400 must still name one of
  those rules (:data:`CROSS_FIELD`, checked by :func:`refused_only_for_rules_json_schema_cannot_state`),
  so a rule the schema could state but does not fails here all the same.

The examples are drawn deterministically (a fixed seed, no example database): a run is the same
run every time. About 3 minutes on SQLite and 2 on PostgreSQL (fewer examples) on two busy cores.
"""

from __future__ import annotations

import json
import re

import pytest

httpx = pytest.importorskip("httpx", reason="the service tests need httpx (the dev extra)")
schemathesis = pytest.importorskip("schemathesis", reason="the contract test needs schemathesis (the dev extra)")

from schemathesis.engine import Status, events, from_schema  # noqa: E402

from tests.service.conftest import Server  # noqa: E402
from tests.service.postgres import fresh_database, postgres_server  # noqa: E402, F401 (a fixture)
from tests.service.vault.helpers import call, document, make_keys  # noqa: E402

pytestmark = pytest.mark.slow

EXAMPLES = {"sqlite": 25, "postgresql": 12}  # per operation and phase: PostgreSQL's run looks for what only it refuses
SEED = 36
STORED = "letter"  # a confirmed document: the reader's releases reach the model
ALLOW_400 = ["POST /v1/sanitize", "POST /v1/generate", "POST /v1/synthesize", "POST /v1/account", "POST /v1/documents",
             "PUT /v1/documents/{id}", "GET /v1/documents/{id}/rewrite", "POST /v1/ask"]
# The rules behind a 400 for a request the schema admits, each one JSON Schema cannot state.
CROSS_FIELD = [
    r"^span \d+ .* is \[\d+, \d+\): spans need",  # a span against its text's length
    r"^span \d+ .* past the end of the document",
    r"^a span is malformed \(Span needs 0 <= start < end",  # start against end
    r"^unknown label\(s\) .*; choose from",  # labels: tokendp's, or a label of the spans
    r"^labels names .* which matches no span",
    r"^spans labelled .* are neither protected \(labels\) nor kept \(keep\)",
    r"^.* is both protected \(labels\) and kept \(keep\); choose one",
    r"^(epsilon|beta) (names group\(s\) .* that no document has|has no value for group\(s\))",  # budgets per group
    r"is not above .*, the cost of converting RDP at alpha",  # epsilon against alpha and delta
    r"^no Renyi order in .* reaches epsilon|leaves no Renyi budget at any order",  # epsilon against delta
    r"^the document needs T = \d+ tokens or more, above the limit",  # the document against T's limit
    r"^a document needs T = \d+ tokens over its passages, above the limit",
    r"^max_new_tokens \d+ is below the \d+ passages this document is cut into",  # T against the passages
    r"the model's context of \d+",  # the document, its prompt and T against the model's context
    r"has no place for a domain",  # the model's template
    r"reference\(s\) cannot fill one batch of|give at most \d+ synthetic text",  # references, batch_size, num
    r"got inf\b|beyond floating point's range|certifies no finite epsilon",  # epsilon, rho or clip past float64
]


@schemathesis.check
def refused_only_for_rules_json_schema_cannot_state(ctx, response, case):
    """A request the schema admits is refused 400 only for a rule of :data:`CROSS_FIELD`."""
    if case.meta is None or not case.meta.generation.mode.is_positive or response.status_code != 400:
        return None
    error = json.loads(response.content)["error"]
    if error["code"] not in ("invalid_parameter", "invalid_input") or \
            not any(re.search(rule, error["message"], re.DOTALL) for rule in CROSS_FIELD):
        raise AssertionError(f"a request the schema admits was refused for a rule it does not state: {error}")
    return None


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def served(request, tmp_path_factory):
    """(server, keys, examples) on each database: tenant clinic with an owner and a reader key, and one
    confirmed document."""
    root = tmp_path_factory.mktemp("contract")
    db = root / "service.db" if request.param == "sqlite" else fresh_database(request.getfixturevalue("postgres_server"))
    owner, reader = make_keys(db, "clinic", "owner", "reader")
    server = Server(db, root / "server.log", "--rate-limit", "100000", "--max-auth-failures", "100000",
                    "--max-new-tokens", "8", "--max-tag-chars", "2000").start()
    assert call(server, "POST", "/v1/documents", owner, json=document(STORED)).status_code == 201
    yield server, {"owner": owner, "reader": reader}, EXAMPLES[request.param]
    server.stop()


def run_schemathesis(url: str, key: str, examples: int, **settings) -> list[str]:
    """Every failure and error of one schemathesis run (every phase, every check) on ``url``."""
    config = schemathesis.Config.from_dict({
        "seed": SEED, "cache": {"enabled": False}, "headers": {"Authorization": f"Bearer {key}"}, "workers": 1,
        "continue-on-failure": True,
        "generation": {"max-examples": examples, "deterministic": True, "database": "none"},
        "checks": {"enabled": True, "negative_data_rejection": {"expected-statuses": [
            "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]}},
        "operations": [{"include-name": ALLOW_400, "checks": {"positive_data_acceptance": {"expected-statuses": [
            "2xx", "3xx", "400", "401", "403", "404", "409", "429", "5xx"]}}}],
        **settings})
    schema = schemathesis.openapi.from_url(url + "/openapi.json", config=config)
    found = []
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            for checks in event.recorder.checks.values():
                found += [describe(c.failure_info) for c in checks if c.status == Status.FAILURE]
        elif isinstance(event, events.NonFatalError):
            found.append(f"error in {event.label}: {event.info.format()}")
        elif isinstance(event, events.FatalError):
            found.append(f"schemathesis stopped: {event.exception!r}")
    return found


def describe(info) -> str:
    """A failure: its code, operation, title and message, and the request that reproduces it."""
    failure = info.failure
    return f"{failure.code} {failure.operation}: {failure.title}: {failure.message}\n{info.code_sample}"


def test_an_owner_key_finds_the_contract_kept(served):
    server, keys, examples = served
    found = run_schemathesis(server.url, keys["owner"], examples)
    assert not found, "\n\n".join(sorted(set(found)))


def test_a_reader_key_finds_the_contract_kept(served):
    """The reader's document routes name the stored document, so its releases run the model."""
    server, keys, examples = served
    found = run_schemathesis(server.url, keys["reader"], examples, parameters={"path.id": STORED})
    assert not found, "\n\n".join(sorted(set(found)))
