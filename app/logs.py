"""Structured logging: one JSON object per line on stderr for the `privq` loggers.

Request logs carry method, route template, status and duration — never bodies,
query strings or anything else a client sent. Tracebacks keep their frames (file, line,
function, source line: code, not data) but only the messages the project writes itself,
those of `PrivqError`s. Any other exception's message can quote data — numpy's "cannot
reshape array of size 48842 …" (a row count), a `ValueError` naming a raw value,
PostgreSQL's "Failing row contains (…)" — so it is logged as its type alone.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
import traceback
from types import TracebackType
from typing import Any

from app.errors import PrivqError

# LogRecord attributes that are not extra fields given by the caller.
_STANDARD_RECORD_FIELDS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


# The last whole second formatted, (epoch second, "YYYY-MM-DDTHH:MM:SS"): a request log
# line is written per request, and formatting the date is most of a timestamp's cost.
_formatted_second: tuple[int, str] = (-1, "")


def utc_timestamp(created: float) -> str:
    """`created` as ISO 8601 UTC with milliseconds, exactly as
    `datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")` writes it."""
    global _formatted_second
    fraction, whole = math.modf(created)
    micros = round(fraction * 1e6)  # the rounding datetime.fromtimestamp does
    second = int(whole)
    if micros >= 1_000_000:
        second += 1
        micros -= 1_000_000
    cached = _formatted_second
    if cached[0] != second:
        cached = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        _formatted_second = cached  # one tuple, replaced whole: safe across threads
    return f"{cached[1]}.{micros // 1000:03d}+00:00"


def _is_database_error(error: BaseException) -> bool:
    # By module, so the drivers need not be imported here: SQLAlchemy's wrappers and
    # the DB-API exceptions of psycopg and sqlite3 they carry.
    module = type(error).__module__
    return module.startswith(("sqlalchemy", "psycopg", "sqlite3", "_sqlite3"))


def _type_name(error: BaseException) -> str:
    """The exception's type as `traceback` names it: builtins bare, others by module."""
    kind = type(error)
    if kind.__module__ in ("builtins", "__main__"):
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def _redacted_message(error: BaseException) -> str:
    """The exception's last line without its message (nor its notes): only its type,
    and a database error's SQLSTATE, which names the kind of failure and no value."""
    sqlstate = None
    if _is_database_error(error):
        sqlstate = getattr(getattr(error, "orig", error), "sqlstate", None)
    code = f", SQLSTATE {sqlstate}" if sqlstate else ""
    return f"{_type_name(error)}: (message withheld: may quote data{code})"


def format_exception_redacted(error: BaseException | None, tb: TracebackType | None = None) -> str:
    """A traceback like `traceback.format_exception`'s, frames and chained exceptions
    included, in which only `PrivqError`s keep their message: any other exception's is
    withheld (it may quote data), leaving its type name."""
    if error is None:
        return ""
    chain: list[tuple[BaseException, str | None]] = []
    seen: set[int] = set()
    current: BaseException | None = error
    link: str | None = None
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, "cause"
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, "context"
        else:
            current = None
    parts: list[str] = []
    for position, (item, _link) in enumerate(reversed(chain)):
        if position:
            # The link printed before an exception is the one that led to the next one.
            parts.append(
                "\nThe above exception was the direct cause of the following exception:\n\n"
                if chain[len(chain) - position][1] == "cause"
                else "\nDuring handling of the above exception, another exception occurred:\n\n"
            )
        frames = item.__traceback__ if item is not error or tb is None else tb
        if frames is not None:
            parts.append("Traceback (most recent call last):\n")
            parts.extend(traceback.format_tb(frames))
        if isinstance(item, PrivqError):  # messages we write ourselves, never data
            parts.extend(traceback.format_exception_only(type(item), item))
        else:
            parts.append(_redacted_message(item) + "\n")
    return "".join(parts).rstrip("\n")


class JsonFormatter(logging.Formatter):
    """Render a record and its `extra=` fields as one JSON line."""

    def formatException(self, ei: Any) -> str:
        return format_exception_redacted(ei[1], ei[2])

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": utc_timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_RECORD_FIELDS and key[0] != "_":
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


def configure_logging(level: str = "INFO") -> None:
    """Send the `privq` loggers to stderr as JSON lines (idempotent)."""
    logger = logging.getLogger("privq")
    logger.setLevel(level.upper())
    if not any(getattr(handler, "_privq_json", False) for handler in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        handler._privq_json = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
