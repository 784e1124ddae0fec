"""Structured logging: one JSON object per line on stderr for the `privq` loggers.

Request logs carry method, route template, status and duration — never bodies,
query strings or anything else a client sent.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from typing import Any

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


class JsonFormatter(logging.Formatter):
    """Render a record and its `extra=` fields as one JSON line."""

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
