"""The registration scan refuses a source as an upload refuses a file: missing columns,
files that are not Parquet, no rows, nested ids, values outside the schema (the column,
how many rows of the whole source, five examples with row numbers across the files)
and rows without an id; columns the schema does not name are ignored."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from records_lake import SCHEMA, UNIT, make_table, write_source

from app.ingest import IngestError
from app.records.engine import UnitCap, Validation
from app.records.local import LocalEngine
from app.schema import parse_schema
from app.sources import Source, list_files

CAP = UnitCap(UNIT, 3, 12345)


def refusal(source: Source, schema: object = SCHEMA, unit: UnitCap | None = CAP) -> IngestError:
    with pytest.raises(IngestError) as caught:
        LocalEngine(batch_rows=64).validate(source, schema, unit)  # type: ignore[arg-type]
    return caught.value


def folder_source(root: Path, tables: list[pa.Table]) -> Source:
    root.mkdir(parents=True, exist_ok=True)
    for index, table in enumerate(tables):
        pq.write_table(table, root / f"part-{index}.parquet", row_group_size=50)
    uri = root.as_uri() + "/"
    return Source(uri, list_files(uri))


def test_a_valid_source_gives_its_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    source = write_source(
        tmp_path, [("2023", make_table(rng, 300)), ("2024", make_table(rng, 120))]
    )
    assert LocalEngine(batch_rows=64).validate(source, SCHEMA, CAP) == Validation(rows=420)
    assert LocalEngine().validate(source, SCHEMA, None) == Validation(rows=420)


def test_a_missing_column_is_refused_naming_it_and_the_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    source = write_source(
        tmp_path,
        [("2023", make_table(rng, 30)), ("2024", make_table(rng, 30).drop_columns(["age"]))],
    )
    error = refusal(source)
    assert error.code == "bad_header"
    assert "'age'" in error.message and "year=2024/part-001.parquet" in error.message
    no_partition = folder_source(tmp_path / "flat", [make_table(rng, 10)])
    error = refusal(no_partition)
    assert error.code == "bad_header" and error.details["missing"] == ["year"]
    error = refusal(no_partition, parse_schema({"sex": 3}), UnitCap("visitor", 1, 1))
    assert error.details["missing"] == ["visitor"]


def test_a_file_that_is_not_parquet_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    source = write_source(tmp_path, [("2023", make_table(rng, 30))])
    (tmp_path / "year=2023" / "notes.parquet").write_text("sex,age\nF,3\n")
    source = Source(source.uri, list_files(source.uri))
    error = refusal(source)
    assert error.code == "bad_parquet" and "notes.parquet" in error.message


def test_a_source_without_rows_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    empty = make_table(rng, 10).slice(0, 0)
    source = write_source(tmp_path, [("2023", empty), ("2024", empty)])
    assert refusal(source).code == "empty_file"


def test_a_nested_or_mixed_type_unit_column_is_refused(tmp_path: Path) -> None:
    schema = parse_schema({"attributes": [{"name": "x", "type": "integer", "size": 3}]})
    nested = folder_source(tmp_path / "n", [pa.table({"x": [0, 1], "id": [[1], [2]]})])
    error = refusal(nested, schema, UnitCap("id", 1, 1))
    assert error.code == "bad_privacy_unit" and "'id'" in error.message
    mixed = folder_source(
        tmp_path / "m", [pa.table({"x": [0], "id": [1]}), pa.table({"x": [0], "id": ["1"]})]
    )
    assert refusal(mixed, schema, UnitCap("id", 1, 1)).code == "bad_privacy_unit"


def test_values_outside_the_schema_are_counted_over_the_source(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    first, second = make_table(rng, 200), make_table(rng, 300)
    # Rows 11, 21, …, 191 of the first file and 1, 6, …, 296 of the second: 19 + 60.
    bands = second.column("band").to_numpy().copy()
    bands[::5] = 9
    second = second.set_column(second.schema.get_field_index("band"), "band", pa.array(bands))
    regions = first.column("region").to_pylist()
    for row in range(10, 200, 10):
        regions[row] = "west" + "x" * 60
    first = first.set_column(1, "region", pa.array(regions).dictionary_encode())
    source = write_source(tmp_path, [("2023", first), ("2023", second)])
    error = refusal(source)
    assert error.code == "value_out_of_schema"
    assert error.details["column"] == "region"
    assert error.details["rows"] == 19
    assert error.details["examples"] == [11, 21, 31, 41, 51]
    assert error.details["columns"] == {"region": 19, "band": 60}
    assert "on 19 row(s)" in error.message and "row 11: 'westxxx" in error.message
    assert "x" * 60 not in error.message  # quoted values are truncated as an upload's
    assert "'band' (60 rows)" in error.message
    only_band = parse_schema({"attributes": [SCHEMA.attribute("band").to_json()]})
    error = refusal(source, only_band, None)
    assert error.details["column"] == "band" and error.details["rows"] == 60
    assert error.details["examples"] == [201, 206, 211, 216, 221]
    assert "row 201: 9 is not one of the schema's 3 values" in error.message


def test_rows_without_an_id_are_refused_by_row_number(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    table = make_table(rng, 100)
    ids = table.column(UNIT).to_pylist()
    for row in (3, 40, 41, 42, 43, 44, 90):
        ids[row] = None if row % 2 else " \t"
    table = table.set_column(table.schema.get_field_index(UNIT), UNIT, pa.array(ids))
    source = write_source(tmp_path, [("2024", table)])
    error = refusal(source)
    assert error.code == "missing_unit_id"
    assert error.details == {"column": UNIT, "rows": 7, "examples": [4, 41, 42, 43, 44]}
    assert "\t" not in error.message


def test_a_partition_folder_outside_the_schema_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    source = write_source(tmp_path, [("2023", make_table(rng, 40)), ("2025", make_table(rng, 30))])
    error = refusal(source)
    assert error.code == "value_out_of_schema"
    assert error.details["column"] == "year" and error.details["rows"] == 30
    assert error.details["examples"] == [41, 42, 43, 44, 45]
    assert "row 41: '2025' is not one of the schema's 2 values" in error.message
