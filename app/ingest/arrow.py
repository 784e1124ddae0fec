"""The fast path of the encoder: Apache Arrow's CSV reader for files in canonical form.

Arrow's reader (C++, streaming, in blocks) parses a CSV several times faster than
Python's `csv`, and its compute functions encode whole columns at once. It is used only
where it is certain to give what `app.ingest.table` would: a header naming each of the
schema's attributes once (other columns are not read), categorical cells spelled exactly
as a schema value, integer cells of plain digits, numeric cells of plain decimals (only
digits, "-" and "." — "-12.5", "5.", ".5" — that Arrow's cast parses: it rounds them to
the same double as float()),
every value inside the schema (clipping as the attribute says). Anything else —
padding, "3.0", "1e3", a BOM Arrow keeps, a bad value, a ragged or malformed row, bytes
that are not UTF-8 — and the caller reads the file again with the exact path, which
encodes it or explains precisely what is wrong.
So the fast path decides nothing on its own: it only ever returns a table the exact
path would have returned, or None — or refuses a file over the byte limit, as the exact
path would, at the same byte.

The reader parses on the calling thread while a small pool of threads encodes the
batches already parsed (Arrow's compute functions and numpy release the GIL); at most
`_MAX_PENDING` parsed batches wait, so memory stays bounded whatever the file's size.
"""

from __future__ import annotations

import csv
import io
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO

import numpy as np

from app.ingest.columns import ColumnEncoder
from app.ingest.errors import IngestError
from app.ingest.packing import INGEST_THREADS
from app.ingest.reading import MAX_LINE_CHARS, CountingReader
from app.ingest.units import UnitIds
from app.schema import Attribute, DatasetSchema

try:  # an optional speed-up: without pyarrow every upload takes the exact path
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
except ImportError:  # pragma: no cover - pyarrow is a declared dependency
    pa = None

_BLOCK_BYTES = 1 << 22
_MAX_PENDING = 2 * INGEST_THREADS  # parsed batches waiting for (or in) an encoding thread
THREAD_NAME_PREFIX = "privq-ingest"
_DECIMAL_BYTES = b"0123456789.-"
# A longer stretch without a line break is no canonical file (nor a valid one).
_MAX_CARRY_BYTES = 4 * MAX_LINE_CHARS
_MAX_DECIMAL_BYTES = 62  # as long as "-" + 30 digits + "." + 30 digits


class _NotCanonical(Exception):
    """The file is not in the fast path's canonical form: read it with the exact path."""


def encode_canonical(
    stream: BinaryIO,
    schema: DatasetSchema,
    max_bytes: int | None,
    unit_ids: UnitIds | None = None,
    unit_column: str | None = None,
) -> tuple[int, dict[str, np.ndarray]] | None:
    """(rows, codes by attribute) if the whole file is canonical and valid, else None.

    With `unit_column`, the file also has that column (ids, none empty), gathered into
    `unit_ids`. Reads the stream from its current position; the caller rewinds it (and
    drops `unit_ids`) on None.
    """
    if pa is None:
        return None
    counting = CountingReader(stream, max_bytes)
    try:
        return _encode(
            io.BufferedReader(counting, buffer_size=_BLOCK_BYTES), schema, unit_ids, unit_column
        )
    except Exception:  # any doubt at all: the exact path decides
        if max_bytes is not None and counting.bytes_read > max_bytes:
            # Too large: reading stops here (one byte past the limit), not after a reread.
            raise IngestError(
                "too_large", f"the upload is larger than the limit of {max_bytes} bytes"
            ) from None
        return None
    finally:
        counting.close()


def _encode(
    source: io.BufferedReader,
    schema: DatasetSchema,
    unit_ids: UnitIds | None,
    unit_column: str | None,
) -> tuple[int, dict[str, np.ndarray]]:
    names = list(schema.names)
    file_names = names + ([unit_column] if unit_column is not None else [])
    texts = [text for a in schema.attributes for text in (a.name, *(a.values or ()))]
    texts += [m for a in schema.attributes if a.missing for m in a.missing_values]
    if any("\n" in text or "\r" in text for text in texts):
        # Then a cell or a name holding a line break could be valid; chunks could not
        # be parsed on their own (nor is such a file canonical).
        raise _NotCanonical("line breaks in the schema")
    chunks = _chunks(source)
    first = next(chunks, b"")
    header = _header(first)
    if any(header.count(name) != 1 for name in file_names):
        raise _NotCanonical("header")
    by_name = {a.name: a for a in schema.attributes}
    # Only the named columns are read, in `file_names` order; the unit column (None
    # here) is only gathered.
    columns = [_Column(by_name[name]) if name in by_name else None for name in file_names]
    parts: list[list[np.ndarray]] = [[] for _ in columns]
    table = _parse(first, header, file_names, skip_header=True)
    rows = _add(parts, unit_ids, *_encode_table(table, columns))
    del table
    pending: deque[Future[tuple[int, list[np.ndarray | None], Any]]] = deque()
    pool = ThreadPoolExecutor(INGEST_THREADS, thread_name_prefix=THREAD_NAME_PREFIX)
    try:
        for chunk in chunks:
            pending.append(pool.submit(_parse_and_encode, chunk, header, file_names, columns))
            if len(pending) >= _MAX_PENDING:
                rows += _add(parts, unit_ids, *pending.popleft().result())
        while pending:
            rows += _add(parts, unit_ids, *pending.popleft().result())
    finally:  # on a refusal, chunks not started are dropped; running ones end soon
        pool.shutdown(wait=True, cancel_futures=True)
    if rows == 0:
        raise _NotCanonical("no rows")
    return rows, {name: _joined(parts[position]) for position, name in enumerate(names)}


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _chunks(source: io.BufferedReader) -> Iterator[bytes]:
    """The stream in pieces of about `_BLOCK_BYTES`, each ending at a line break.

    A record never spans two pieces: one that holds a line break (in quotes) leaves a
    cell with a line break at the end of a piece, which no schema value, integer or
    decimal matches, so the fast path declines.
    """
    carry = b""
    while True:
        block = source.read(_BLOCK_BYTES)
        if not block:
            if carry:
                yield carry
            return
        data = carry + block if carry else block
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if cut == 0:
            if len(data) > _MAX_CARRY_BYTES:
                raise _NotCanonical("no line break")
            carry = data
            continue
        yield data[:cut]
        carry = data[cut:]


def _header(first: bytes) -> list[str]:
    """The column names on the file's first line (as Arrow reads them: not stripped)."""
    line = first.split(b"\n", 1)[0].removesuffix(b"\r").decode("utf-8")
    return next(csv.reader([line], strict=True))


def _parse(chunk: bytes, header: list[str], names: list[str], skip_header: bool = False) -> Any:
    """One piece of the file as an Arrow table of the columns `names` (in that order),
    read as strings; `header` names the file's columns, whose first line `skip_header`
    skips."""
    return pacsv.read_csv(
        pa.BufferReader(chunk),
        read_options=pacsv.ReadOptions(
            block_size=len(chunk) + 1,
            use_threads=False,
            column_names=header,
            skip_rows=1 if skip_header else 0,
        ),
        parse_options=pacsv.ParseOptions(newlines_in_values=False, ignore_empty_lines=True),
        convert_options=pacsv.ConvertOptions(
            column_types=dict.fromkeys(names, pa.string()),
            include_columns=names,
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )


def _parse_and_encode(
    chunk: bytes, header: list[str], names: list[str], columns: list[_Column | None]
) -> tuple[int, list[np.ndarray | None], Any]:
    table = _parse(chunk, header, names)
    return _encode_table(table, columns)


def _encode_table(
    table: Any, columns: list[_Column | None]
) -> tuple[int, list[np.ndarray | None], Any]:
    """(rows, codes of each attribute column or None, the unit ids or None)."""
    codes: list[np.ndarray | None] = []
    ids = None
    for i, column in enumerate(columns):
        if column is None:
            ids = pc.utf8_trim_whitespace(table.column(i))  # ids are stripped like cells
            if ids.null_count or (len(ids) and pc.min(pc.binary_length(ids)).as_py() == 0):
                raise _NotCanonical("an empty id")  # the exact path names the row
            codes.append(None)
        else:
            codes.append(column.encode(table.column(i)))
    return table.num_rows, codes, ids


def _add(
    parts: list[list[np.ndarray]],
    unit_ids: UnitIds | None,
    rows: int,
    codes: list[np.ndarray | None],
    ids: Any,
) -> int:
    for column_parts, column_codes in zip(parts, codes, strict=True):
        if column_codes is not None:
            column_parts.append(column_codes)
    if unit_ids is not None and ids is not None:
        for chunk in ids.chunks:
            unit_ids.add(chunk)
    return rows


class _Column:
    """How one file column's Arrow strings become codes (raising _NotCanonical on doubt)."""

    def __init__(self, attribute: Attribute) -> None:
        self.encoder = ColumnEncoder(attribute)
        self.kind = attribute.kind
        self.value_size = attribute.value_size
        self.missing = string_array(attribute.missing_values) if attribute.missing else None
        self.values = (
            string_array(attribute.values + (attribute.missing_values if attribute.missing else ()))
            if attribute.kind == "categorical" and attribute.values is not None
            else None
        )
        if attribute.kind == "numeric":
            edges = np.asarray(attribute.edges, dtype=np.float64)
            self.low, self.high = float(edges[0]), float(edges[-1])
            self.inner_edges = edges[1:-1]

    def encode(self, column: Any) -> np.ndarray:
        """Codes of a chunked column (one chunk per piece of the file, or none)."""
        parts = [self._encode_chunk(chunk) for chunk in column.chunks]
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.empty(0, self.encoder.dtype)

    def _encode_chunk(self, column: Any) -> np.ndarray:
        encoder = self.encoder
        if self.values is not None:
            found = pc.index_in(column, value_set=self.values)
            if found.null_count:
                raise _NotCanonical(encoder.attribute.name)
            # Found: every code is in 0..size-1 already.
            codes: np.ndarray = found.to_numpy(zero_copy_only=False)
            if self.missing is not None:
                # Every missing spelling is the one missing code (the last).
                codes = np.minimum(codes, self.value_size)
            return codes.astype(encoder.dtype)
        if self.missing is not None:
            is_missing = pc.is_in(column, value_set=self.missing)
            if is_missing.true_count:
                mask = is_missing.to_numpy(zero_copy_only=False)
                out = np.full(len(column), self.value_size, dtype=encoder.dtype)
                out[~mask] = self._encode_values(pc.filter(column, pc.invert(is_missing)))
                return out
        return self._encode_values(column)

    def _encode_values(self, column: Any) -> np.ndarray:
        encoder = self.encoder
        if self.kind == "numeric":
            _require_plain_decimals(column)
            return self._bin(pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False))
        # Arrow's integer cast accepts a sign and digits only (else it raises), a subset
        # of what int() accepts, with the same value.
        codes = encoder.integer_codes(
            pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False).copy()
        )
        if codes.size and codes.min() < 0:
            raise _NotCanonical(encoder.attribute.name)
        return codes.astype(encoder.dtype)

    def _bin(self, x: np.ndarray) -> np.ndarray:
        """`ColumnEncoder.bin_numbers` for numbers without NaN, in fewer passes.

        Searching the inner edges puts e_k in the last bin, and clamps what lies
        outside [e_0, e_k] into the first or last bin (clip); without clip, such a
        number is refused.
        """
        attribute = self.encoder.attribute
        edges = self.inner_edges
        if x.size and not attribute.clip and (x.min() < self.low or x.max() > self.high):
            raise _NotCanonical(attribute.name)
        return np.searchsorted(edges, x, side="right").astype(self.encoder.dtype)


def string_array(values: tuple[str, ...]) -> Any:
    """An Arrow string array of `values`, built from buffers (pa.array imports pandas,
    which the app never does)."""
    encoded = [value.encode("utf-8") for value in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(value) for value in encoded], out=offsets[1:])
    return pa.StringArray.from_buffers(
        len(encoded), pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(encoded))
    )


def _require_plain_decimals(column: Any) -> None:
    """Every cell 1 to 62 bytes of digits, "-" and "." (Arrow's cast then checks the form).

    Read straight from the array's buffers: several times cheaper than a regex per cell.
    """
    if column.type != pa.string():
        raise _NotCanonical("not a string column")
    _, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(
        offsets_buffer, dtype=np.int32, count=len(column) + 1, offset=4 * column.offset
    )
    lengths = np.diff(offsets)
    if lengths.size and (lengths.min() < 1 or lengths.max() > _MAX_DECIMAL_BYTES):
        raise _NotCanonical("cell length")
    start, end = int(offsets[0]), int(offsets[-1])
    text = bytes(memoryview(data_buffer)[start:end]) if data_buffer is not None else b""
    if text.translate(None, _DECIMAL_BYTES):
        raise _NotCanonical("not a plain decimal")
