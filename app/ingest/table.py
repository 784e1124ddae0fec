"""The encoder: a CSV stream → an `EncodedTable` of code arrays, or the first refusal.

A rewindable stream is first tried on the fast path (`app.ingest.arrow`: Arrow's CSV
reader, for files in canonical form); if that declines, or otherwise, records are read
in batches (`app.ingest.reading`) and each column is encoded as a whole
(`app.ingest.columns`). The first bad cell in file order decides the refusal;
further bad lines of the same column are collected (up to `MAX_REPORTED_LINES`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from app.ingest.arrow import encode_canonical
from app.ingest.columns import ColumnEncoder
from app.ingest.errors import MAX_REPORTED_LINES, IngestError, has_undecodable_bytes
from app.ingest.fractions import binned_names, csv_fractions
from app.ingest.reading import csv_records, read_batches, read_header
from app.ingest.units import PrivacyUnit, UnitIds, keep_at_most, null_ids
from app.schema import DatasetSchema

# Rows per vectorised step. Small batches keep the freshly parsed strings in the CPU
# cache while they are transposed and encoded; 64k-row batches measured ~3x slower.
DEFAULT_CHUNK_ROWS = 2048


@dataclass
class EncodedTable:
    """The encoded dataset: row count and one code array per attribute, schema order;
    `fractions`: each binned attribute's rows' places within their bins
    (`app.ingest.fractions`), absent when the stream could not be read twice."""

    rows: int
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    fractions: dict[str, np.ndarray] = field(default_factory=dict)


class _UnitCells:
    """The privacy unit's id column on the exact path: checked (an empty id is -1) and
    gathered, never quoted."""

    def __init__(self, column: str, ids: UnitIds) -> None:
        self.name = column
        self.ids = ids

    def encode(self, cells: tuple[str, ...]) -> np.ndarray:
        stripped = tuple(cell.strip() for cell in cells)
        return np.fromiter((0 if cell else -1 for cell in stripped), np.int64, len(cells))

    def gather(self, cells: tuple[str, ...]) -> None:
        self.ids.add_texts(tuple(cell.strip() for cell in cells))


@dataclass
class _Offence:
    """The first offending column and the lines found so far."""

    file_column: int
    encoder: ColumnEncoder | _UnitCells
    first_cell: str
    lines: list[int] = field(default_factory=list)


def encode_csv(
    stream: BinaryIO,
    schema: DatasetSchema,
    *,
    max_bytes: int | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    unit: PrivacyUnit | None = None,
) -> EncodedTable:
    """Read a CSV (with header) from a binary stream and encode it by `schema`.

    Reads incrementally and keeps only the code arrays (one unsigned array per
    attribute, the smallest dtype that fits). With `unit`, the file also has the id
    column `unit.column`; each unit keeps at most `unit.max_rows` rows, chosen at
    random (`app.ingest.units`), and the ids are dropped. Raises `IngestError`; the
    stream is left open.
    """
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be at least 1")
    unit_column = unit.column if unit is not None else None
    start = stream.tell() if _rewindable(stream) else None
    if start is not None:
        ids = UnitIds()
        fast = encode_canonical(stream, schema, max_bytes, ids, unit_column)
        if fast is not None:
            rows, codes = fast
            table = EncodedTable(
                rows=rows, columns={a.name: codes[a.name] for a in schema.attributes}
            )
            _add_fractions(table, stream, start, schema, max_bytes, unit_column)
            return truncate_units(table, ids, unit)
        del ids
        stream.seek(start)  # not canonical (or not valid): the exact path decides
    ids = UnitIds()
    with csv_records(stream, max_bytes) as reader:
        file_columns, n_fields = read_header(reader, schema, unit_column)
        unit_cells = _UnitCells(unit_column, ids) if unit_column is not None else None
        table = _encode_rows(reader, schema, file_columns, n_fields, chunk_rows, unit_cells)
    if start is not None:
        _add_fractions(table, stream, start, schema, max_bytes, unit_column)
    return truncate_units(table, ids, unit)


def _add_fractions(
    table: EncodedTable,
    stream: BinaryIO,
    start: int,
    schema: DatasetSchema,
    max_bytes: int | None,
    unit_column: str | None,
) -> None:
    """Read the binned attributes' places within their bins in a second pass."""
    if not binned_names(schema):
        return
    stream.seek(start)
    table.fractions = csv_fractions(
        stream, schema, table.columns, max_bytes=max_bytes, unit_column=unit_column
    )


def truncate_units(table: EncodedTable, ids: UnitIds, unit: PrivacyUnit | None) -> EncodedTable:
    """The table with at most `unit.max_rows` rows per unit (random ones), ids dropped."""
    if unit is None:
        return table
    keep = keep_at_most(ids.groups(), unit.max_rows)
    if keep is None:
        return table
    return EncodedTable(
        rows=int(keep.sum()),
        columns={name: codes[keep] for name, codes in table.columns.items()},
        fractions={name: part[keep] for name, part in table.fractions.items()},
    )


def _rewindable(stream: BinaryIO) -> bool:
    try:
        return bool(stream.seekable())
    except (AttributeError, OSError, ValueError):
        return False


def _encode_rows(
    reader: Any,
    schema: DatasetSchema,
    file_columns: list[int],
    n_fields: int,
    chunk_rows: int,
    unit_cells: _UnitCells | None = None,
) -> EncodedTable:
    encoders: list[ColumnEncoder | _UnitCells] = [ColumnEncoder(a) for a in schema.attributes]
    if unit_cells is not None:
        encoders.append(unit_cells)  # its file column is the last of file_columns
    parts: list[list[np.ndarray]] = [[] for _ in encoders]
    total_rows = 0
    offence: _Offence | None = None
    pending: IngestError | None = None

    rows: list[list[str]] = []
    # starts[i] + 1 is the line where row i begins (a quoted field may span lines).
    starts: list[int] = []
    batches = read_batches(reader, rows, starts, n_fields, chunk_rows)
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
                    if unit_cells is not None:
                        unit_cells.gather(columns[file_columns[-1]])
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
        for attribute, column_parts in zip(schema.attributes, parts, strict=False)
    }
    return EncodedTable(rows=total_rows, columns=columns_out)


def _encode_batch(
    columns: list[tuple[str, ...]],
    starts: list[int],
    encoders: list[ColumnEncoder | _UnitCells],
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
        for column_parts, encoder, codes in zip(parts, encoders, encoded, strict=False):
            if isinstance(encoder, ColumnEncoder):
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
    first_line = offence.lines[0]
    encoder = offence.encoder
    if isinstance(encoder, _UnitCells):
        return null_ids(encoder.name, list(offence.lines))
    name = encoder.attribute.name
    if has_undecodable_bytes(offence.first_cell):
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
        f"on line {first_line}: {encoder.explain(offence.first_cell)}",
        {"column": name, "lines": list(offence.lines)},
    )
