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
schema without binned attributes costs nothing more.
"""

from __future__ import annotations

from typing import BinaryIO

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
    by_name = {a.name: a for a in schema.attributes}
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
    out = {}
    for name in names:
        x = np.asarray(values.pop(name), dtype=np.float64)
        out[name] = quantized_fractions(by_name[name], x, codes[name])
    return out


def parquet_fractions(
    stream: BinaryIO, schema: DatasetSchema, codes: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The binned attributes' fractions of a Parquet file whose codes are `codes`."""
    import pyarrow.parquet as pq

    from app.ingest.parquet import ParquetColumn

    names = binned_names(schema)
    if not names:
        return {}
    stream.seek(0)
    table = pq.read_table(stream, columns=names)
    out = {}
    for name in names:
        attribute = schema.attribute(name)
        x = ParquetColumn(attribute).numbers(table.column(name))
        out[name] = quantized_fractions(attribute, x, codes[name])
    return out
