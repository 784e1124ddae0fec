"""Parquet uploads: a curator's Parquet file, read batch by batch, encoded into codes.

The file is read in record batches (at most `BATCH_ROWS` rows, within one row group),
so memory is the code arrays plus one batch, as for a CSV. Only the schema's
attributes (and the privacy unit's id column) are read; every other column of the file
is refused, as in a CSV (``bad_header``).

Cells by the attribute's kind (a null is the missing code when the attribute has
``missing``, and is refused otherwise; NaN in a floating column counts as a null):
- categorical: strings (or dictionary-encoded strings) equal to a schema value after
  stripping, or to one of ``missing_values``; other types (integers, booleans) are
  compared by their text ("1", "true").
- numeric: any number type, or strings that parse as decimals; binned as in a CSV.
- integer: integer types, floats with an integral value, or strings of digits.
Refusals name the column and the 1-based rows (up to 10, in the first batch with a
bad value; the leftmost column among the earliest bad row), like a CSV's lines, and
quote at most the first bad cell, truncated as a CSV's is.
The privacy unit's id column (`_unit_ids`): text and bytes stripped, an empty text or
byte string, a null or a NaN is no id; text and bytes compare in one canonical spelling
(`app.ingest.unit_ids`); floating ids compare as numbers (-0.0 is 0.0); a nested
column (lists, structs, maps) is refused before any row is read.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

import numpy as np

from app.ingest.arrow import string_array
from app.ingest.columns import ColumnEncoder
from app.ingest.errors import (
    MAX_REPORTED_LINES,
    QUOTED_CELL_CHARS,
    IngestError,
    check_column_names,
    quote_cell,
)
from app.ingest.packing import INGEST_THREADS
from app.ingest.unit_ids import canonical_ids
from app.ingest.units import PrivacyUnit, UnitIds, null_ids
from app.schema import Attribute, DatasetSchema
from app.schema.rules import quote

try:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
except ImportError:  # pragma: no cover - pyarrow is a declared dependency
    pa = None

PARQUET_MAGIC = b"PAR1"
PARQUET_CONTENT_TYPE = "application/vnd.apache.parquet"
BATCH_ROWS = 16_384
# Column chunks are read through buffers of this size, not whole (pre_buffer off).
READ_BUFFER_BYTES = 1 << 20
THREAD_NAME_PREFIX = "privq-parquet"


def looks_like_parquet(stream: BinaryIO, content_type: str | None) -> bool:
    """Parquet by its Content-Type, or by its first four bytes (rewound) when seekable."""
    if content_type is not None and content_type.split(";")[0].strip().lower() in (
        PARQUET_CONTENT_TYPE,
        "application/x-parquet",
    ):
        return True
    try:
        if not stream.seekable():
            return False
        start = stream.tell()
        head = stream.read(len(PARQUET_MAGIC))
        stream.seek(start)
    except (AttributeError, OSError, ValueError):
        return False
    return head == PARQUET_MAGIC


def encode_parquet(
    stream: BinaryIO,
    schema: DatasetSchema,
    *,
    max_bytes: int | None = None,
    unit: PrivacyUnit | None = None,
    ids: UnitIds | None = None,
) -> tuple[int, dict[str, np.ndarray]]:
    """(rows, codes by attribute) of a Parquet file; `ids` gathers the unit's ids."""
    if pa is None:  # pragma: no cover
        raise IngestError("bad_parquet", "this server cannot read Parquet (no pyarrow)")
    _check_size(stream, max_bytes)
    try:
        parquet = pq.ParquetFile(stream, pre_buffer=False, buffer_size=READ_BUFFER_BYTES)
    except Exception:  # the reader's message could quote the file's bytes
        raise IngestError("bad_parquet", "the file is not a valid Parquet file") from None
    unit_column = unit.column if unit is not None else None
    _check_columns(parquet.schema_arrow.names, schema, unit_column)
    if unit_column is not None:
        _check_id_type(unit_column, parquet.schema_arrow.field(unit_column).type)
    if parquet.metadata.num_rows == 0:
        raise IngestError("empty_file", "the Parquet file has no rows")
    columns = [ParquetColumn(a) for a in schema.attributes]
    parts: list[list[np.ndarray]] = [[] for _ in columns]
    wanted = list(schema.names) + ([unit_column] if unit_column is not None else [])
    rows = 0
    pool = ThreadPoolExecutor(INGEST_THREADS, thread_name_prefix=THREAD_NAME_PREFIX)
    try:
        batches = parquet.iter_batches(batch_size=BATCH_ROWS, columns=wanted, use_threads=True)
        for batch in batches:
            _encode_batch(pool, batch, columns, parts, rows, unit_column, ids)
            rows += batch.num_rows
    except IngestError:
        raise
    except Exception:
        raise IngestError(
            "bad_parquet", f"the Parquet file could not be read after row {rows}"
        ) from None
    finally:
        pool.shutdown(wait=True)
        # Hand the batches' buffers back now, not while the codes are packed and stored.
        pa.default_memory_pool().release_unused()
    if rows == 0:
        raise IngestError("empty_file", "the Parquet file has no rows")
    return rows, {
        a.name: (p[0] if len(p) == 1 else np.concatenate(p))
        for a, p in zip(schema.attributes, parts, strict=True)
    }


def _check_size(stream: BinaryIO, max_bytes: int | None) -> None:
    if max_bytes is None:
        return
    start = stream.tell()
    size = stream.seek(0, 2) - start
    stream.seek(start)
    if size > max_bytes:
        raise IngestError("too_large", f"the upload is larger than the limit of {max_bytes} bytes")


def _check_columns(names: list[str], schema: DatasetSchema, unit_column: str | None) -> None:
    wanted = list(schema.names) + ([unit_column] if unit_column is not None else [])
    check_column_names(names, wanted, "the Parquet columns")


def _encode_batch(
    pool: ThreadPoolExecutor,
    batch: Any,
    columns: list[ParquetColumn],
    parts: list[list[np.ndarray]],
    rows_before: int,
    unit_column: str | None,
    ids: UnitIds | None,
) -> None:
    # Arrow's compute functions and numpy release the GIL: columns encode side by side.
    encoded = list(pool.map(lambda c: c.encode(batch.column(c.attribute.name)), columns))
    first_bad: tuple[int, int] | None = None  # (row in batch, column index)
    for index, codes in enumerate(encoded):
        if codes.size and codes.min() < 0:
            candidate = (int(np.argmax(codes < 0)), index)
            if first_bad is None or candidate < first_bad:
                first_bad = candidate
    if unit_column is not None:
        unit_ids, absent = _unit_ids(batch.column(unit_column))
        if absent.true_count:
            nulls = np.flatnonzero(absent.to_numpy(zero_copy_only=False))
            row = int(nulls[0])
            if first_bad is None or row <= first_bad[0]:
                shown = [rows_before + int(r) + 1 for r in nulls[:MAX_REPORTED_LINES]]
                raise null_ids(unit_column, shown, unit="row")
        elif ids is not None:
            ids.add(unit_ids)
    if first_bad is not None:
        row, index = first_bad
        column = columns[index]
        bad = np.flatnonzero(encoded[index] < 0)[:MAX_REPORTED_LINES]
        shown = [rows_before + int(r) + 1 for r in bad]
        listed = ", ".join(map(str, shown))
        more = " (the first 10)" if len(shown) >= MAX_REPORTED_LINES else ""
        name = column.attribute.name
        why = column.explain(batch.column(name), row)
        raise IngestError(
            "value_out_of_schema",
            f"column {name!r} has values outside the schema on row(s) {listed}{more}; "
            f"on row {shown[0]}: {why}",
            {"column": name, "rows": shown},
        )
    for column_parts, column, codes in zip(parts, columns, encoded, strict=True):
        column_parts.append(codes.astype(column.encoder.dtype, copy=False))


def _check_id_type(column: str, data_type: Any) -> None:
    """Ids are single values (text, bytes, numbers, dates, …): a nested column (lists,
    structs, maps, unions) names no unit, and is refused before anything is read."""
    if pa.types.is_dictionary(data_type):
        data_type = data_type.value_type
    if pa.types.is_nested(data_type) or pa.types.is_union(data_type):
        raise IngestError(
            "bad_privacy_unit",
            f"the privacy unit column {column!r} has Parquet type {data_type}; an id must be "
            "a single value (text, an integer, …), not a list, struct or map",
            {"column": column},
        )


def _unit_ids(column: Any) -> tuple[Any, Any]:
    """(the ids of one batch as the units group them, where a row has no id).

    Text ids are stripped like cells, byte strings too (`app.ingest.unit_ids`: b"a " is
    b"a"), and an empty one is no id; a NaN is none either; a float -0.0 is the same id
    as 0.0 (equal numbers, one unit). `UnitIds.add` puts text and bytes in their one
    canonical spelling (NFC, one form per number).
    """
    ids = _plain(column)
    data_type = ids.type
    absent = ids.is_null(nan_is_null=pa.types.is_floating(data_type))
    if _is_text(data_type):
        ids = pc.utf8_trim_whitespace(ids)
    elif pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type):
        ids = canonical_ids(ids)
    if _is_text(data_type) or pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type):
        empty = pc.fill_null(pc.equal(pc.binary_length(ids), 0), False)
        absent = pc.or_(absent, empty)
    elif pa.types.is_floating(data_type):
        ids = pc.add(pc.cast(ids, pa.float64()), pa.scalar(0.0))  # -0.0 + 0.0 is +0.0
    return ids, absent


class ParquetColumn:
    """How one Parquet column (an Arrow array of any type) becomes an attribute's codes;
    -1 marks a value outside the schema."""

    def __init__(self, attribute: Attribute) -> None:
        self.attribute = attribute
        self.encoder = ColumnEncoder(attribute)
        self.missing_code = attribute.value_size
        self.missing_texts = string_array(attribute.missing_values) if attribute.missing else None
        if attribute.kind == "categorical":
            self.values = string_array(attribute.categories)

    def encode(self, array: Any) -> np.ndarray:
        array = _plain(array)
        is_null = _nulls(array)
        try:
            codes = self._encode_values(array)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            raise IngestError(
                "bad_parquet",
                f"column {self.attribute.name!r} has Parquet type {array.type}, which the "
                f"{self.attribute.kind} attribute cannot read",
                {"column": self.attribute.name},
            ) from None
        if is_null is not None:
            codes[is_null] = self.missing_code if self.attribute.missing else -1
        return codes

    def numbers(self, array: Any) -> np.ndarray:
        """`column_numbers`: for the places within the bins beside `encode`'s codes."""
        return column_numbers(array)

    def _encode_values(self, array: Any) -> np.ndarray:
        kind = self.attribute.kind
        if kind == "categorical":
            text = array if _is_text(array.type) else pc.cast(array, pa.string())
            codes, misses = self._categories(text)
            if misses:  # a cell matched no value: strip every cell, as a CSV's are
                text = pc.utf8_trim_whitespace(text)
                codes, misses = self._categories(text)
                if misses:
                    self._mark_missing(text, codes)
            return codes
        if _is_text(array.type):
            text = pc.utf8_trim_whitespace(array)
            numbers = _texts_to_floats(text)
            codes = (
                self.encoder.bin_numbers(numbers) if kind == "numeric" else self._integers(numbers)
            )
            self._mark_missing(text, codes)
            return codes
        if kind == "integer" and pa.types.is_integer(array.type):
            # A null reads as 0 here; the caller gives it the missing code (or refuses it).
            filled = pc.fill_null(array, 0) if array.null_count else array
            values = pc.cast(filled, pa.int64()).to_numpy(zero_copy_only=False).copy()
            return self.encoder.integer_codes(values)
        numbers = _floats(array)
        if kind == "numeric":
            return self.encoder.bin_numbers(numbers)
        return self._integers(numbers)

    def _categories(self, text: Any) -> tuple[np.ndarray, int]:
        """Codes of the cells spelled as a value (-1 elsewhere), and how many cells that
        are not null matched none."""
        found = pc.index_in(text, value_set=self.values)
        misses = found.null_count - text.null_count
        if found.null_count:
            found = pc.fill_null(found, -1)
        return found.to_numpy(zero_copy_only=False).astype(np.int64), misses

    def _mark_missing(self, text: Any, codes: np.ndarray) -> None:
        """Give the cells spelled as a missing value (stripped) the missing code."""
        if self.missing_texts is None:
            return
        is_missing = pc.fill_null(pc.is_in(text, value_set=self.missing_texts), False)
        if is_missing.true_count:
            codes[is_missing.to_numpy(zero_copy_only=False)] = self.missing_code

    def _integers(self, numbers: np.ndarray) -> np.ndarray:
        whole = np.isfinite(numbers) & (numbers == np.round(numbers))
        values = np.where(whole, np.clip(numbers, -(2.0**62), 2.0**62), 0).astype(np.int64)
        codes = self.encoder.integer_codes(values)
        codes[~whole] = -1
        return codes

    def explain(self, array: Any, row: int) -> str:
        value = _plain(array)[row]
        if not value.is_valid:
            return (
                'a null (with "missing": true the attribute takes missing values)'
                if not self.attribute.missing
                else "a null"
            )
        python_value = value.as_py()
        if isinstance(python_value, float) and np.isnan(python_value):
            return 'NaN (with "missing": true it is a missing value)'
        if isinstance(python_value, bytes):
            return "bytes that are not text"
        text = str(python_value)
        if isinstance(python_value, str):
            return self.encoder.explain(text)  # quoted as a CSV's cell is: truncated
        # A number is shown as a number (not quoted), as short as a quoted cell.
        return self.encoder.explain(text).replace(
            quote_cell(text) or "a value", quote(text, QUOTED_CELL_CHARS)[1:-1], 1
        )


def column_numbers(array: Any) -> np.ndarray:
    """A numeric or integer column's values as float64, NaN where a row has none (a null,
    or a cell that is no number: a missing value's spelling), as an upload reads them;
    for the places within the bins (`app.ingest.fractions`)."""
    array = _plain(array)
    if _is_text(array.type):
        return _texts_to_floats(pc.utf8_trim_whitespace(array))
    return np.array(_floats(array), dtype=np.float64)


def _plain(array: Any) -> Any:
    """A dictionary-encoded column as its values; a chunked one as one array."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


def _is_text(data_type: Any) -> bool:
    return bool(pa.types.is_string(data_type) or pa.types.is_large_string(data_type))


def _nulls(array: Any) -> np.ndarray | None:
    """Where the column has no value: nulls, and NaN in a floating column."""
    is_null = array.is_null(nan_is_null=pa.types.is_floating(array.type))
    if not is_null.true_count:
        return None
    mask: np.ndarray = is_null.to_numpy(zero_copy_only=False)
    return mask


def _floats(array: Any) -> np.ndarray:
    """A number column as float64 (read-only, NaN where null; the caller codes the nulls):
    nulls filled in Arrow first, so numpy views the values without a conversion pass."""
    numbers = pc.cast(array, pa.float64())
    if numbers.null_count:
        numbers = pc.fill_null(numbers, np.nan)
    values: np.ndarray = numbers.to_numpy(zero_copy_only=False)
    return values


def _texts_to_floats(text: Any) -> np.ndarray:
    """Numbers of text cells; NaN where a cell is no number (or null)."""
    try:
        numbers: np.ndarray = pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False).copy()
        return numbers
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        cells = text.to_pylist()
        return np.fromiter((_float_or_nan(cell) for cell in cells), np.float64, len(cells))


def _float_or_nan(cell: str | None) -> float:
    if cell is None:
        return float("nan")
    try:
        return float(cell)
    except ValueError:
        return float("nan")
