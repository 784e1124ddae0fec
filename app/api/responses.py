"""JSON responses that are always valid JSON: no NaN or Infinity ever reaches a client.

`SafeJSONResponse` is the app's default response class and what every handler and
error path uses. It encodes with `allow_nan=False`; a non-finite float (a bug
upstream, e.g. an answer that overflowed) becomes `null` and is logged once per
response, never sent as the `NaN`/`Infinity` tokens that strict JSON parsers reject.
(Routes answered through a `response_model` are encoded by pydantic, which writes
non-finite floats as `null` too.)
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from fastapi.responses import JSONResponse

logger = logging.getLogger("privq.api")


def finite_or_none(value: Any) -> Any:
    """`value` with every non-finite float inside it replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    return value


def dumps(content: Any) -> bytes:
    """Compact UTF-8 JSON; non-finite floats become null (and are logged)."""
    try:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        logger.error("a response held a non-finite number; it was sent as null")
        text = json.dumps(
            finite_or_none(content), ensure_ascii=False, allow_nan=False, separators=(",", ":")
        )
    return text.encode("utf-8")


class SafeJSONResponse(JSONResponse):
    """`JSONResponse` that never writes NaN or Infinity."""

    def render(self, content: Any) -> bytes:
        return dumps(content)
