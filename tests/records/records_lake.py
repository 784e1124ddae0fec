"""Small Parquet sources for the engine tests, and the stored path's codes of the same rows.

A source is a folder of Parquet files under hive partition folders (`year=2023/`); its
tables carry categorical strings (dictionary-encoded, some padded with spaces),
numbers to bin (NaN and nulls among them), integers with nulls, integers from a min
(`day`) and in bins of a width (`clock`, read from floats), a categorical read
from integers, a text unit id and a column the schema does not name.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from app.ingest.parquet import encode_parquet
from app.records.engine import ID_TRIM
from app.schema import DatasetSchema, parse_schema
from app.sources import Source, list_files

SCHEMA = parse_schema(
    {
        "attributes": [
            {"name": "sex", "type": "categorical", "values": ["F", "M"], "missing": True},
            {"name": "region", "type": "categorical", "values": ["north", "south", "east"]},
            {"name": "age", "type": "numeric", "bins": [0, 18, 65, 120], "missing": True},
            {"name": "income", "type": "numeric", "bins": [0, 1000, 5000], "clip": True},
            {"name": "kids", "type": "integer", "size": 4, "missing": True},
            {"name": "band", "type": "categorical", "values": ["1", "2", "3"]},
            {"name": "year", "type": "categorical", "values": ["2023", "2024"]},
            {"name": "day", "type": "integer", "min": 1, "max": 31},
            {
                "name": "clock",
                "type": "integer",
                "min": 0,
                "max": 2359,
                "width": 100,
                "missing": True,
            },
        ]
    }
)
FILE_COLUMNS = ["sex", "region", "age", "income", "kids", "band", "day", "clock"]
UNIT = "person_id"


def make_table(rng: np.random.Generator, rows: int, units: int = 200) -> pa.Table:
    """Rows of the schema's file columns, the unit's id and an unnamed column."""
    sex = rng.choice(np.array(["F", "M", "M "], dtype=object), rows).tolist()
    for i in np.flatnonzero(rng.random(rows) < 0.1).tolist():
        sex[i] = None
    region = rng.choice(np.array(["north", " south", "east"], dtype=object), rows).tolist()
    age = rng.uniform(0, 120, rows)
    age[rng.random(rows) < 0.05] = np.nan
    age_null = rng.random(rows) < 0.05
    income = rng.lognormal(7, 1.5, rows)  # some beyond 5000: clipped into the last bin
    kids = rng.integers(0, 4, rows)
    kids_null = rng.random(rows) < 0.08
    ids = rng.integers(0, units, rows)
    clock = (rng.integers(0, 24, rows) * 100 + rng.integers(0, 60, rows)).astype(float)
    clock[:2] = [2359.0, 0.0]  # the last bin's top and the first bin's bottom
    return pa.table(
        {
            "sex": pa.array(sex, pa.string()).dictionary_encode(),
            "region": pa.array(region, pa.string()).dictionary_encode(),
            "age": pa.array(age, mask=age_null),
            "income": pa.array(income),
            "kids": pa.array(kids, mask=kids_null),
            "band": pa.array(rng.integers(1, 4, rows), pa.int32()),
            "day": pa.array(rng.integers(1, 32, rows), pa.int16()),
            "clock": pa.array(clock, mask=rng.random(rows) < 0.05),
            UNIT: pa.array([f"  u{i}" if i % 7 == 0 else f"u{i}" for i in ids.tolist()]),
            "note": pa.array(rng.integers(0, 10**9, rows)),
        }
    )


def write_source(
    root: Path, parts: Sequence[tuple[str, pa.Table]], row_group_size: int = 700
) -> Source:
    """Write each (year, table) as one file under `year=…/` and list the source."""
    for index, (year, table) in enumerate(parts):
        folder = root / f"year={year}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, folder / f"part-{index:03d}.parquet", row_group_size=row_group_size)
    uri = root.resolve().as_uri() + "/"
    return Source(uri=uri, files=list_files(uri))


def stored_codes(
    parts: Sequence[tuple[str, pa.Table]], schema: DatasetSchema = SCHEMA
) -> tuple[int, dict[str, np.ndarray]]:
    """What an upload of the same rows stores: the files' rows in the source's order
    (sorted by path, as `write_source` names them), `year` as a column of text."""
    tables = []
    for year, table in source_order(parts):
        columns = {name: table.column(name) for name in FILE_COLUMNS}
        columns["year"] = pa.array([year] * table.num_rows)
        tables.append(pa.table(columns))
    buffer = io.BytesIO()
    with pq.ParquetWriter(buffer, tables[0].schema) as writer:
        for table in tables:
            writer.write_table(table.cast(tables[0].schema))
    buffer.seek(0)
    return encode_parquet(buffer, schema)


def source_order(parts: Sequence[tuple[str, pa.Table]]) -> list[tuple[str, pa.Table]]:
    """The parts in the order the source lists their files (by path: year, then index)."""
    named = [(f"year={year}/part-{i:03d}", (year, t)) for i, (year, t) in enumerate(parts)]
    return [part for _, part in sorted(named, key=lambda item: item[0])]


def unit_groups(parts: Sequence[tuple[str, pa.Table]]) -> np.ndarray:
    """Each row's unit (in source order) as an index, ids compared as the engines do."""
    ids = [
        value.strip(ID_TRIM)
        for _, table in source_order(parts)
        for value in table.column(UNIT).to_pylist()
    ]
    _, groups = np.unique(np.array(ids, dtype=object).astype(str), return_inverse=True)
    return groups.astype(np.int64)
