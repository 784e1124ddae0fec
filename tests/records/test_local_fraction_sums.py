"""Within-bin sums of a registered source by the local engine: each code's rows and sum
of places within the bins equal what an upload of the same rows stores, whatever the
batch size; under a unit cap, the same rows as the counts, and the same sums whatever
the order the files are read in (tied rows are kept in order of their places)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from records_lake import FILE_COLUMNS, SCHEMA, UNIT, make_table, source_order, write_source

from app.ingest import encode_upload
from app.records.engine import UnitCap
from app.records.local import LocalEngine
from app.schema.within_bins import GRID, fraction_sums

BINNED = ["age", "income"]
CAP = UnitCap(UNIT, 2, secret=0x5EED)


def parts_of(seed: int) -> list[tuple[str, pa.Table]]:
    rng = np.random.default_rng(seed)
    return [("2023", make_table(rng, 700, units=50)), ("2024", make_table(rng, 500, units=50))]


def uploaded(parts: list[tuple[str, pa.Table]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """What the stored path sums: the rows uploaded as one Parquet file."""
    tables = []
    for year, table in source_order(parts):
        columns = {name: table.column(name) for name in FILE_COLUMNS}
        columns["year"] = pa.array([year] * table.num_rows)
        tables.append(pa.table(columns))
    buffer = io.BytesIO()
    pq.write_table(pa.concat_tables([t.cast(tables[0].schema) for t in tables]), buffer)
    buffer.seek(0)
    encoded = encode_upload(buffer, SCHEMA, content_type="application/vnd.apache.parquet")
    out = {}
    for name in BINNED:
        size = SCHEMA.attribute(name).size
        codes = encoded.columns[name]
        counts = np.bincount(codes.astype(np.intp), minlength=size)
        out[name] = (counts, fraction_sums(size, codes, encoded.fractions[name]))
    return out


def test_the_local_engine_sums_places_as_the_stored_path(tmp_path: Path) -> None:
    parts = parts_of(11)
    lake = write_source(tmp_path / "lake", parts)
    expected = uploaded(parts)
    for batch_rows in (97, 4096):
        got = LocalEngine(batch_rows=batch_rows).fraction_sums(lake, SCHEMA, BINNED, None)
        for name in BINNED:
            np.testing.assert_array_equal(got[name][0], expected[name][0], err_msg=name)
            np.testing.assert_array_equal(got[name][1], expected[name][1], err_msg=name)
    # Not a trivial sum: most rows lie strictly inside their bins.
    assert 0 < expected["age"][1].sum() < GRID * expected["age"][0].sum()


def test_under_a_cap_the_sums_cover_the_counted_rows_in_any_order(tmp_path: Path) -> None:
    parts = parts_of(12)
    lake = write_source(tmp_path / "one", parts)
    rng = np.random.default_rng(3)
    shuffled = [(year, table.take(rng.permutation(table.num_rows))) for year, table in parts]
    reversed_lake = write_source(tmp_path / "two", shuffled)
    engine = LocalEngine(batch_rows=128, bucket_rows=300)
    summed = engine.fraction_sums(lake, SCHEMA, BINNED, CAP)
    counted = engine.count(lake, SCHEMA, [("age",), ("income",)], CAP)
    again = LocalEngine(batch_rows=1000).fraction_sums(reversed_lake, SCHEMA, BINNED, CAP)
    for name in BINNED:
        np.testing.assert_array_equal(summed[name][0], counted[(name,)], err_msg=name)
        np.testing.assert_array_equal(summed[name][0], again[name][0], err_msg=name)
        np.testing.assert_array_equal(summed[name][1], again[name][1], err_msg=name)
    assert summed["age"][0].sum() == 2 * 50  # two rows a unit
