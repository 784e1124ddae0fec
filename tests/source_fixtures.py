"""Small Parquet sources for the registration tests: `write_part` writes one generated
file, `write_lake` a hive-partitioned folder of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA: dict[str, Any] = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
    ]
}
ROWS_PER_FILE = 300


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
