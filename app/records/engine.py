"""What a counting engine is: exact marginals of a registered Parquet source, in one scan.

A dataset registered by reference (`POST /v1/datasets` with a JSON body) lives in the
curator's lake; privq holds its schema, the source's location and fingerprint, and a
per-dataset secret. An engine counts it where it is:

- `app.records.local.LocalEngine` streams the needed columns in Arrow record batches and
  bincounts every requested marginal per batch (memory bounded by the batch);
- `app.records.spark.SparkEngine` sends one Spark SQL job through Spark Connect
  (encoding by SQL expressions, the unit's cap by a window, GROUPING SETS); only the
  counts return.

Only `app.services.gate` imports this package (an import-linter contract): every read
of records passes the gate, which records its cost as used before it reads.

The two engines must give identical counts on the same data. What they agree on:

Codes. An attribute's code of a value is what an upload of the same Parquet file would
store (`app.ingest.parquet`): categorical values trimmed and matched to the schema's
values, numbers binned by the schema's edges (the last bin closed, `clip` as the
attribute says), integers 0..size-1, and null, NaN or one of `missing_values` (trimmed
text) the missing code (the last one) when the attribute has `missing`. Registration
has refused any source with a value outside the schema, so a counting scan meets none.

The privacy unit's cap (`UnitCap`). Rows whose unit ids are equal (text trimmed of
`ID_TRIM` characters; floating ids as float64 with -0.0 = 0.0; otherwise the value as
it is) are one unit. Each row has a key, `row_key`: Spark SQL's `xxhash64` (seed 42) of
the dataset's secret (a BIGINT) followed by the row's code of every schema attribute in
schema order (each an INT). A unit keeps its `max_rows` rows of smallest key (signed
64-bit order); rows whose keys tie have equal codes (but for a 2⁻⁶⁴ chance), so which
of them is kept changes no count. The same rows are kept at every access and by both
engines, whatever the batch size, file order or partitioning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from app.schema import DatasetSchema
from app.sources import Source

# The characters trimmed from both ends of a text unit id before ids are compared.
ID_TRIM = " \t\n\r\x0b\x0c"

Marginal = tuple[str, ...]


@dataclass(frozen=True)
class UnitCap:
    """At most `max_rows` rows of each unit (rows sharing a value of `column`) are counted,
    chosen by `row_key` with the dataset's `secret` (a signed 64-bit integer)."""

    column: str
    max_rows: int
    secret: int


@dataclass(frozen=True)
class Validation:
    """What a registration scan found: the number of rows (all values in the schema)."""

    rows: int


class CountingEngine(Protocol):
    """Counts marginals of a registered source; see the module's docstring."""

    name: str

    def validate(self, source: Source, schema: DatasetSchema, unit: UnitCap | None) -> Validation:
        """Scan every row once: every value of the schema's columns (and the unit's id
        column: none null or empty) against the schema. Raises `app.ingest.IngestError`
        as an upload would (naming the column, how many rows, up to five examples)."""
        ...

    def count(
        self,
        source: Source,
        schema: DatasetSchema,
        marginals: Sequence[Marginal],
        unit: UnitCap | None,
    ) -> dict[Marginal, np.ndarray]:
        """Exact counts (int64, row-major over the attributes' codes in the marginal's
        order, shape `schema.domain.shape(m)` flattened) of every requested marginal, in
        one scan of the source: the largest are counted, the others summed from them."""
        ...

    def fraction_sums(
        self,
        source: Source,
        schema: DatasetSchema,
        attributes: Sequence[str],
        unit: UnitCap | None,
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per binned attribute (`app.schema.within_bins`), in one scan: each code's exact
        count of rows and exact sum of the rows' places within the bin in grid steps
        (int64 each, the attribute's size), over the rows the unit's cap keeps. Rows whose
        keys tie (equal codes) are kept in order of their fractions, smallest first, so
        the kept rows' sums are the same whatever the order they are read in."""
        ...
