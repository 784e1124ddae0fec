"""The registration scan: every row of a source against the schema, refused as an upload is.

First every file is opened (its size checked against the fingerprint) and its columns
checked: a file that is not Parquet (``bad_parquet``), a schema attribute or the unit's
id column in neither the file nor a partition folder (``bad_header``), an id column
that is nested or whose type differs between files (``bad_privacy_unit``). Columns the
schema does not name are ignored. Then one scan encodes every value as a count would;
values outside the schema are counted over the whole source, per column, and the
refusal (``value_out_of_schema``) names the column whose first bad value comes first,
how many rows of the source it has outside the schema, and up to `EXAMPLES` of them: the
row's 1-based number across the source's files in order and the value quoted as an
upload quotes it (the curator's eyes only). Rows without a unit id (null, NaN, empty
text) are refused alike (``missing_unit_id``), by row numbers only: ids are never
quoted. No rows at all is ``empty_file``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from app.ingest import IngestError
from app.records.counting import Mapper
from app.records.encoding import ColumnCodes, is_nested, unit_ids
from app.records.engine import UnitCap, Validation
from app.records.prefetch import read_ahead
from app.records.reading import OpenedFile, SourceFileUnreadable, SourceReader
from app.schema import DatasetSchema

EXAMPLES = 5


@dataclass
class _Violations:
    """One column's rows outside the schema: how many, and the first few."""

    rows: int = 0
    examples: list[tuple[int, str]] = field(default_factory=list)

    def first(self) -> int:
        return self.examples[0][0]


def validate_source(
    reader: SourceReader, schema: DatasetSchema, unit: UnitCap | None, mapper: Mapper
) -> Validation:
    if not reader.source.files:
        raise IngestError("empty_file", "the source has no Parquet files")
    columns = list(schema.names) + ([unit.column] if unit is not None else [])
    _check_files(reader, columns, unit.column if unit is not None else None)
    encoders = {a.name: ColumnCodes(a) for a in schema.attributes}
    bad: dict[str, _Violations] = {}
    no_id = _Violations()
    rows = 0
    try:
        for batch in read_ahead(reader.batches(columns)):
            arrays = batch.columns
            names = list(encoders)
            encoded = mapper(_encoding(encoders, arrays), names)
            for name, codes in zip(names, encoded, strict=True):
                wrong = np.flatnonzero(codes < 0)
                if wrong.size:
                    found = bad.setdefault(name, _Violations())
                    found.rows += int(wrong.size)
                    for row in wrong[: EXAMPLES - len(found.examples)].tolist():
                        why = encoders[name].explain(batch.columns[name], row)
                        found.examples.append((batch.first_row + row + 1, why))
            if unit is not None:
                _, absent = unit_ids(batch.columns[unit.column])
                missing = np.flatnonzero(absent)
                no_id.rows += int(missing.size)
                for row in missing[: EXAMPLES - len(no_id.examples)].tolist():
                    no_id.examples.append((batch.first_row + row + 1, ""))
            rows += batch.rows
    except SourceFileUnreadable as error:
        raise _not_parquet(reader, error.file) from None
    except (pa.ArrowException, OSError):
        raise IngestError("bad_parquet", f"the source could not be read after row {rows}") from None
    if rows == 0:
        raise IngestError("empty_file", "the source's Parquet files have no rows")
    _refuse(bad, no_id, unit)
    return Validation(rows=rows)


def _encoding(encoders: dict[str, ColumnCodes], arrays: dict[str, Any]) -> Any:
    """The function that encodes one named column of this batch."""

    def encode(name: str) -> np.ndarray:
        return encoders[name].encode(arrays[name])

    return encode


def _check_files(reader: SourceReader, columns: list[str], unit_column: str | None) -> None:
    """Every file opens as Parquet and has every column; the id column is one plain type."""
    id_types: dict[str, Any] = {}
    for file in reader.source.files:
        try:
            opened = reader.open(file)
        except SourceFileUnreadable:
            raise _not_parquet(reader, file) from None
        missing = [c for c in columns if not opened.has(c)]
        if missing:
            raise IngestError(
                "bad_header",
                f"the source's file {reader.relative(file)!r} has no column(s) "
                f"{', '.join(map(repr, missing))}",
                {"missing": missing, "file": reader.relative(file)},
            )
        if unit_column is not None:
            id_types[reader.relative(file)] = _id_type(opened, unit_column)
    kinds = {_id_kind(t) for t in id_types.values()}
    if len(kinds) > 1:
        shown = "; ".join(f"{path!r}: {t}" for path, t in list(id_types.items())[:EXAMPLES])
        raise IngestError(
            "bad_privacy_unit",
            f"the privacy unit column {unit_column!r} has different types in the source's "
            f"files ({shown}); ids must have one type",
            {"column": unit_column},
        )


def _id_type(opened: OpenedFile, column: str) -> Any:
    data_type = opened.type_of(column)
    if is_nested(data_type):
        raise IngestError(
            "bad_privacy_unit",
            f"the privacy unit column {column!r} has Parquet type {data_type}; an id must be "
            "a single value (text, an integer, …), not a list, struct or map",
            {"column": column},
        )
    return data_type


def _id_kind(data_type: Any) -> str:
    """Types whose ids compare after normalisation (text with text, integers with
    integers, …)."""
    if pa.types.is_dictionary(data_type):
        data_type = data_type.value_type
    for kind, test in (
        ("text", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
        ("bytes", lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t)),
        ("integer", pa.types.is_integer),
        ("floating", pa.types.is_floating),
    ):
        if test(data_type):
            return kind
    return str(data_type)


def _not_parquet(reader: SourceReader, file: Any) -> IngestError:
    return IngestError(
        "bad_parquet",
        f"the source's file {reader.relative(file)!r} is not a valid Parquet file",
        {"file": reader.relative(file)},
    )


def _refuse(bad: dict[str, _Violations], no_id: _Violations, unit: UnitCap | None) -> None:
    """Raise for the violation met first in the source (values before a missing id on
    the same row, as an upload reports them), naming how many rows and a few of them."""
    first_column = min(bad, key=lambda name: bad[name].first(), default=None)
    id_first = no_id.rows and (first_column is None or no_id.first() < bad[first_column].first())
    if id_first and unit is not None:
        shown = [row for row, _ in no_id.examples]
        raise IngestError(
            "missing_unit_id",
            f"the privacy unit column {unit.column!r} has no id on {no_id.rows} row(s) "
            f"of the source (rows {', '.join(map(str, shown))}"
            f"{', …' if no_id.rows > len(shown) else ''}); every row must name its unit",
            {"column": unit.column, "rows": no_id.rows, "examples": shown},
        )
    if first_column is None:
        return
    found = bad[first_column]
    examples = "; ".join(f"row {row}: {why}" for row, why in found.examples)
    others = [f"{name!r} ({v.rows} rows)" for name, v in bad.items() if name != first_column]
    also = f"; other columns with values outside the schema: {', '.join(others)}" if others else ""
    raise IngestError(
        "value_out_of_schema",
        f"column {first_column!r} has values outside the schema on {found.rows} row(s) of "
        f"the source; {examples}{also}",
        {
            "column": first_column,
            "rows": found.rows,
            "examples": [row for row, _ in found.examples],
            "columns": {name: v.rows for name, v in bad.items()},
        },
    )
