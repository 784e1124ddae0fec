"""Request metrics and JSON request logs, as one ASGI middleware.

Labels use the route template (`/v1/datasets/{dataset_id}`), never the concrete path,
so ids do not explode metric cardinality; unmatched paths are labelled "unmatched".
Nothing from the request body or query string is logged.

Both run once per request, so they are kept cheap: the metric children of each
(method, route, status) are looked up once and remembered, and the log record is
built only when the `privq.request` logger is enabled, without the caller lookup
(`Logger.findCaller` walks the stack; the JSON line does not show it).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.metrics import HTTP_LATENCY, HTTP_REQUESTS, HTTP_SERVER_ERRORS

logger = logging.getLogger("privq.request")

# (method, route, status) → its request counter and latency histogram children.
_metric_children: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}


def route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


def _children(method: str, route: str, status: int) -> tuple[Counter, Histogram]:
    key = (method, route, status)
    found = _metric_children.get(key)
    if found is None:
        # Same label sets as before the cache; prometheus-client keeps one child each.
        found = (
            HTTP_REQUESTS.labels(method=method, route=route, status=str(status)),
            HTTP_LATENCY.labels(method=method, route=route),
        )
        _metric_children[key] = found
    return found


def log_request(method: str, route: str, status: int, elapsed: float) -> None:
    """One `privq.request` record: method, route template, status, milliseconds."""
    if not logger.isEnabledFor(logging.INFO):
        return
    record = logger.makeRecord(
        logger.name,
        logging.INFO,
        __file__,
        0,
        "request",
        (),
        None,
        func="ObservabilityMiddleware",
        extra={"method": method, "route": route, "status": status, "ms": round(elapsed * 1000, 2)},
    )
    logger.handle(record)


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
            requests, latency = _children(method, route, status)
            requests.inc()
            latency.observe(elapsed)
            if status >= 500:
                HTTP_SERVER_ERRORS.labels(method=method, route=route).inc()
            log_request(method, route, status, elapsed)
