"""Structured logging: one JSON object per line on stderr for the `privq` loggers.

Request logs carry method, route template, status and duration — never bodies,
query strings or anything else a client sent.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

# LogRecord attributes that are not extra fields given by the caller.
_STANDARD_RECORD_FIELDS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Render a record and its `extra=` fields as one JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_RECORD_FIELDS and not key.startswith("_"):
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
