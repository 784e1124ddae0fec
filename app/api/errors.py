"""The one error handler: every refusal is `{"error": {"code", "message", ...}}`.

Covers `PrivqError` (with its status and details), FastAPI's own 404/405/… and its
422 validation errors — reported by field location and reason (and a number's allowed
range), never echoing the values that were sent. A body that is not JSON at all is 400
`invalid_json`. A database that cannot be reached — refused, dropped mid-request,
restarting, or a connection pool that stays exhausted — is 503 `database_unavailable`
with `Retry-After`, never a 500 (`is_database_unavailable`: SQLAlchemy's
OperationalError and InterfaceError, a DBAPI error that invalidated its connection,
the driver's own connection errors, anywhere in the exception's causes). Anything else
unexpected is logged with its traceback and answered 500 `internal_error`.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api.responses import SafeJSONResponse
from app.errors import PrivqError

logger = logging.getLogger("privq.api")

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
}


# Seconds a client should wait before retrying when the database is unavailable.
RETRY_AFTER_SECONDS = 2


def error_response(status: int, code: str, message: str, **details: Any) -> SafeJSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if status == 503:
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    return SafeJSONResponse(
        status_code=status,
        content={"error": {"code": code, "message": message, **details}},
        headers=headers,
    )


DATABASE_UNAVAILABLE = "database_unavailable"
DATABASE_UNAVAILABLE_MESSAGE = "the database is unavailable or busy; retry shortly"


def _driver_connection_errors() -> tuple[type[BaseException], ...]:
    """psycopg's connection errors, raised as they are by code that uses the driver
    directly (they are SQLAlchemy's OperationalError/InterfaceError once wrapped)."""
    try:
        import psycopg
    except ImportError:  # a SQLite-only installation
        return ()
    return (psycopg.OperationalError, psycopg.InterfaceError)


_DRIVER_CONNECTION_ERRORS = _driver_connection_errors()


def _causes(error: BaseException) -> list[BaseException]:
    """The error, what it was raised from or during, and an exception group's members."""
    seen: list[BaseException] = []
    pending = [error]
    while pending and len(seen) < 32:
        current = pending.pop()
        if any(current is s for s in seen):
            continue
        seen.append(current)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
    return seen


def is_database_unavailable(error: BaseException) -> bool:
    """Whether `error` comes of the database being unreachable (not of a bad statement)."""
    for cause in _causes(error):
        if isinstance(cause, OperationalError | InterfaceError | PoolTimeoutError):
            return True
        if isinstance(cause, DBAPIError) and cause.connection_invalidated:
            return True
        if _DRIVER_CONNECTION_ERRORS and isinstance(cause, _DRIVER_CONNECTION_ERRORS):
            return True
    return False


def database_unavailable_response() -> SafeJSONResponse:
    return error_response(503, DATABASE_UNAVAILABLE, DATABASE_UNAVAILABLE_MESSAGE)


def _field_path(location: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in location)


def _field_problem(problem: Any) -> dict[str, Any]:
    """One validation problem: where and why (a number's allowed range, when it has one)."""
    item: dict[str, Any] = {
        "field": _field_path(problem.get("loc", ())),
        "reason": problem.get("msg", ""),
    }
    context = problem.get("ctx") or {}
    if isinstance(context.get("range"), str):
        item["range"] = context["range"]
    return item


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(PrivqError)
    async def _privq_error(_request: Request, error: PrivqError) -> SafeJSONResponse:
        return error_response(error.status, error.code, error.message, **error.details)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, error: StarletteHTTPException) -> SafeJSONResponse:
        status = error.status_code
        code = _HTTP_CODES.get(status, HTTPStatus(status).phrase.lower().replace(" ", "_"))
        message = error.detail if isinstance(error.detail, str) else HTTPStatus(status).phrase
        if status == 404 and message == "Not Found":
            message = "no such path"
        return error_response(status, code, message)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(
        _request: Request, error: RequestValidationError
    ) -> SafeJSONResponse:
        problems = error.errors()
        if any(problem.get("type") == "json_invalid" for problem in problems):
            position = next(
                (p["loc"][-1] for p in problems if p.get("type") == "json_invalid"), None
            )
            return error_response(
                400,
                "invalid_json",
                f"the body is not valid JSON (at character {position})",
            )
        fields = [_field_problem(problem) for problem in problems]
        message = "; ".join(f"{item['field']}: {item['reason']}" for item in fields)
        return error_response(422, "invalid_request", message or "invalid request", fields=fields)

    @app.exception_handler(OperationalError)
    @app.exception_handler(PoolTimeoutError)
    async def _database_unavailable(_request: Request, error: Exception) -> SafeJSONResponse:
        # The message names the cause without SQL or parameters (engines hide them too).
        logger.warning("database unavailable", extra={"error": type(error).__name__})
        return database_unavailable_response()

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, error: Exception) -> SafeJSONResponse:
        if is_database_unavailable(error):
            return await _database_unavailable(_request, error)
        logger.error("unhandled error", exc_info=error)
        return error_response(500, "internal_error", "internal server error")
