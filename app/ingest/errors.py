"""Why an upload is refused: `IngestError` (a code and an HTTP status), and how a bad
cell may be quoted in its message."""

from __future__ import annotations

from typing import Any

from app.schema.rules import is_valid_unicode, quote

MAX_REPORTED_LINES = 10
QUOTED_CELL_CHARS = 40

_STATUS = {
    "empty_file": 422,
    "bad_csv": 422,
    "bad_header": 422,
    "value_out_of_schema": 422,
    "too_large": 413,
    "bad_parquet": 422,
    "bad_privacy_unit": 422,
    "missing_unit_id": 422,
}


class IngestError(ValueError):
    """An upload refused: `code` says which rule, `status` is the HTTP status to answer."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = _STATUS[code]
        self.message = message
        self.details = details or {}


def quote_cell(cell: str) -> str | None:
    """The bad cell as it may appear in a message, or None if it is not valid UTF-8."""
    return None if has_undecodable_bytes(cell) else quote(cell, QUOTED_CELL_CHARS)


def has_undecodable_bytes(text: str) -> bool:
    return not is_valid_unicode(text)  # surrogate-escaped bytes


def check_column_names(names: list[str], wanted: list[str], what: str) -> None:
    """IngestError `bad_header` unless `names` (a file's columns, `what`: "the header",
    "the Parquet columns") are exactly `wanted` in any order, each once: it names the
    missing, unknown and duplicate ones."""
    expected = set(wanted)
    seen: set[str] = set()
    duplicate: list[str] = []
    for name in names:
        if name in seen and name not in duplicate:
            duplicate.append(name)
        seen.add(name)
    unknown = [n for n in dict.fromkeys(names) if n not in expected]
    missing = [n for n in wanted if n not in seen]
    if not (duplicate or unknown or missing):
        return
    parts = []
    if missing:
        parts.append(f"missing column(s) {', '.join(map(repr, missing))}")
    if unknown:
        shown = [repr(n[:QUOTED_CELL_CHARS]) if n else "'' (an empty name)" for n in unknown]
        parts.append(f"unknown column(s) {', '.join(shown)} (remove them from the file)")
    if duplicate:
        parts.append(f"duplicate column(s) {', '.join(map(repr, duplicate))}")
    raise IngestError(
        "bad_header",
        f"{what} does not match the schema: " + "; ".join(parts),
        {"missing": missing, "unknown": unknown, "duplicate": duplicate},
    )
