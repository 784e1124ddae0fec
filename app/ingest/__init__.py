"""Streaming ingest: a curator's CSV or Parquet file, read incrementally, encoded into
schema codes.

`encode_csv` reads a binary stream once, in small batches of rows, and turns each
column into the attribute's integer codes (`app.schema`); only the compact code arrays
are kept. `pack_column` / `unpack_column` turn one code array into a compressed blob
for durable storage and back (`pack_columns`: many at once, on several threads).

Modules: `reading` (CSV parsing: bytes → records), `columns` (encoding: cells →
codes), `table` (`encode_csv`, which drives both and decides refusals), `arrow` (the
CSV fast path), `parquet` (`encode_parquet`, record batches → codes), `units` (the
privacy unit: ids gathered, at most k random rows per unit kept), `upload`
(`encode_upload`: either format, then the privacy unit), `errors` (`IngestError`) and
`packing` (storage). This package gathers their public names.

What the file must look like (every refusal is an `IngestError` with an HTTP status):
- UTF-8, with or without a byte-order mark; a header row naming every schema
  attribute exactly once, in any order (``bad_header``); other columns are not read. Header
  names are stripped of surrounding whitespace.
- Every record has as many fields as the header (``bad_csv``, with its line number);
  RFC 4180 quoting; completely empty lines are skipped. A physical line may not be
  longer than `MAX_LINE_CHARS` characters nor a field than csv's field limit.
- Cells are stripped of surrounding whitespace, then: categorical — exactly one of
  the schema's values; numeric — a decimal number (also "1e3", "inf" when clipped;
  never "nan"; an empty cell only with "missing") in [e_0, e_k], or clamped into the
  first/last bin when the attribute has ``clip``; integer — an integer in the attribute's
  min..max (its code: its bin of `width` integers), written "3" or, from float exports,
  "3.0" ("3.5" is refused), clamped into min..max when the attribute has ``clip``.
  An attribute with ``"missing": true`` takes a cell that strips to one of its
  ``missing_values`` (default ``[""]``) as its missing code, the last.
  Anything else is ``value_out_of_schema``: the first offending column (leftmost in
  the earliest offending line) and its first lines, up to 10; the message may quote
  that first bad cell (truncated) and never any other cell.
- At least one data row (``empty_file``); at most `max_bytes` bytes (``too_large``,
  raised as soon as the limit is passed).
Line numbers are 1-based physical lines of the file; the header is line 1. When
several problems exist, the first in file order is reported (``too_large`` always
wins: reading stops there).
"""

from app.ingest.columns import code_dtype
from app.ingest.errors import MAX_REPORTED_LINES, IngestError
from app.ingest.fractions import FRACTION_PREFIX, fraction_column
from app.ingest.packing import pack_column, pack_columns, unpack_column
from app.ingest.parquet import PARQUET_CONTENT_TYPE, encode_parquet
from app.ingest.reading import MAX_LINE_CHARS
from app.ingest.table import DEFAULT_CHUNK_ROWS, EncodedTable, encode_csv
from app.ingest.units import MAX_UNIT_ROWS, PrivacyUnit, parse_privacy_unit
from app.ingest.upload import encode_upload

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "FRACTION_PREFIX",
    "MAX_LINE_CHARS",
    "MAX_REPORTED_LINES",
    "MAX_UNIT_ROWS",
    "PARQUET_CONTENT_TYPE",
    "EncodedTable",
    "IngestError",
    "PrivacyUnit",
    "code_dtype",
    "encode_csv",
    "encode_parquet",
    "encode_upload",
    "fraction_column",
    "pack_column",
    "pack_columns",
    "parse_privacy_unit",
    "unpack_column",
]
