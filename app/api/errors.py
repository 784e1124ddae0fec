"""The one error handler: every refusal is `{"error": {"code", "message", ...}}`.

Covers `PrivqError` (with its status and details), FastAPI's own 404/405/… and its
422 validation errors — reported by field location and reason, never echoing the
values that were sent.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

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


def error_response(status: int, code: str, message: str, **details: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(
        status_code=status,
        content={"error": {"code": code, "message": message, **details}},
        headers=headers,
    )


def _field_path(location: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in location)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(PrivqError)
    async def _privq_error(_request: Request, error: PrivqError) -> JSONResponse:
        return error_response(error.status, error.code, error.message, **error.details)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, error: StarletteHTTPException) -> JSONResponse:
        status = error.status_code
        code = _HTTP_CODES.get(status, HTTPStatus(status).phrase.lower().replace(" ", "_"))
        message = error.detail if isinstance(error.detail, str) else HTTPStatus(status).phrase
        if status == 404 and message == "Not Found":
            message = "no such path"
        return error_response(status, code, message)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, error: RequestValidationError) -> JSONResponse:
        fields = [
            {"field": _field_path(problem.get("loc", ())), "reason": problem.get("msg", "")}
            for problem in error.errors()
        ]
        message = "; ".join(f"{item['field']}: {item['reason']}" for item in fields)
        return error_response(422, "invalid_request", message or "invalid request", fields=fields)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, error: Exception) -> JSONResponse:
        logger.error("unhandled error", exc_info=error)
        return error_response(500, "internal_error", "internal server error")
