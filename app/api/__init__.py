"""The HTTP API: `create_app(settings)` builds the FastAPI application.

Start-up (the lifespan) upgrades the schema when `auto_migrate` is on (the embedded
SQLite default), generates and prints the admin key if none is configured or stored,
and starts the in-process workers through `start_workers` when it is given (`privq
serve` passes `app.worker.start_embedded_workers`: the API never imports the worker);
shutdown stops them and closes the pool.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from anyio import to_thread
from fastapi import APIRouter, FastAPI
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from app import limits
from app.api import concurrency
from app.api import routers as routers_package
from app.api.deps import loop_read_sessions, make_loop_read_engine
from app.api.docs import install_docs
from app.api.errors import install_error_handlers
from app.api.guards import RequestGuardMiddleware
from app.api.observability import ObservabilityMiddleware
from app.api.openapi import api_routes, install_openapi
from app.api.responses import SafeJSONResponse
from app.config import Settings, get_settings
from app.db import Database
from app.logs import configure_logging
from app.services import admin_key as admin_key_service
from app.services import tenants as tenant_service

logger = logging.getLogger("privq.api")

# Multipart framing and the small form fields around the CSV file.
UPLOAD_ENVELOPE_BYTES = 1024 * 1024

# Starts `count` workers beside the API; returns the function that stops them.
WorkerStarter = Callable[[int, Settings], Callable[[], None]]


def discover_routers() -> list[APIRouter]:
    """The `router` of every module in `app/api/routers/`: a new resource is a new file."""
    found = []
    for module_info in sorted(pkgutil.iter_modules(routers_package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{routers_package.__name__}.{module_info.name}")
        router = getattr(module, "router", None)
        if isinstance(router, APIRouter):
            found.append(router)
    return found


# Routes are matched in the order they are included, one pattern after another: the free
# answers, most of the traffic, come first (no other route's path is one of theirs).
_MATCHED_FIRST = ("answers", "sql")


def matching_order(routers: list[APIRouter]) -> list[APIRouter]:
    """`discover_routers`' routers (by module name) with the free answers' first."""
    first = [
        router
        for name in _MATCHED_FIRST
        for router in routers
        if router is importlib.import_module(f"{routers_package.__name__}.{name}").router
    ]
    return first + [router for router in routers if not any(router is r for r in first)]


def announce_admin_key(database: Database, settings: Settings) -> str | None:
    """Generate, store and print the admin key if none is configured or stored yet."""
    if settings.admin_key is not None:
        return None
    with database.unit_of_work() as session:
        admin_key = tenant_service.ensure_generated_admin_key(session)
    if admin_key is not None:
        # Printed once, to stdout (the logs go to stderr), in a block of its own.
        print(admin_key_service.notice(admin_key, headline="generated admin key:"), flush=True)
    return admin_key


# Connections beyond one per thread: the auth lookup of a cache miss and readiness
# checks may each hold one briefly while a request thread holds another.
API_POOL_EXTRA_CONNECTIONS = 8


def api_pool_options(settings: Settings) -> dict[str, Any]:
    """Pool sizing for an API process: a connection for every request thread, and then some."""
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
        return {}  # one in-memory database per connection: SQLAlchemy's own pool
    return {
        "pool_size": settings.api_threads + settings.api_write_threads,
        "max_overflow": API_POOL_EXTRA_CONNECTIONS,
        "pool_timeout": settings.database_pool_timeout_seconds,
    }


def create_app(
    settings: Settings | None = None,
    *,
    database: Database | None = None,
    start_workers: WorkerStarter | None = None,
) -> FastAPI:
    settings = settings or get_settings()
    configure_logging(settings.log_level)
    database = database or Database.from_settings(settings, **api_pool_options(settings))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Blocking request work runs in at most `api_threads` threads (and writes in
        # `api_write_threads` more), as many as the pool has connections for.
        to_thread.current_default_thread_limiter().total_tokens = settings.api_threads
        concurrency.configure(settings.api_write_threads, settings.api_answer_threads)
        try:
            if settings.effective_auto_migrate:
                from app.migrations import upgrade_to_head

                upgrade_to_head(settings.database_url)
            announce_admin_key(database, settings)
        except OperationalError:
            # Serve anyway: /readyz answers 503 with the reason until the database
            # answers (a generated admin key is then made on the next start).
            logger.warning("database unreachable at start-up; /readyz reports it")
        stop_workers: Callable[[], None] | None = None
        worker_count = settings.effective_workers_in_process
        if worker_count > 0 and start_workers is not None:
            stop_workers = start_workers(worker_count, settings)
        try:
            yield
        finally:
            if stop_workers is not None:
                stop_workers()
            if loop_read_engine is not None:
                loop_read_engine.dispose()
            database.dispose()

    app = FastAPI(
        title="privq",
        version="0.1.0",
        summary="Privacy-budgeted answers over sensitive tabular data (zCDP + Private-PGM).",
        lifespan=lifespan,
        default_response_class=SafeJSONResponse,
        # The CDN-loaded pages FastAPI would add are replaced by offline ones (app.api.docs).
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.database = database
    loop_read_engine = make_loop_read_engine(database)
    app.state.loop_read_engine = loop_read_engine
    if loop_read_engine is not None:
        app.state.loop_read_sessions = loop_read_sessions(loop_read_engine)
    install_error_handlers(app)
    app.add_middleware(
        RequestGuardMiddleware,
        max_json_bytes=settings.max_json_body_bytes,
        max_upload_bytes=settings.max_upload_bytes + UPLOAD_ENVELOPE_BYTES,
        max_json_depth=limits.MAX_JSON_DEPTH,
    )
    app.add_middleware(ObservabilityMiddleware)  # outermost: sees every response
    routers = discover_routers()
    for router in matching_order(routers):
        app.include_router(router)
    install_docs(app)
    install_openapi(app, api_routes(routers))
    return app
