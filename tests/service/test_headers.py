"""Security headers and the docs switch, on the app in process (no model is loaded)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'tokendp[serve]')")
pytest.importorskip("httpx", reason="the service tests need httpx (the dev extra)")

from fastapi.testclient import TestClient  # noqa: E402

from tokendp.service.app import create_app  # noqa: E402

PAGE_FILES = ["/", "/static/app.js", "/static/style.css", "/static/index.html"]


def client(tmp_path, **kwargs) -> TestClient:
    return TestClient(create_app(tmp_path / "s.db", **kwargs))


def directives(csp: str) -> dict[str, str]:
    return dict(d.strip().partition(" ")[::2] for d in csp.split(";"))


@pytest.mark.parametrize("path", PAGE_FILES)
def test_the_page_and_its_static_files_carry_a_strict_csp_and_no_framing(tmp_path, path):
    response = client(tmp_path).get(path)
    assert response.status_code == 200
    csp = directives(response.headers["content-security-policy"])
    assert csp["default-src"] == "'none'"
    assert csp["script-src"] == csp["style-src"] == csp["connect-src"] == "'self'"
    assert csp["object-src"] == csp["base-uri"] == csp["form-action"] == csp["frame-ancestors"] == "'none'"
    assert csp["require-trusted-types-for"] == "'script'" and csp["trusted-types"] == "'none'"
    assert "unsafe" not in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("method, path", [("GET", "/healthz"), ("GET", "/openapi.json"), ("POST", "/v1/tag"),
                                          ("GET", "/nowhere"), ("GET", "/static/nowhere.js")])
def test_every_response_says_nosniff(tmp_path, method, path):
    assert client(tmp_path).request(method, path).headers["x-content-type-options"] == "nosniff"


def test_a_body_refused_by_the_size_limit_says_nosniff_too(tmp_path):
    response = client(tmp_path).post("/v1/tag", content=b"x" * 2_000_000, headers={"content-type": "application/json"})
    assert response.status_code == 413 and response.headers["x-content-type-options"] == "nosniff"


def test_docs_and_redoc_are_off_by_default_and_the_openapi_schema_stays(tmp_path):
    app = client(tmp_path)
    assert app.get("/docs").status_code == 404 and app.get("/redoc").status_code == 404
    assert app.get("/openapi.json").json()["info"]["title"] == "tokendp"


def test_docs_are_served_when_asked_for(tmp_path):
    app = client(tmp_path, docs=True)
    assert app.get("/docs").status_code == 200 and app.get("/redoc").status_code == 200
