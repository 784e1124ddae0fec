"""The private part an upload keeps beside its codes: each row's place within its bin.

A stored dataset keeps codes only, and a code says nothing of where in its bin a value
lay. So that within-bin means can be measured later, the upload also keeps, for every
binned attribute (`app.schema.within_bins`), each row's fraction within its bin on the
public grid (1/2¹⁶ steps), in the same row order as the codes and cut by the same
privacy-unit cap. They are raw records like the codes: stored in `dataset_columns`
under the name `FRACTION_PREFIX + attribute` (a name no attribute can have: attribute
names hold no ":"), read only through the gate, destroyed by a purge or a delete.

They are read in a second pass over the upload, after the codes' encoders have checked
every cell (so every number parses here): the encoders stay as fast as they are, and a
schema without binned attributes costs nothing more. A CSV is read again by Arrow's
reader (the binned columns only, as text, parsed as Python's `float` parses them); if
Arrow reads it otherwise than into the same rows (a header or a row it splits in
another way), by the exact path's reader, slower and certain.
"""

from __future__ import annotations

from typing import Any, BinaryIO

import numpy as np

from app.ingest.columns import float_or_nan
from app.ingest.reading import csv_records, read_header
from app.schema import DatasetSchema
from app.schema.within_bins import is_binned, quantized_fractions

FRACTION_PREFIX = "fraction:"


def fraction_column(attribute_name: str) -> str:
    """The stored name of an attribute's fractions."""
    return FRACTION_PREFIX + attribute_name


def binned_names(schema: DatasetSchema) -> list[str]:
    """The schema's binned attributes, whose fractions an upload keeps."""
    return [a.name for a in schema.attributes if is_binned(a)]


def csv_fractions(
    stream: BinaryIO,
    schema: DatasetSchema,
    codes: dict[str, np.ndarray],
    *,
    max_bytes: int | None,
    unit_column: str | None,
) -> dict[str, np.ndarray]:
    """The binned attributes' fractions of a CSV whose codes are `codes` (read from the
    stream's current position, which the caller rewound to where the codes were read)."""
    names = binned_names(schema)
    if not names:
        return {}
    rows = len(codes[names[0]])
    start = stream.tell()
    fractions = _arrow_fractions(stream, schema, names, codes, rows)
    if fractions is not None:
        return fractions
    stream.seek(start)  # Arrow read it otherwise: the exact reader decides
    numbers = _exact_numbers(stream, schema, names, max_bytes, unit_column)
    return {
        name: quantized_fractions(schema.attribute(name), numbers[name], codes[name])
        for name in names
    }


def _arrow_fractions(
    stream: BinaryIO,
    schema: DatasetSchema,
    names: list[str],
    codes: dict[str, np.ndarray],
    rows: int,
) -> dict[str, np.ndarray] | None:
    """The columns' fractions by Arrow's CSV reader, batch by batch (the numbers parsed as
    Python's float parses them; memory a batch's numbers and the fractions), or None if
    Arrow does not read the file into exactly `rows` rows with these columns."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    out = {name: np.zeros(rows, dtype=np.uint32) for name in names}
    read = 0
    try:
        reader = pacsv.open_csv(
            stream,
            parse_options=pacsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(
                include_columns=names,
                column_types=dict.fromkeys(names, pa.string()),
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
        if reader.schema.names != names:
            return None
        for batch in reader:
            if read + batch.num_rows > rows:
                return None
            _fill(out, schema, names, codes, batch, read)
            read += batch.num_rows
    except (pa.ArrowException, ValueError, UnicodeDecodeError):
        return None
    return out if read == rows else None


def _fill(
    out: dict[str, np.ndarray],
    schema: DatasetSchema,
    names: list[str],
    codes: dict[str, np.ndarray],
    batch: Any,
    start: int,
) -> None:
    """One batch's fractions into `out` at rows start… (the codes of the same rows)."""
    from app.ingest.parquet import column_numbers

    end = start + batch.num_rows
    for name in names:
        numbers = column_numbers(batch.column(name))
        out[name][start:end] = quantized_fractions(
            schema.attribute(name), numbers, codes[name][start:end]
        )


def _exact_numbers(
    stream: BinaryIO,
    schema: DatasetSchema,
    names: list[str],
    max_bytes: int | None,
    unit_column: str | None,
) -> dict[str, np.ndarray]:
    """The columns' numbers by the exact path's CSV reader (Python's csv module)."""
    values: dict[str, list[float]] = {name: [] for name in names}
    with csv_records(stream, max_bytes) as reader:
        positions, _fields = read_header(reader, schema, unit_column)
        index = {a.name: positions[i] for i, a in enumerate(schema.attributes)}
        wanted = [(values[name].append, index[name]) for name in names]
        for row in reader:
            if not row:
                continue
            for append, column in wanted:
                append(float_or_nan(row[column]))
    return {name: np.asarray(values[name], dtype=np.float64) for name in names}


def parquet_fractions(
    stream: BinaryIO, schema: DatasetSchema, codes: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The binned attributes' fractions of a Parquet file whose codes are `codes`."""
    import pyarrow.parquet as pq

    names = binned_names(schema)
    if not names:
        return {}
    stream.seek(0)
    rows = len(codes[names[0]])
    out = {name: np.zeros(rows, dtype=np.uint32) for name in names}
    read = 0
    # Batch by batch, in the file's row order (the codes' order): memory a batch's.
    for batch in pq.ParquetFile(stream).iter_batches(columns=names):
        _fill(out, schema, names, codes, batch, read)
        read += batch.num_rows
    return out
