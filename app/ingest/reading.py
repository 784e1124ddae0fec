"""CSV parsing: a binary stream read once, incrementally, into records of string cells.

Bytes are counted (``too_large`` as soon as the limit is passed), decoded as UTF-8
(undecodable bytes kept as surrogates, so they fail the schema on their own line),
split into physical lines no longer than `MAX_LINE_CHARS`, and parsed by `csv`
(RFC 4180, strict). `read_header` maps the schema's attributes to file columns;
`read_batches` hands the records over in batches with the line each starts on.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

from app.ingest.errors import IngestError, check_column_names, has_undecodable_bytes
from app.schema import DatasetSchema

MAX_LINE_CHARS = 1 << 20
_READ_BUFFER_BYTES = 1 << 20
_BOM = "\ufeff"


class CountingReader(io.RawIOBase):
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


def bounded_lines(text: io.TextIOBase) -> Iterator[str]:
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


@contextmanager
def csv_records(stream: BinaryIO, max_bytes: int | None) -> Iterator[Any]:
    """A `csv.reader` over the stream's lines; the caller's stream is left open."""
    counting = CountingReader(stream, max_bytes)
    buffered = io.BufferedReader(counting, buffer_size=_READ_BUFFER_BYTES)
    # surrogateescape: undecodable bytes survive into the cells, where they fail the
    # schema and are reported with their exact line, at no cost to valid files.
    text = io.TextIOWrapper(buffered, encoding="utf-8", errors="surrogateescape", newline="")
    try:
        yield csv.reader(bounded_lines(text), strict=True)
    finally:
        # Detach so that collecting the wrappers never closes the caller's stream.
        counting.close()


def read_header(
    reader: Any, schema: DatasetSchema, unit_column: str | None = None
) -> tuple[list[int], int]:
    """File column index of each schema attribute, schema order (then of `unit_column`,
    the privacy unit's id column, when given), and the number of columns of the file.
    Columns the schema does not name are not read."""
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
    if any(has_undecodable_bytes(n) for n in names):
        raise IngestError(
            "bad_csv", f"line {header_line} (the header) has bytes that are not valid UTF-8"
        )
    wanted = list(schema.names) + ([unit_column] if unit_column is not None else [])
    check_column_names(names, wanted, "the header")
    position = {name: i for i, name in enumerate(names)}
    return [position[name] for name in wanted], len(names)


def read_batches(
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
