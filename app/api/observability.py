"""Request metrics and JSON request logs, as one ASGI middleware.

Labels use the route template (`/v1/datasets/{dataset_id}`), never the concrete path,
so ids do not explode metric cardinality; unmatched paths are labelled "unmatched".
Nothing from the request body or query string is logged.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.metrics import HTTP_LATENCY, HTTP_REQUESTS

logger = logging.getLogger("privq.request")


def route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class ObservabilityMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status_holder: dict[str, Any] = {"status": 500}

        async def send_and_record(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            elapsed = time.perf_counter() - started
            route = route_template(scope)
            method = scope.get("method", "")
            status = status_holder["status"]
            HTTP_REQUESTS.labels(method=method, route=route, status=str(status)).inc()
            HTTP_LATENCY.labels(method=method, route=route).observe(elapsed)
            logger.info(
                "request",
                extra={
                    "method": method,
                    "route": route,
                    "status": status,
                    "ms": round(elapsed * 1000, 2),
                },
            )


class UploadSizeLimitMiddleware:
    """Refuse a request whose declared body exceeds the upload limit before reading it."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            declared = dict(scope.get("headers", [])).get(b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                from app.api.errors import error_response

                response = error_response(
                    413,
                    "payload_too_large",
                    f"the request body is larger than the limit of {self.max_body_bytes} bytes",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
