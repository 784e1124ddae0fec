"""Request guards: body size, content type and JSON nesting, checked before any route runs.

`RequestGuardMiddleware` (pure ASGI) looks at every HTTP request that carries a body:

- Content type: a body must be JSON (`application/json`, `…+json`) or a multipart
  upload (`multipart/form-data`); anything else is 415 before it is read.
- Size: a JSON body may hold at most `max_json_bytes`, an upload `max_upload_bytes`.
  A declared `Content-Length` above the cap is refused at once; a body streamed
  without one is counted as it arrives. Either way: 413, and the rest is not read.
- Nesting: a JSON body nested deeper than `max_json_depth` is refused (400) before the
  parser sees it, however deep it goes (no recursion, no parser stack).

Refusals are the contract's JSON errors (`app.api.errors.error_response`).
"""

from __future__ import annotations

import re

import numpy as np
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_response

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# A backslash and the byte it escapes: removed first, so every '"' left delimits a string.
_ESCAPE_PAIR = re.compile(rb"\\.", re.DOTALL)
_QUOTE, _OPEN_ARRAY, _OPEN_OBJECT = ord('"'), ord("["), ord("{")
_CLOSE_ARRAY, _CLOSE_OBJECT = ord("]"), ord("}")


def json_depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text (brackets in strings ignored).

    Vectorised, so a megabyte of '[' costs milliseconds; for text that is not valid JSON
    the figure is meaningless but finite (the parser refuses such text anyway).
    """
    if body.count(b"[") + body.count(b"{") == 0:
        return 0
    text = np.frombuffer(_ESCAPE_PAIR.sub(b"", body), dtype=np.uint8)
    outside_strings = (np.cumsum(text == _QUOTE) % 2) == 0
    steps = (
        (text == _OPEN_ARRAY).astype(np.int64)
        + (text == _OPEN_OBJECT)
        - (text == _CLOSE_ARRAY)
        - (text == _CLOSE_OBJECT)
    ) * outside_strings
    return int(np.cumsum(steps).max(initial=0))


def _media_type(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return str(value.decode("latin-1")).split(";", 1)[0].strip().lower()
    return None


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def _has_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return bool(value != b"0")
        if name == b"transfer-encoding":
            return True
    return False


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


class RequestGuardMiddleware:
    def __init__(
        self, app: ASGIApp, *, max_json_bytes: int, max_upload_bytes: int, max_json_depth: int
    ) -> None:
        self.app = app
        self.max_json_bytes = max_json_bytes
        self.max_upload_bytes = max_upload_bytes
        self.max_json_depth = max_json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") not in _BODY_METHODS
            or not _has_body(scope)
        ):
            await self.app(scope, receive, send)
            return
        media_type = _media_type(scope)
        if media_type is not None and media_type == "multipart/form-data":
            await self._upload(scope, receive, send)
        elif media_type is not None and _is_json(media_type):
            await self._json(scope, receive, send)
        else:
            response = error_response(
                415,
                "unsupported_media_type",
                "send the body as application/json (or multipart/form-data for uploads)",
            )
            await response(scope, receive, send)

    def _too_large(self, limit: int) -> HTTPException:
        return HTTPException(413, f"the request body is larger than the limit of {limit} bytes")

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, error: HTTPException
    ) -> None:
        code = "payload_too_large" if error.status_code == 413 else "bad_request"
        await error_response(error.status_code, code, str(error.detail))(scope, receive, send)

    async def _json(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.max_json_bytes
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await self._refuse(scope, receive, send, self._too_large(limit))
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._refuse(scope, receive, send, self._too_large(limit))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        # No deeper than its opening brackets: most bodies need no scan.
        openers = body.count(b"[") + body.count(b"{")
        if openers > self.max_json_depth and json_depth(body) > self.max_json_depth:
            response = error_response(
                400,
                "json_too_deep",
                f"the JSON body is nested deeper than {self.max_json_depth} levels",
            )
            await response(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect

        await self.app(scope, replay, send)

    async def _upload(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.max_upload_bytes
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await self._refuse(scope, receive, send, self._too_large(limit))
            return
        size = 0

        async def counted() -> Message:
            nonlocal size
            message = await receive()
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                if size > limit:
                    # Raised inside the form parser: FastAPI re-raises HTTPException,
                    # and the app's handler answers 413 before the endpoint runs.
                    raise self._too_large(limit)
            return message

        await self.app(scope, counted, send)
