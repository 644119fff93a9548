"""The OpenAPI document and the answers outside any route, on the app in process (no model is
loaded): every route's error statuses come from the one table of codes with the error body, the
server's limits are written into the fields they bound, a 405 lists every method of its path, and a
body that is not UTF-8 is a 400 with a code. tests/service/test_openapi_contract.py runs
schemathesis against a served app."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'tokendp[serve]')")
pytest.importorskip("httpx", reason="the service tests need httpx (the dev extra)")

from fastapi.testclient import TestClient  # noqa: E402

from tokendp.service.app import create_app  # noqa: E402
from tokendp.service.codes import CODES  # noqa: E402
from tokendp.service.limits import Limits  # noqa: E402

LIMITS = Limits(max_new_tokens=24, max_tag_chars=3000)


@pytest.fixture
def app(tmp_path) -> TestClient:
    return TestClient(create_app(tmp_path / "s.db", limits=LIMITS))


def operations(document: dict):
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            yield f"{method.upper()} {path}", operation


def test_every_error_status_of_every_route_has_the_error_body_and_names_its_codes(app):
    document = app.get("/openapi.json").json()
    statuses = {status for status, _ in CODES.values()}
    for name, operation in operations(document):
        errors = {s: r for s, r in operation["responses"].items() if int(s) >= 400}
        assert {"400", "413"} <= set(errors), name  # the body-size middleware answers every route
        for status, response in errors.items():
            assert int(status) in statuses, (name, status)
            assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}
            codes = [c for c, (s, _) in CODES.items() if str(s) == status and f"`{c}`" in response["description"]]
            assert codes, (name, status, response["description"])
        if name != "GET /healthz":
            assert operation["security"] == [{"HTTPBearer": []}] and {"401", "429"} <= set(errors), name
    assert "HTTPValidationError" not in document["components"]["schemas"]  # FastAPI's 422 shape is not ours


def test_the_server_limits_are_stated_where_they_bound(app):
    document = app.get("/openapi.json").json()
    assert "x-limit" not in str(document)
    schemas = document["components"]["schemas"]
    for model in ("SanitizeRequest", "GenerateRequest", "AskIn"):
        assert schemas[model]["properties"]["max_new_tokens"]["maximum"] == 24, model
    assert schemas["SynthesizeRequest"]["properties"]["max_tokens"]["maximum"] == 24
    assert schemas["TagRequest"]["properties"]["text"]["maxLength"] == 3000
    (query,) = [p for p in document["paths"]["/v1/documents/{id}/rewrite"]["get"]["parameters"]
                if p["name"] == "max_new_tokens"]
    assert query["schema"]["maximum"] == 24
    assert "3000 characters" in document["info"]["description"]


def test_exactly_one_of_epsilon_or_beta_is_stated(app):
    schema = app.get("/openapi.json").json()["components"]["schemas"]["SanitizeRequest"]
    budget = schema["allOf"][0]["anyOf"]
    assert budget[0] == {"properties": {"method": {"const": "public"}}, "required": ["method"]}
    assert [b["required"] for b in budget[1]["oneOf"]] == [["epsilon"], ["beta"]]


@pytest.mark.parametrize("method, path, allow", [
    ("TRACE", "/v1/documents/a", "GET, PUT, DELETE"),  # three routes share the path: Starlette named only one
    ("OPTIONS", "/v1/documents", "GET, POST"),
    ("PATCH", "/healthz", "GET"),
    ("GET", "/v1/sanitize", "POST"),
    ("POST", "/", "GET"),
    ("POST", "/static/app.js", "GET, HEAD"),
])
def test_a_method_the_path_does_not_take_is_405_with_every_method_it_takes(app, method, path, allow):
    response = app.request(method, path)
    assert response.status_code == 405 and response.headers["allow"] == allow
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_a_body_that_is_not_utf8_is_a_400_with_a_code(app):
    response = app.post("/v1/tag", content=b'{"text": "\xff\xfe"}', headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "malformed_body"
