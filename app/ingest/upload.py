"""One upload, CSV or Parquet: `encode_upload` picks the reader, then applies the privacy
unit (at most k rows per unit, the ids dropped)."""

from __future__ import annotations

from typing import BinaryIO

from app.ingest.fractions import binned_names, parquet_fractions
from app.ingest.parquet import encode_parquet, looks_like_parquet
from app.ingest.table import DEFAULT_CHUNK_ROWS, EncodedTable, encode_csv, truncate_units
from app.ingest.units import PrivacyUnit, UnitIds
from app.schema import DatasetSchema


def encode_upload(
    stream: BinaryIO,
    schema: DatasetSchema,
    *,
    max_bytes: int | None = None,
    unit: PrivacyUnit | None = None,
    content_type: str | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> EncodedTable:
    """Encode a CSV or a Parquet file (by its Content-Type or its magic bytes).

    Raises `IngestError`; the stream is left open.
    """
    if looks_like_parquet(stream, content_type):
        ids = UnitIds()
        rows, columns = encode_parquet(stream, schema, max_bytes=max_bytes, unit=unit, ids=ids)
        table = EncodedTable(rows=rows, columns=columns)
        if binned_names(schema):
            table.fractions = parquet_fractions(stream, schema, columns)
        return truncate_units(table, ids, unit)
    return encode_csv(stream, schema, max_bytes=max_bytes, chunk_rows=chunk_rows, unit=unit)
