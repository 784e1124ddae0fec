"""The admin dashboard works offline, and the OpenAPI document is complete.

`/docs` (Swagger UI) and `/redoc` must load every script, stylesheet and icon from
the service itself: the page names no external URL, and each asset it references is
fetched from the app. The OpenAPI document gives every operation a summary, its
error codes with example bodies, and an example for every request body.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

from app.api.docs import assets_directory

EXTERNAL = re.compile(r"(?:https?:)?//", re.IGNORECASE)


class AssetReferences(HTMLParser):
    """Every `src`/`href` in a page, and the spec URL Swagger UI or ReDoc is given."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "spec-url") and value:
                self.urls.append(value)


def page_references(html: str) -> list[str]:
    parser = AssetReferences()
    parser.feed(html)
    # Swagger UI is handed its spec URL inside the inline script: `url: '/openapi.json'`.
    parser.urls += re.findall(r"""\burl:\s*['"]([^'"]+)['"]""", html)
    return parser.urls


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_dashboard_pages_fetch_every_asset_from_the_service(client, page) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    # No URL to anywhere else: not in an attribute, not in the inline script.
    assert not re.search(r"https?://", html), re.findall(r"https?://\S+", html)
    references = page_references(html)
    scripts = [url for url in references if url.endswith(".js")]
    assert scripts, "the page loads no script: it would be blank"
    assert "/openapi.json" in references
    for url in references:
        assert not EXTERNAL.match(url), url
        assert url.startswith("/"), url
        fetched = client.get(url)
        assert fetched.status_code == 200, (url, fetched.status_code)
        assert len(fetched.content) > 100, url
        if url.endswith(".js"):
            assert "javascript" in fetched.headers["content-type"]
        if url.endswith(".css"):
            assert fetched.headers["content-type"].startswith("text/css")


def test_swagger_ui_assets_come_from_the_installed_package(client) -> None:
    page = client.get("/docs").text
    bundle = next(url for url in page_references(page) if url.endswith("swagger-ui-bundle.js"))
    served = client.get(bundle).content
    assert served == (assets_directory() / "swagger-ui-bundle.js").read_bytes()
    assert b"SwaggerUIBundle" in served
    assert client.get("/docs/oauth2-redirect").status_code == 200


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    ]


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    return document["components"]["schemas"][ref.rsplit("/", 1)[1]]  # type: ignore[no-any-return]


def _has_example(document: dict[str, Any], media: dict[str, Any]) -> bool:
    if "example" in media or "examples" in media:
        return True
    schema = _resolve(document, media.get("schema", {}))
    if "examples" in schema or "example" in schema:
        return True
    return any("examples" in prop for prop in schema.get("properties", {}).values())


def _example_codes(response: dict[str, Any]) -> set[str]:
    """The error codes of a response's example bodies (each in the contract's shape)."""
    media = response["content"]["application/json"]
    bodies = [e["value"] for e in media.get("examples", {}).values()]
    bodies += [media["example"]] if "example" in media else []
    for body in bodies:
        assert set(body) == {"error"} and {"code", "message"} <= set(body["error"]), body
    return {body["error"]["code"] for body in bodies}


# What the request guards and the JSON parser refuse before any route runs, by media type.
BODY_REFUSALS = {
    "application/json": {
        "400": {"invalid_json", "json_too_deep"},
        "413": {"payload_too_large"},
        "415": {"unsupported_media_type"},
    },
    "multipart/form-data": {
        "400": {"bad_request"},
        "413": {"payload_too_large"},
        "415": {"unsupported_media_type"},
    },
}


def _lists_the_refusals_before_the_route(where: str, operation: dict[str, Any]) -> None:
    """A route with a body lists 400, 413 and 415; every /v1 route (the database) 503."""
    responses = operation["responses"]
    for media_type in operation.get("requestBody", {}).get("content", {}):
        for status, codes in BODY_REFUSALS[media_type].items():
            assert status in responses, (where, media_type, status)
            assert codes <= _example_codes(responses[status]), (where, status)
    if where.split(" ", 1)[1].startswith("/v1/"):
        assert "503" in responses, where
        assert "database_unavailable" in _example_codes(responses["503"]), where
        assert "Retry-After" in responses["503"].get("headers", {}), where


def test_every_operation_has_a_summary_error_codes_and_examples(client) -> None:
    document = client.get("/openapi.json").json()
    operations = _operations(document)
    assert len(operations) > 15
    for method, path, operation in operations:
        where = f"{method} {path}"
        summary = operation.get("summary", "")
        assert summary, where
        # Not FastAPI's fallback (the function name, title-cased): a real sentence.
        fallback = operation["operationId"].split("_v1_")[0].replace("_", " ").title()
        assert summary != fallback, where
        responses = operation["responses"]
        errors = {status: r for status, r in responses.items() if status[0] in "45"}
        takes_input = any(k in operation for k in ("security", "parameters", "requestBody"))
        if takes_input:  # only what can be refused lists refusals (not /healthz)
            assert errors, f"{where} lists no error response"
        for status, response in errors.items():
            media = response["content"]["application/json"]
            assert media["schema"] == {"$ref": "#/components/schemas/ErrorOut"}, (where, status)
            assert "example" in media or "examples" in media, (where, status)
        if operation.get("security"):
            assert "401" in responses, where
        body = operation.get("requestBody")
        if body is not None:
            for media_type, media in body["content"].items():
                assert _has_example(document, media), (where, media_type)
        _lists_the_refusals_before_the_route(where, operation)
    schemas = document["components"]["schemas"]
    # FastAPI's default 422 body is not what privq sends; it is replaced everywhere.
    assert "HTTPValidationError" not in schemas


def test_admin_only_routes_document_403(client) -> None:
    document = client.get("/openapi.json").json()
    create_tenant = document["paths"]["/v1/tenants"]["post"]["responses"]
    assert "403" in create_tenant
    examples = create_tenant["403"]["content"]["application/json"]["examples"]
    assert examples["forbidden"]["value"]["error"]["code"] == "forbidden"


def test_the_refusals_documented_before_the_route_are_the_ones_sent(client) -> None:
    """A JSON route's 400, 413 and 415 name the codes the guards and the parser send."""
    from conftest import ADMIN_HEADERS

    documented = client.get("/openapi.json").json()["paths"]["/v1/tenants"]["post"]["responses"]
    json_body = {**ADMIN_HEADERS, "Content-Type": "application/json"}
    plain_text = {**ADMIN_HEADERS, "Content-Type": "text/plain"}
    sent = {
        "invalid": client.post("/v1/tenants", content=b'{"name": ', headers=json_body),
        "deep": client.post("/v1/tenants", content=b"[" * 40 + b"]" * 40, headers=json_body),
        "large": client.post(
            "/v1/tenants", content=b'"' + b"x" * (4 * 1024**2) + b'"', headers=json_body
        ),
        "type": client.post("/v1/tenants", content=b"name=x", headers=plain_text),
    }
    seen = {(str(r.status_code), r.json()["error"]["code"]) for r in sent.values()}
    assert seen == {
        ("400", "invalid_json"),
        ("400", "json_too_deep"),
        ("413", "payload_too_large"),
        ("415", "unsupported_media_type"),
    }
    for status, code in seen:
        assert code in _example_codes(documented[status]), (status, code)
