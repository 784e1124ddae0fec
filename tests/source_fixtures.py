"""Small Parquet sources for the registration tests, and a stand-in counting engine.

`UploadLikeEngine` validates each file of a source as an upload of it would be
validated (`app.ingest.encode_upload` over the schema's columns), so the tests of the
request, the job, the statuses and the refusals run whatever engine is installed; the
engines' own tests check their scans. `write_part` writes one generated file.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from app.ingest import PARQUET_CONTENT_TYPE, encode_upload
from app.records.engine import UnitCap, Validation
from app.schema import DatasetSchema
from app.sources import Source

SCHEMA: dict[str, Any] = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
    ]
}
ROWS_PER_FILE = 300


class UploadLikeEngine:
    """Validates each file of a source as an upload of it would be validated."""

    name = "upload-like"

    def validate(self, source: Source, schema: DatasetSchema, unit: UnitCap | None) -> Validation:
        rows = 0
        for source_file in source.files:
            # Only the schema's columns, as an engine reads them; the upload refuses others.
            table = pq.read_table(source_file.path, columns=list(schema.names))
            buffer = io.BytesIO()
            pq.write_table(table, buffer)
            buffer.seek(0)
            rows += encode_upload(buffer, schema, content_type=PARQUET_CONTENT_TYPE).rows
        return Validation(rows=rows)

    def count(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the stand-in engine only validates")


def write_part(path: Path, rows: int = ROWS_PER_FILE, *, seed: int = 0, **override: Any) -> None:
    """A Parquet file of `rows` generated rows: the schema's columns, an id column
    (`person_id`, 50 people) and a column the schema does not name (never read)."""
    rng = np.random.default_rng(seed)
    columns: dict[str, Any] = {
        "sex": rng.choice(["F", "M"], size=rows).tolist(),
        "age": rng.integers(0, 100, size=rows).astype(float).tolist(),
        "person_id": [f"p{i % 50}" for i in range(rows)],
        "unused": ["never read"] * rows,
    }
    columns.update(override)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


def write_lake(root: Path) -> Path:
    """Under `root`: visits/ — two hive partitions of one file each, and a _SUCCESS marker."""
    write_part(root / "visits" / "year=2024" / "part-0.parquet", seed=1)
    write_part(root / "visits" / "year=2025" / "part-0.parquet", seed=2)
    (root / "visits" / "_SUCCESS").write_text("")
    return root
