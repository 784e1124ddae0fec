"""The OpenAPI document: every route with a summary, its error codes and examples.

- `refusals(NotFound, InsufficientBudget, …)` documents a route's refusals from
  the typed exceptions it raises: one response per status, listing each `code` with
  its docstring and an example body. Routers use it instead of writing the
  descriptions by hand, so the document names the same codes the service sends.
- `install_openapi(app)` post-processes FastAPI's document once, when it is first
  asked for: a route without an explicit summary gets its docstring's first line;
  a route behind authentication gets 401 (and 403 when only the admin, or only a
  tenant, may call it), found from its dependencies; FastAPI's default 422 schema
  (`HTTPValidationError`, which privq never sends) becomes the `{"error": …}` body
  with an example; any error response still without an example gets one.
- The refusals no router raises are added there too, from what the route is: every
  operation with a request body lists 400, 413 and 415 (`app.api.guards` and the JSON
  parser refuse before the route runs), and every operation that opens the database
  lists 503 `unavailable` (`app.api.errors`: unreachable or busy, with `Retry-After`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from app.api.errors import RETRY_AFTER_SECONDS
from app.config import Settings
from app.errors import Forbidden, PayloadTooLarge, PrivqError, Unauthorized
from app.limits import MAX_JSON_DEPTH

ERROR_SCHEMA_REF = "#/components/schemas/ErrorOut"


def _doc(error: type[PrivqError]) -> str:
    return " ".join((error.__doc__ or error.code).split())


def _example(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **details}}


def refusals(*errors: type[PrivqError], **notes: str) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route that may refuse with these errors.

    `notes` adds a sentence per code (by code name) where the docstring is not enough,
    e.g. `not_found="No such dataset, or no grant on it."`.
    """
    by_status: dict[int, list[Coded]] = {}
    for error in errors:
        why = notes.get(error.code) or _doc(error)
        by_status.setdefault(error.status, []).append(Coded(error.code, why, why))
    return {status: _coded_response(group) for status, group in sorted(by_status.items())}


@dataclass(frozen=True)
class Coded:
    """One error code a response may carry: when (`why`), and the example's message."""

    code: str
    why: str
    message: str


def _coded_response(codes: Sequence[Coded]) -> dict[str, Any]:
    """An error response: each code's reason in the description and its example body."""
    return {
        "description": "\n\n".join(f"`{c.code}`: {c.why}" for c in codes),
        "content": {
            "application/json": {
                "schema": {"$ref": ERROR_SCHEMA_REF},
                "examples": {
                    c.code: {"summary": c.code, "value": _example(c.code, c.message)} for c in codes
                },
            }
        },
    }


# Refused before any route runs: the request guards (app.api.guards) and FastAPI's JSON
# parsing (app.api.errors). What a body may be refused for, by the body's media type.
_JSON_LIMIT = Settings.model_fields["max_json_body_bytes"].default
_WRONG_TYPE = "send the body as application/json (or multipart/form-data for uploads)"
BODY_REFUSALS: dict[str, dict[int, list[Coded]]] = {
    "application/json": {
        400: [
            Coded(
                "invalid_json",
                "The body is not valid JSON (the message names the character).",
                "the body is not valid JSON (at character 17)",
            ),
            Coded(
                "json_too_deep",
                f"The JSON body is nested deeper than {MAX_JSON_DEPTH} levels; it is not parsed.",
                f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels",
            ),
        ],
        413: [
            Coded(
                "payload_too_large",
                "The body is larger than `PRIVQ_MAX_JSON_BODY_BYTES` (default 4 MiB); the "
                "rest is not read.",
                f"the request body is larger than the limit of {_JSON_LIMIT} bytes",
            )
        ],
        415: [
            Coded(
                "unsupported_media_type",
                "The body is not `application/json` (`Content-Type`).",
                _WRONG_TYPE,
            )
        ],
    },
    "multipart/form-data": {
        400: [Coded("bad_request", "The multipart body cannot be parsed.", "Missing boundary.")],
        413: [
            Coded(
                "payload_too_large",
                "The upload is larger than `PRIVQ_MAX_UPLOAD_BYTES`; the rest is not read.",
                PayloadTooLarge.__doc__ or PayloadTooLarge.code,
            )
        ],
        415: [
            Coded(
                "unsupported_media_type",
                "The body is not `multipart/form-data` (`Content-Type`).",
                _WRONG_TYPE,
            )
        ],
    },
}
# Any route that opens the database: unreachable, or its connections stay busy.
DATABASE_REFUSALS: dict[int, list[Coded]] = {
    503: [
        Coded(
            "database_unavailable",
            "The database is unreachable (down, restarting, refusing connections) or "
            "busy; retry after `Retry-After` seconds.",
            "the database is unavailable or busy; retry shortly",
        )
    ]
}
RETRY_AFTER_HEADER = {
    "description": "Seconds to wait before retrying.",
    "schema": {"type": "integer", "example": RETRY_AFTER_SECONDS},
}


def _add_refusals(responses: dict[str, Any], refusals_: dict[int, list[Coded]]) -> None:
    """Add these codes to an operation's responses, beside what the route declared."""
    for status, codes in refusals_.items():
        response = responses.get(str(status))
        if response is None:
            responses[str(status)] = _coded_response(codes)
            continue
        media = response.setdefault("content", {}).setdefault("application/json", {})
        media.setdefault("schema", {"$ref": ERROR_SCHEMA_REF})
        examples = media.setdefault("examples", {})
        if "example" in media:  # one example already: keep it beside the new ones
            examples["example"] = {"value": media.pop("example")}
        for coded in codes:
            if coded.code in examples:
                continue
            examples[coded.code] = {
                "summary": coded.code,
                "value": _example(coded.code, coded.message),
            }
            described = response.get("description", "")
            line = f"`{coded.code}`: {coded.why}"
            response["description"] = f"{described}\n\n{line}" if described else line


def _refusals_before_the_route(route: APIRoute, operation: dict[str, Any]) -> None:
    """The refusals of the request guards, the JSON parser and an unreachable database."""
    from app.api import deps

    responses = operation.setdefault("responses", {})
    media_types = [
        media_type
        for media_type in operation.get("requestBody", {}).get("content", {})
        if media_type in BODY_REFUSALS
    ]
    if len(media_types) > 1:  # POST /v1/datasets: an upload or a registration
        names = " nor ".join(f"`{media_type}`" for media_type in media_types)
        wrong_type = Coded(
            "unsupported_media_type", f"The body is neither {names} (`Content-Type`).", _WRONG_TYPE
        )
        _add_refusals(responses, {415: [wrong_type]})
    for media_type in media_types:
        _add_refusals(responses, BODY_REFUSALS[media_type])
    if deps.get_database in set(_dependency_calls(route.dependant)):
        _add_refusals(responses, DATABASE_REFUSALS)
        responses["503"].setdefault("headers", {}).setdefault("Retry-After", RETRY_AFTER_HEADER)


def _dependency_calls(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    for dependency in dependant.dependencies:
        if dependency.call is not None:
            yield dependency.call
        yield from _dependency_calls(dependency)


def _summary_from_docstring(route: APIRoute) -> str | None:
    text = (route.description or "").strip()
    if not text:
        return None
    first = text.split("\n\n", 1)[0]
    first = " ".join(first.split())
    sentence = first.split(". ", 1)[0].rstrip(".")
    return sentence if len(sentence) <= 120 else sentence[:117].rstrip() + "…"


def _generic_example(status: str) -> dict[str, Any]:
    code = {
        "401": "unauthorized",
        "403": "forbidden",
        "404": "not_found",
        "409": "conflict",
        "413": "payload_too_large",
        "422": "invalid_request",
        "503": "unavailable",
    }.get(status, "error")
    phrase = HTTPStatus(int(status)).phrase if status.isdigit() else "error"
    return _example(code, phrase)


def _ensure_error_content(response: dict[str, Any], status: str) -> None:
    content = response.setdefault("content", {}).setdefault("application/json", {})
    schema_ref = content.get("schema", {}).get("$ref", "")
    if not schema_ref or schema_ref.endswith("/HTTPValidationError"):
        content["schema"] = {"$ref": ERROR_SCHEMA_REF}
    if "example" not in content and "examples" not in content:
        if status == "422":
            content["example"] = _example(
                "invalid_request",
                "body.rho: Input should be a valid number",
                fields=[{"field": "body.rho", "reason": "Input should be a valid number"}],
            )
        else:
            content["example"] = _generic_example(status)


def _auth_responses(route: APIRoute) -> dict[str, dict[str, Any]]:
    from app.api import deps  # the dependencies that decide who may call a route

    calls = set(_dependency_calls(route.dependant))
    added: dict[str, dict[str, Any]] = {}
    if deps.get_principal in calls or deps.get_dataset_access in calls:
        added.update(
            {str(k): v for k, v in refusals(Unauthorized).items()},
        )
    if deps.require_admin in calls:
        added.update(
            {
                str(k): v
                for k, v in refusals(
                    Forbidden, forbidden="A tenant key was sent; this route needs the admin key."
                ).items()
            }
        )
    elif deps.require_tenant in calls:
        added.update(
            {
                str(k): v
                for k, v in refusals(
                    Forbidden,
                    forbidden="The admin key was sent; it holds no budget, use a tenant's key.",
                ).items()
            }
        )
    return added


def api_routes(routers: Iterable[APIRouter]) -> list[APIRoute]:
    """The routes of these routers (their paths already carry the router's prefix)."""
    return [route for router in routers for route in router.routes if isinstance(route, APIRoute)]


def install_openapi(app: FastAPI, routes: Sequence[APIRoute]) -> None:
    """Replace `app.openapi` with the post-processed document (built once, then cached).

    `routes` are the API's routes as declared (`api_routes(routers)`): what each needs
    (its dependencies, its docstring) is read from them, and the document's operation
    with the same path and method is completed.
    """

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(
            title=app.title,
            version=app.version,
            openapi_version=app.openapi_version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
            tags=app.openapi_tags,
            servers=app.servers,
        )
        paths = document.get("paths", {})
        for route in routes:
            if not route.include_in_schema:
                continue
            operations = paths.get(route.path_format, {})
            extra = _auth_responses(route)
            summary = route.summary or _summary_from_docstring(route)
            for method in route.methods or ():
                operation = operations.get(method.lower())
                if operation is None:
                    continue
                if summary:
                    operation["summary"] = summary
                responses = operation.setdefault("responses", {})
                for status, response in extra.items():
                    responses.setdefault(status, response)
                _refusals_before_the_route(route, operation)
                for status, response in responses.items():
                    if status[:1] in ("4", "5"):
                        _ensure_error_content(response, status)
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        if "ErrorOut" not in schemas:
            from app.api.schemas import ErrorOut

            error_schema = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(error_schema.pop("$defs", {}))
            schemas["ErrorOut"] = error_schema
        text = repr(paths)
        for name in ("HTTPValidationError", "ValidationError"):
            if name in schemas and f"/{name}'" not in text:
                del schemas[name]
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
