"""What every response carries, whatever the route: security headers, no write method, and
errors as problem details (HTML for a browser) that never show a traceback."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from web.pages import PROBLEM
from web.security import CSP


def test_every_response_carries_the_security_headers(client: TestClient) -> None:
    for path in ("/api/head", "/head", "/api/nothing-here"):
        response = client.get(path)
        assert response.headers["content-security-policy"] == CSP
        assert "script-src 'self'" in CSP and "'unsafe-inline'" not in CSP
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"


def test_an_unknown_path_is_a_problem_naming_it(client: TestClient) -> None:
    response = client.get("/api/nothing-here")
    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["status"] == 404 and body["code"] == "not_found"
    assert "/api/nothing-here" in body["detail"]
    assert body["instance"] == "/api/nothing-here"


def test_a_browser_gets_the_problem_as_a_page(client: TestClient) -> None:
    response = client.get("/nothing-here", headers={"accept": "text/html"})
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert 'data-code="not_found"' in response.text
    assert "Traceback" not in response.text


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_no_method_writes(client: TestClient, method: str) -> None:
    response = client.request(method, "/api/head")
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"
    assert "read-only" in response.json()["detail"]


def test_the_head_matches_the_store(client: TestClient, dashboard) -> None:  # type: ignore[no-untyped-def]
    body = client.get("/api/head").json()
    assert body["position"] >= dashboard.checkpoint_size
    assert len(body["entry_hash"]) == 64


def test_the_openapi_document_lists_the_api(client: TestClient) -> None:
    document = client.get("/api/openapi.json").json()
    assert document["openapi"].startswith("3.")
    assert "/api/head" in document["paths"]
    assert not any(not p.startswith("/api/") for p in document["paths"]
                   if p not in ("/checkpoint",) and not p.startswith("/tile/")), \
        "pages are not API routes; their twins are"


@pytest.mark.parametrize("path", ["/api/head", "/head", "/checkpoint"])
def test_head_answers_as_get_without_a_body(client: TestClient, path: str) -> None:
    got = client.get(path, headers={"accept": "text/html"})
    head = client.head(path, headers={"accept": "text/html"})
    assert head.status_code == got.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == str(len(got.content))
    assert head.headers["content-type"] == got.headers["content-type"]


def test_head_on_the_live_stream_answers_headers_and_ends(client: TestClient) -> None:
    head = client.head("/api/events/stream")
    assert head.status_code == 200
    assert head.headers["content-type"].startswith("text/event-stream")
    assert head.content == b""
