"""Routes chosen by the request body's media type, for one path and method with two bodies.

`POST /v1/datasets` uploads a file (multipart/form-data) or registers a source by
reference (application/json). Starlette picks the first route that matches a path and
method; these route classes also look at the Content-Type, so each body reaches its own
endpoint whatever order the routers were included in.
"""

from __future__ import annotations

from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import Scope


def body_is_json(scope: Scope) -> bool:
    """Whether the request declares a JSON body (`application/json` or `…+json`)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media_type = str(value.decode("latin-1")).split(";", 1)[0].strip().lower()
            return media_type == "application/json" or (
                media_type.startswith("application/") and media_type.endswith("+json")
            )
    return False


class JsonBodyRoute(APIRoute):
    """Matches only requests with a JSON body."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match == Match.FULL and not body_is_json(scope):
            return Match.NONE, {}
        return match, child_scope


class NotJsonBodyRoute(APIRoute):
    """Matches only requests without a JSON body (an upload's multipart form)."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match == Match.FULL and body_is_json(scope):
            return Match.NONE, {}
        return match, child_scope
