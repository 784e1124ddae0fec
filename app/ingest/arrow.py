"""The fast path of the encoder: Apache Arrow's CSV reader for files in canonical form.

Arrow's reader (C++, streaming, in blocks) parses a CSV several times faster than
Python's `csv`, and its compute functions encode whole columns at once. It is used only
where it is certain to give what `app.ingest.table` would: a header naming exactly the
schema's attributes, categorical cells spelled exactly as a schema value, integer cells
of plain digits, numeric cells of plain decimals ("-12.5": both parsers round such a
string to the same double), every value inside the schema (clipping as the attribute
says). Anything else — padding, "3.0", "1e3", a BOM Arrow keeps, a bad value, a ragged
or malformed row, bytes that are not UTF-8 — and the caller reads the file again with
the exact path, which encodes it or explains precisely what is wrong.
So the fast path decides nothing on its own: it only ever returns a table the exact
path would have returned, or None — or refuses a file over the byte limit, as the exact
path would, at the same byte.
"""

from __future__ import annotations

import io
from typing import BinaryIO

import numpy as np

from app.ingest.columns import ColumnEncoder
from app.ingest.errors import IngestError
from app.ingest.reading import CountingReader
from app.schema import DatasetSchema

try:  # an optional speed-up: without pyarrow every upload takes the exact path
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
except ImportError:  # pragma: no cover - pyarrow is a declared dependency
    pa = None

_BLOCK_BYTES = 1 << 22
_DECIMAL = r"^-?[0-9]{1,30}(\.[0-9]{1,30})?$"


class _NotCanonical(Exception):
    """The file is not in the fast path's canonical form: read it with the exact path."""


def encode_canonical(
    stream: BinaryIO, schema: DatasetSchema, max_bytes: int | None
) -> tuple[int, dict[str, np.ndarray]] | None:
    """(rows, codes by attribute) if the whole file is canonical and valid, else None.

    Reads the stream from its current position; the caller rewinds it on None.
    """
    if pa is None:
        return None
    counting = CountingReader(stream, max_bytes)
    try:
        return _encode(io.BufferedReader(counting, buffer_size=_BLOCK_BYTES), schema)
    except Exception:  # any doubt at all: the exact path decides
        if max_bytes is not None and counting.bytes_read > max_bytes:
            # Too large: reading stops here (one byte past the limit), not after a reread.
            raise IngestError(
                "too_large", f"the upload is larger than the limit of {max_bytes} bytes"
            ) from None
        return None
    finally:
        counting.close()


def _encode(source: io.BufferedReader, schema: DatasetSchema) -> tuple[int, dict[str, np.ndarray]]:
    names = list(schema.names)
    reader = pacsv.open_csv(
        source,
        read_options=pacsv.ReadOptions(block_size=_BLOCK_BYTES, use_threads=True),
        parse_options=pacsv.ParseOptions(newlines_in_values=False, ignore_empty_lines=True),
        convert_options=pacsv.ConvertOptions(
            column_types=dict.fromkeys(names, pa.string()),
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )
    header = reader.schema.names
    if sorted(header) != sorted(names) or len(set(header)) != len(header):
        raise _NotCanonical("header")
    encoders = {a.name: ColumnEncoder(a) for a in schema.attributes}
    values = {
        a.name: pa.array(list(a.values), pa.string())
        for a in schema.attributes
        if a.kind == "categorical" and a.values is not None
    }
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    rows = 0
    for batch in reader:
        rows += batch.num_rows
        for position, name in enumerate(header):
            encoder = encoders[name]
            column = batch.column(position)
            if name in values:
                found = pc.index_in(column, value_set=values[name])
                if found.null_count:
                    raise _NotCanonical(name)
                codes = found.to_numpy(zero_copy_only=False).astype(np.int64)
            elif encoder.attribute.kind == "integer":
                # Arrow's integer cast accepts a sign and digits only (else it raises),
                # a subset of what int() accepts, with the same value.
                codes = encoder.integer_codes(
                    pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False).copy()
                )
            else:
                _require(column, _DECIMAL)
                codes = encoder.bin_numbers(
                    pc.cast(column, pa.float64()).to_numpy(zero_copy_only=False)
                )
            if codes.size and codes.min() < 0:
                raise _NotCanonical(name)
            parts[name].append(codes.astype(encoder.dtype))
    if rows == 0:
        raise _NotCanonical("no rows")
    return rows, {name: np.concatenate(parts[name]) for name in names}


def _require(column: object, pattern: str) -> None:
    if not pc.all(pc.match_substring_regex(column, pattern)).as_py():
        raise _NotCanonical(pattern)
