"""A standalone worker's `/metrics`: a small HTTP server in a background thread.

`privq worker --metrics-port N` serves the worker's own metrics (jobs, queue wait,
fits, measurements, refunds) on that port, under the same rule as the API: the
admin key is needed unless `PRIVQ_METRICS_PUBLIC=true`. Workers started by
`privq serve` need none of this: the API merges their metrics into its own.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from app.config import Settings
from app.db import Database
from app.metrics import CONTENT_TYPE, render_latest
from app.services import tenants as tenant_service

# How long the stored admin key's hash is trusted before it is read again.
ADMIN_KEY_RECHECK_SECONDS = 5.0

logger = logging.getLogger("privq.metrics")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes every few seconds would flood the worker's log


class MetricsApp:
    """The WSGI application: `GET /metrics`, bearer admin key unless metrics are public."""

    def __init__(self, settings: Settings, database: Database) -> None:
        self.settings = settings
        self.database = database
        self._admin_hash: str | None = None
        self._admin_hash_until = 0.0

    def admin_key_hash(self) -> str | None:
        if self.settings.admin_key is not None:
            return tenant_service.hash_key(self.settings.admin_key.get_secret_value())
        # The stored key (`privq admin rotate-key` replaces it): read again after a while.
        if self._admin_hash is None or time.monotonic() >= self._admin_hash_until:
            with self.database.read_only() as session:
                self._admin_hash = tenant_service.stored_admin_key_hash(session)
            self._admin_hash_until = time.monotonic() + ADMIN_KEY_RECHECK_SECONDS
        return self._admin_hash

    def allowed(self, authorization: str) -> bool:
        if self.settings.metrics_public:
            return True
        scheme, _, key = authorization.partition(" ")
        expected = self.admin_key_hash()
        if scheme.lower() != "bearer" or not key or expected is None:
            return False
        return hmac.compare_digest(tenant_service.hash_key(key.strip()), expected)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/metrics" or environ.get("REQUEST_METHOD") != "GET":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found\n"]
        if not self.allowed(environ.get("HTTP_AUTHORIZATION", "")):
            start_response(
                "401 Unauthorized",
                [("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer")],
            )
            return [b"metrics need the admin key (or PRIVQ_METRICS_PUBLIC=true)\n"]
        start_response("200 OK", [("Content-Type", CONTENT_TYPE)])
        return [render_latest()]


def start_metrics_server(
    settings: Settings, database: Database, *, port: int, host: str = "127.0.0.1"
) -> tuple[WSGIServer, Callable[[], None]]:
    """Serve `/metrics` on `host:port` in a daemon thread; returns the server and its stop."""
    server = make_server(host, port, MetricsApp(settings, database), handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="privq-metrics-server", daemon=True)
    thread.start()
    logger.info("metrics served", extra={"host": host, "port": server.server_port})

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return server, stop
