"""Streaming CSV ingest: a curator's CSV, read incrementally, encoded into schema codes.

`encode_csv` reads a binary stream once, in small batches of rows, and turns each
column into the attribute's integer codes (`app.schema`); only the compact code arrays
are kept. `pack_column` / `unpack_column` turn one code array into a compressed blob
for durable storage and back.

What the file must look like (every refusal is an `IngestError` with an HTTP status):
- UTF-8, with or without a byte-order mark; a header row naming every schema
  attribute exactly once, in any order; no other columns (``bad_header``). Header
  names are stripped of surrounding whitespace.
- Every record has as many fields as the header (``bad_csv``, with its line number);
  RFC 4180 quoting; completely empty lines are skipped. A physical line may not be
  longer than `MAX_LINE_CHARS` characters nor a field than csv's field limit.
- Cells are stripped of surrounding whitespace, then: categorical — exactly one of
  the schema's values; numeric — a decimal number (also "1e3", "inf" when clipped;
  never "nan" or an empty cell) in [e_0, e_k], or clamped into the first/last bin when
  the attribute has ``clip``; integer — an integer in 0..size-1, written "3" or, from
  float exports, "3.0" ("3.5" is refused), clamped when the attribute has ``clip``.
  Anything else is ``value_out_of_schema``: the first offending column (leftmost in
  the earliest offending line) and its first lines, up to 10; the message may quote
  that first bad cell (truncated) and never any other cell.
- At least one data row (``empty_file``); at most `max_bytes` bytes (``too_large``,
  raised as soon as the limit is passed).
Line numbers are 1-based physical lines of the file; the header is line 1. When
several problems exist, the first in file order is reported (``too_large`` always
wins: reading stops there).
"""

from __future__ import annotations

import csv
import io
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from app.schema import Attribute, DatasetSchema, format_number

MAX_LINE_CHARS = 1 << 20
MAX_REPORTED_LINES = 10
QUOTED_CELL_CHARS = 40
# Rows per vectorised step. Small batches keep the freshly parsed strings in the CPU
# cache while they are transposed and encoded; 64k-row batches measured ~3x slower.
DEFAULT_CHUNK_ROWS = 2048
_READ_BUFFER_BYTES = 1 << 20
_BOM = "\ufeff"

_STATUS = {
    "empty_file": 422,
    "bad_csv": 422,
    "bad_header": 422,
    "value_out_of_schema": 422,
    "too_large": 413,
}


class IngestError(ValueError):
    """An upload refused: `code` says which rule, `status` is the HTTP status to answer."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = _STATUS[code]
        self.message = message
        self.details = details or {}


@dataclass
class EncodedTable:
    """The encoded dataset: row count and one code array per attribute, schema order."""

    rows: int
    columns: dict[str, np.ndarray] = field(default_factory=dict)


def code_dtype(size: int) -> np.dtype:
    """Smallest unsigned integer dtype that holds codes 0..size-1."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if size - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


def _quote_cell(cell: str) -> str | None:
    """The bad cell as it may appear in a message, or None if it is not valid UTF-8."""
    try:
        cell.encode("utf-8")
    except UnicodeEncodeError:  # surrogate-escaped bytes
        return None
    shown = cell if len(cell) <= QUOTED_CELL_CHARS else cell[: QUOTED_CELL_CHARS - 1] + "…"
    return repr(shown)


def _has_undecodable_bytes(text: str) -> bool:
    return _quote_cell(text) is None


# -- reading ------------------------------------------------------------------------------


class _CountingReader(io.RawIOBase):
    """Raw view of the caller's stream that counts bytes and stops past `max_bytes`.

    Closing it (as the text wrappers do) leaves the caller's stream open.
    """

    def __init__(self, stream: BinaryIO, max_bytes: int | None) -> None:
        super().__init__()
        self._stream = stream
        self._max_bytes = max_bytes
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        want = len(buffer)
        if self._max_bytes is not None:
            # Never read more than one byte past the limit.
            want = min(want, self._max_bytes - self.bytes_read + 1)
        data = self._stream.read(want)
        n = len(data)
        buffer[:n] = data
        self.bytes_read += n
        if self._max_bytes is not None and self.bytes_read > self._max_bytes:
            raise IngestError(
                "too_large", f"the upload is larger than the limit of {self._max_bytes} bytes"
            )
        return n


def _bounded_lines(text: io.TextIOBase) -> Iterator[str]:
    """Physical lines (terminators kept), refusing any longer than MAX_LINE_CHARS.

    Reading with a size bound means a file without line breaks is never held whole.
    The BOM, if any, is dropped from the first line.
    """
    readline = text.readline
    line = readline(MAX_LINE_CHARS)
    if line.startswith(_BOM):
        line = line[1:]
    line_number = 1
    while line:
        if len(line) >= MAX_LINE_CHARS and line[-1] not in "\r\n":
            raise IngestError(
                "bad_csv", f"line {line_number} is longer than {MAX_LINE_CHARS} characters"
            )
        yield line
        line = readline(MAX_LINE_CHARS)
        line_number += 1


# -- column encoders ----------------------------------------------------------------------


class _StrippingLookup(dict):  # type: ignore[type-arg]
    """value -> code for a categorical column; padded cells resolve by their stripped value.

    A miss that strips to a known value is remembered (bounded), so a file that pads
    every cell pays for stripping once per distinct spelling.
    """

    _MAX_REMEMBERED = 10_000

    def __init__(self, values: tuple[str, ...]) -> None:
        super().__init__((value, code) for code, value in enumerate(values))
        self._room = self._MAX_REMEMBERED

    def __missing__(self, cell: str) -> int:
        code = self.get(cell.strip(), -1)
        if code >= 0 and self._room > 0:
            self[cell] = code
            self._room -= 1
        return code


_MISS = -2  # memo marker: the cell's code is not remembered yet


class _Memo(dict):  # type: ignore[type-arg]
    """cell -> code of a numeric or integer column, for cells already parsed once."""

    def __missing__(self, cell: str) -> int:
        return _MISS


class _ColumnEncoder:
    """Turns one column's cells (a tuple of str) into codes; -1 marks a bad cell.

    Numeric and integer columns usually repeat a few thousand spellings ("39",
    "40.5"): a bounded memo answers those by dict lookup and parses only new ones
    (vectorised, so the result is the same either way). A column whose cells keep
    missing the memo once it is full is parsed without it.
    """

    MEMO_CAPACITY = 8192
    MEMO_GIVE_UP_MISS_FRACTION = 0.3

    def __init__(self, attribute: Attribute) -> None:
        self.attribute = attribute
        self.size = attribute.size
        self.dtype = code_dtype(self.size)
        self._memo: _Memo | None = None
        if attribute.kind == "categorical":
            assert attribute.values is not None
            self._lookup = _StrippingLookup(attribute.values)
        else:
            self._memo = _Memo()
        if attribute.kind == "numeric":
            assert attribute.bins is not None
            self._edges = np.asarray(attribute.bins, dtype=np.float64)

    def encode(self, cells: tuple[str, ...]) -> np.ndarray:
        """int64 codes, -1 where the cell is outside the schema."""
        if self.attribute.kind == "categorical":
            return np.fromiter(map(self._lookup.__getitem__, cells), np.int64, len(cells))
        memo = self._memo
        if memo is None:
            return self._parse(cells)
        codes = np.fromiter(map(memo.__getitem__, cells), np.int64, len(cells))
        missed_rows = np.flatnonzero(codes == _MISS)
        if missed_rows.size:
            missed_cells = [cells[row] for row in missed_rows.tolist()]
            fresh = self._parse(tuple(missed_cells))
            codes[missed_rows] = fresh
            room = self.MEMO_CAPACITY - len(memo)
            if room > 0:
                memo.update(zip(missed_cells[:room], fresh[:room].tolist(), strict=True))
            elif missed_rows.size > self.MEMO_GIVE_UP_MISS_FRACTION * len(cells):
                self._memo = None
        return codes

    def _parse(self, cells: tuple[str, ...]) -> np.ndarray:
        if self.attribute.kind == "numeric":
            return self._encode_numeric(cells)
        return self._encode_integer(cells)

    def _encode_numeric(self, cells: tuple[str, ...]) -> np.ndarray:
        try:
            # float() itself ignores surrounding whitespace.
            x = np.fromiter(map(float, cells), np.float64, len(cells))
        except ValueError:
            x = np.fromiter(map(_float_or_nan, cells), np.float64, len(cells))
        edges = self._edges
        last_bin = len(edges) - 2
        codes = np.searchsorted(edges, x, side="right").astype(np.int64) - 1
        codes[x == edges[-1]] = last_bin  # the last bin is closed
        if self.attribute.clip:
            np.clip(codes, 0, last_bin, out=codes)
        else:
            codes[(codes < 0) | (codes > last_bin)] = -1
        codes[np.isnan(x)] = -1  # NaN and unparsable cells have no bin, clipped or not
        return codes

    def _encode_integer(self, cells: tuple[str, ...]) -> np.ndarray:
        try:
            codes = np.fromiter(map(int, cells), np.int64, len(cells))
        except (ValueError, OverflowError):
            codes = np.fromiter(map(_integer_or_none_marker, cells), np.int64, len(cells))
            unparsable = codes == _NOT_AN_INTEGER
        else:
            unparsable = None
        if self.attribute.clip:
            np.clip(codes, 0, self.size - 1, out=codes)
        else:
            codes[(codes < 0) | (codes >= self.size)] = -1
        if unparsable is not None:
            codes[unparsable] = -1
        return codes

    def explain(self, cell: str) -> str:
        """Why one cell is outside the schema (quoting the cell unless undecodable)."""
        quoted = _quote_cell(cell) or "a value"
        attribute = self.attribute
        if attribute.kind == "categorical":
            return f"{quoted} is not one of the schema's {self.size} values"
        if attribute.kind == "numeric":
            x = _float_or_nan(cell)
            lo, hi = format_number(self._edges[0]), format_number(self._edges[-1])
            if np.isnan(x):
                return (
                    f"{quoted} is not a number"
                    if cell.strip().lower() != "nan"
                    else f"{quoted} has no bin"
                )
            return f"{quoted} is outside the bins [{lo}, {hi}]"
        value = _integer_or_none_marker(cell)
        if value == _NOT_AN_INTEGER:
            return f"{quoted} is not an integer"
        return f"{quoted} is not an integer code in 0..{self.size - 1}"


def _float_or_nan(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return float("nan")


# Out of every code range and of int64-safe parsing: marks a cell that is no integer.
_NOT_AN_INTEGER = -(2**62)


def _integer_or_none_marker(cell: str) -> int:
    try:
        value = int(cell)
    except ValueError:
        x = _float_or_nan(cell)
        # "3.0" and "3e0" from float exports are the integer 3; "3.5", "nan", "inf" are not.
        if not np.isfinite(x) or not x.is_integer():
            return _NOT_AN_INTEGER
        value = int(x)
    # Far-out values only need to stay out of range, within int64.
    return max(min(value, 2**62), -(2**62) + 1)


# -- the encoder --------------------------------------------------------------------------


@dataclass
class _Offence:
    """The first offending column and the lines found so far."""

    file_column: int
    encoder: _ColumnEncoder
    first_cell: str
    lines: list[int] = field(default_factory=list)


def _read_header(reader: Any, schema: DatasetSchema) -> list[int]:
    """File column index of each schema attribute, schema order."""
    header: list[str] = []
    while not header:  # blank lines before the header are skipped
        try:
            header = next(reader)
        except StopIteration:
            raise IngestError("empty_file", "the file is empty (no header row)") from None
        except csv.Error as exc:
            line = reader.line_num
            raise IngestError(
                "bad_csv", f"malformed CSV on line {line} (the header): {exc}", {"line": line}
            ) from None
    header_line = reader.line_num
    names = [cell.strip() for cell in header]
    if any(_has_undecodable_bytes(n) for n in names):
        raise IngestError(
            "bad_csv", f"line {header_line} (the header) has bytes that are not valid UTF-8"
        )
    expected = set(schema.names)
    seen: set[str] = set()
    duplicate: list[str] = []
    for name in names:
        if name in seen and name not in duplicate:
            duplicate.append(name)
        seen.add(name)
    unknown = [n for n in dict.fromkeys(names) if n not in expected]
    missing = [n for n in schema.names if n not in seen]
    if duplicate or unknown or missing:
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
            "the header does not match the schema: " + "; ".join(parts),
            {"missing": missing, "unknown": unknown, "duplicate": duplicate},
        )
    position = {name: i for i, name in enumerate(names)}
    return [position[name] for name in schema.names]


def encode_csv(
    stream: BinaryIO,
    schema: DatasetSchema,
    *,
    max_bytes: int | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> EncodedTable:
    """Read a CSV (with header) from a binary stream and encode it by `schema`.

    Reads incrementally and keeps only the code arrays (one unsigned array per
    attribute, the smallest dtype that fits). Raises `IngestError`; the stream is
    left open.
    """
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be at least 1")
    counting = _CountingReader(stream, max_bytes)
    buffered = io.BufferedReader(counting, buffer_size=_READ_BUFFER_BYTES)
    # surrogateescape: undecodable bytes survive into the cells, where they fail the
    # schema and are reported with their exact line, at no cost to valid files.
    text = io.TextIOWrapper(buffered, encoding="utf-8", errors="surrogateescape", newline="")
    try:
        reader = csv.reader(_bounded_lines(text), strict=True)
        file_columns = _read_header(reader, schema)
        return _encode_rows(reader, schema, file_columns, chunk_rows)
    finally:
        # Detach so that collecting the wrappers never closes the caller's stream.
        counting.close()


def _encode_rows(
    reader: Any, schema: DatasetSchema, file_columns: list[int], chunk_rows: int
) -> EncodedTable:
    encoders = [_ColumnEncoder(a) for a in schema.attributes]
    n_fields = len(file_columns)  # the header matched the schema exactly
    parts: list[list[np.ndarray]] = [[] for _ in encoders]
    total_rows = 0
    offence: _Offence | None = None
    pending: IngestError | None = None

    rows: list[list[str]] = []
    # starts[i] + 1 is the line where row i begins (a quoted field may span lines).
    starts: list[int] = []
    batches = _batches(reader, rows, starts, n_fields, chunk_rows)
    while True:
        try:
            has_rows = next(batches)
        except StopIteration:
            break
        except IngestError as exc:
            if exc.code == "too_large":
                raise
            pending = exc  # a structural error: rows before it are still checked first
            has_rows = bool(rows)
        except csv.Error as exc:
            line = reader.line_num
            pending = IngestError("bad_csv", f"malformed CSV on line {line}: {exc}", {"line": line})
            has_rows = bool(rows)
        if has_rows:
            columns = list(zip(*rows, strict=True))
            if offence is None:
                offence = _encode_batch(columns, starts, encoders, file_columns, parts)
                if offence is None:
                    total_rows += len(rows)
            else:
                _collect_more(offence, columns, starts)
            rows.clear()
            starts.clear()
        if pending is not None or (
            offence is not None and len(offence.lines) >= MAX_REPORTED_LINES
        ):
            break
    if offence is not None:
        raise _value_error(offence)
    if pending is not None:
        raise pending
    if total_rows == 0:
        raise IngestError("empty_file", "the file has a header but no data rows")
    columns_out = {
        attribute.name: (np.concatenate(column_parts) if len(column_parts) > 1 else column_parts[0])
        for attribute, column_parts in zip(schema.attributes, parts, strict=True)
    }
    return EncodedTable(rows=total_rows, columns=columns_out)


def _batches(
    reader: Any, rows: list[list[str]], starts: list[int], n_fields: int, chunk_rows: int
) -> Iterator[bool]:
    """Fill `rows`/`starts` in place; yield True each time a batch is ready.

    A record with the wrong number of fields raises bad_csv after the rows before it
    are left in `rows` for checking.
    """
    append_row = rows.append
    append_start = starts.append
    previous_end = reader.line_num
    for row in reader:
        if len(row) != n_fields:
            if not row:  # an empty line
                previous_end = reader.line_num
                continue
            raise IngestError(
                "bad_csv",
                f"line {previous_end + 1} has {len(row)} field(s); the header has {n_fields}",
                {"line": previous_end + 1},
            )
        append_row(row)
        append_start(previous_end)
        previous_end = reader.line_num
        if len(rows) >= chunk_rows:
            yield True
    if rows:
        yield True


def _encode_batch(
    columns: list[tuple[str, ...]],
    starts: list[int],
    encoders: list[_ColumnEncoder],
    file_columns: list[int],
    parts: list[list[np.ndarray]],
) -> _Offence | None:
    """Encode one batch into `parts`; on bad cells return the first offence instead."""
    encoded: list[np.ndarray] = []
    first_bad: tuple[int, int, int] | None = None  # (row, file column, attribute index)
    for index, (encoder, file_column) in enumerate(zip(encoders, file_columns, strict=True)):
        codes = encoder.encode(columns[file_column])
        if codes.min() < 0:
            row = int(np.argmax(codes < 0))
            candidate = (row, file_column, index)
            if first_bad is None or candidate < first_bad:
                first_bad = candidate
        encoded.append(codes)
    if first_bad is None:
        for column_parts, encoder, codes in zip(parts, encoders, encoded, strict=True):
            column_parts.append(codes.astype(encoder.dtype))
        return None
    row, file_column, index = first_bad
    offence = _Offence(file_column, encoders[index], columns[file_column][row])
    bad_rows = np.flatnonzero(encoded[index] < 0)[:MAX_REPORTED_LINES]
    offence.lines.extend(starts[int(r)] + 1 for r in bad_rows)
    return offence


def _collect_more(offence: _Offence, columns: list[tuple[str, ...]], starts: list[int]) -> None:
    """Find further bad lines of the offending column (the batch is then dropped)."""
    codes = offence.encoder.encode(columns[offence.file_column])
    room = MAX_REPORTED_LINES - len(offence.lines)
    bad_rows = np.flatnonzero(codes < 0)[:room]
    offence.lines.extend(starts[int(r)] + 1 for r in bad_rows)


def _value_error(offence: _Offence) -> IngestError:
    name = offence.encoder.attribute.name
    first_line = offence.lines[0]
    if _has_undecodable_bytes(offence.first_cell):
        return IngestError(
            "bad_csv",
            f"line {first_line}, column {name!r}: bytes that are not valid UTF-8",
            {"line": first_line, "column": name},
        )
    lines = ", ".join(map(str, offence.lines))
    more = " (the first 10)" if len(offence.lines) >= MAX_REPORTED_LINES else ""
    return IngestError(
        "value_out_of_schema",
        f"column {name!r} has values outside the schema on line(s) {lines}{more}; "
        f"on line {first_line}: {offence.encoder.explain(offence.first_cell)}",
        {"column": name, "lines": list(offence.lines)},
    )


# -- storage ------------------------------------------------------------------------------

_PACK_MAGIC = b"PQC1"
_PACK_HEADER = struct.Struct("<4s8sQ")  # magic, dtype string (e.g. "<u1", padded), length


def pack_column(codes: np.ndarray) -> bytes:
    """One 1-D integer code array as a compressed blob with a dtype and length header."""
    codes = np.asarray(codes)
    if codes.ndim != 1 or codes.dtype.kind not in "ui":
        raise ValueError("pack_column takes a 1-D integer array")
    little = codes.astype(codes.dtype.newbyteorder("<"), copy=False)
    dtype_text = little.dtype.str.encode("ascii")
    header = _PACK_HEADER.pack(_PACK_MAGIC, dtype_text, len(little))
    return header + zlib.compress(little.tobytes(), 6)


def unpack_column(blob: bytes) -> np.ndarray:
    """The code array `pack_column` stored, same dtype and length (native byte order)."""
    if len(blob) < _PACK_HEADER.size:
        raise ValueError("not a packed column (too short)")
    magic, dtype_text, length = _PACK_HEADER.unpack_from(blob)
    if magic != _PACK_MAGIC:
        raise ValueError("not a packed column (bad magic)")
    try:
        dtype = np.dtype(dtype_text.rstrip(b"\0").decode("ascii"))
        raw = zlib.decompress(blob[_PACK_HEADER.size :])
    except (TypeError, UnicodeDecodeError, zlib.error) as exc:
        raise ValueError(f"packed column is corrupt ({exc})") from None
    if len(raw) != length * dtype.itemsize:
        raise ValueError("packed column is corrupt (length mismatch)")
    return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="))
