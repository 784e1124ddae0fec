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
    """IngestError `bad_header` unless each of `wanted` is among `names` (a file's
    columns, `what`: "the header", "the Parquet columns") exactly once: it names the
    missing and duplicate ones. Other columns are not read, so they may be anything
    (an index column, a column the schema leaves out), repeated or unnamed."""
    expected = set(wanted)
    seen: set[str] = set()
    duplicate: list[str] = []
    for name in names:
        if name in expected and name in seen and name not in duplicate:
            duplicate.append(name)
        seen.add(name)
    missing = [n for n in wanted if n not in seen]
    if not (duplicate or missing):
        return
    parts = []
    if missing:
        parts.append(f"missing column(s) {', '.join(map(repr, missing))}")
    if duplicate:
        parts.append(f"duplicate column(s) {', '.join(map(repr, duplicate))}")
    raise IngestError(
        "bad_header",
        f"{what} does not match the schema: " + "; ".join(parts),
        {"missing": missing, "duplicate": duplicate},
    )
