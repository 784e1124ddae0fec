"""Parquet uploads: read batch by batch into the same codes as the same table in a CSV;
nulls (and NaN) are missing values; the same refusals name the column and the row."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.ingest import IngestError, encode_csv, encode_parquet, encode_upload
from app.ingest import parquet as parquet_module
from app.schema import parse_schema

SCHEMA = parse_schema(
    {
        "attributes": [
            {"name": "sex", "type": "categorical", "values": ["F", "M"], "missing": True},
            {"name": "age", "type": "numeric", "bins": [0, 18, 65, 120], "missing": True},
            {"name": "kids", "type": "integer", "size": 4, "missing": True},
            {"name": "band", "type": "categorical", "values": ["1", "2", "3"]},
            {"name": "debt", "type": "numeric", "bins": [0, 10], "clip": True},
        ]
    }
)


def parquet_bytes(table: pa.Table, row_group_size: int | None = None) -> io.BytesIO:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=row_group_size)
    buffer.seek(0)
    return buffer


def sample(rows: int = 500, seed: int = 1) -> tuple[pa.Table, str]:
    """The same random table as Arrow (typed, with nulls) and as CSV text."""
    rng = np.random.default_rng(seed)
    sex = rng.choice(["F", "M", None], rows).tolist()
    age = rng.uniform(0, 120, rows).round(1)
    age_missing = rng.random(rows) < 0.1
    kids = rng.integers(0, 4, rows)
    kids_missing = rng.random(rows) < 0.2
    band = rng.integers(1, 4, rows)
    debt = rng.uniform(-5, 15, rows).round(2)
    table = pa.table(
        {
            "sex": pa.array(sex, pa.string()),
            "age": pa.array(np.where(age_missing, np.nan, age)),  # NaN: missing too
            "kids": pa.array(kids.tolist(), pa.int64(), mask=kids_missing),
            "band": pa.array(band.tolist(), pa.int32()),  # ints for text values
            "debt": pa.array(debt.tolist(), pa.float64()),
        }
    )
    lines = ["sex,age,kids,band,debt"]
    for i in range(rows):
        lines.append(
            ",".join(
                [
                    sex[i] or "",
                    "" if age_missing[i] else repr(float(age[i])),
                    "" if kids_missing[i] else str(kids[i]),
                    str(band[i]),
                    repr(float(debt[i])),
                ]
            )
        )
    return table, "\n".join(lines) + "\n"


def test_parquet_gives_the_codes_the_same_csv_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parquet_module, "BATCH_ROWS", 64)  # many batches
    table, text = sample()
    from_csv = encode_csv(io.BytesIO(text.encode()), SCHEMA)
    from_parquet = encode_upload(parquet_bytes(table, row_group_size=100), SCHEMA)
    assert from_parquet.rows == from_csv.rows == 500
    for name in SCHEMA.names:
        assert from_parquet.columns[name].dtype == from_csv.columns[name].dtype
        np.testing.assert_array_equal(from_parquet.columns[name], from_csv.columns[name])
    assert (from_parquet.columns["sex"] == 2).any() and (from_parquet.columns["kids"] == 4).any()


def test_parquet_is_found_by_magic_bytes_or_content_type() -> None:
    table, _ = sample(20)
    assert encode_upload(parquet_bytes(table), SCHEMA).rows == 20
    with pytest.raises(IngestError) as caught:
        encode_upload(
            io.BytesIO(b"sex,age\n"), SCHEMA, content_type="application/vnd.apache.parquet"
        )
    assert caught.value.code == "bad_parquet" and caught.value.status == 422


def test_dictionary_and_string_columns_are_read() -> None:
    table = pa.table(
        {
            "sex": pa.array(["F", " M", None]).dictionary_encode(),
            "age": pa.array(["5", "70.5", None]),
            "kids": pa.array([0.0, 3.0, None]),
            "band": pa.array(["1", "2", "3"]),
            "debt": pa.array([-1, 3, 99], pa.int8()),
        }
    )
    encoded = encode_upload(parquet_bytes(table), SCHEMA)
    assert {k: v.tolist() for k, v in encoded.columns.items()} == {
        "sex": [0, 1, 2],
        "age": [0, 2, 3],
        "kids": [0, 3, 4],
        "band": [0, 1, 2],
        "debt": [0, 0, 0],
    }


def replace(table: pa.Table, name: str, array: pa.Array) -> pa.Table:
    return table.set_column(table.column_names.index(name), name, array)


def test_a_value_outside_the_schema_names_column_and_rows() -> None:
    table, _ = sample(300)
    band = table.column("band").to_pylist()
    band[150] = 7
    band[299] = 9
    stream = parquet_bytes(replace(table, "band", pa.array(band, pa.int32())), 64)
    with pytest.raises(IngestError) as caught:
        encode_parquet(stream, SCHEMA)
    error = caught.value
    assert error.code == "value_out_of_schema"
    assert error.details == {"column": "band", "rows": [151, 300]}
    assert "on row 151: 7 is not one of the schema's 3 values" in error.message


def test_a_null_without_missing_is_refused_by_row() -> None:
    table, _ = sample(10)
    debt = table.column("debt").to_pylist()
    debt[3] = None
    with pytest.raises(IngestError) as caught:
        encode_parquet(parquet_bytes(replace(table, "debt", pa.array(debt))), SCHEMA)
    assert caught.value.details == {"column": "debt", "rows": [4]}
    assert '"missing": true' in caught.value.message


def test_the_earliest_row_decides_then_the_leftmost_column() -> None:
    table, _ = sample(10)
    band = table.column("band").to_pylist()
    band[5] = 0
    kids = table.column("kids").to_pylist()
    kids[5] = 9
    table = replace(replace(table, "band", pa.array(band)), "kids", pa.array(kids))
    with pytest.raises(IngestError) as caught:
        encode_parquet(parquet_bytes(table), SCHEMA)
    assert caught.value.details == {"column": "kids", "rows": [6]}


def test_a_non_integral_float_is_no_integer_code() -> None:
    table, _ = sample(5)
    table = replace(table, "kids", pa.array([0.0, 1.5, 2.0, 3.0, 1.0]))
    with pytest.raises(IngestError) as caught:
        encode_parquet(parquet_bytes(table), SCHEMA)
    assert caught.value.details == {"column": "kids", "rows": [2]}


@pytest.mark.parametrize(
    ("change", "code", "words"),
    [
        (
            lambda t: t.append_column("age", pa.array([1.0] * len(t))),
            "bad_header",
            "duplicate column(s) 'age'",
        ),
        (lambda t: t.drop_columns(["age"]), "bad_header", "missing column(s) 'age'"),
        (lambda t: t.slice(0, 0), "empty_file", "no rows"),
        (
            lambda t: replace(t, "age", pa.array([None] * len(t), pa.date32())),
            "bad_parquet",
            "column 'age' has Parquet type date32",
        ),
    ],
)
def test_structural_refusals(change, code: str, words: str) -> None:  # type: ignore[no-untyped-def]
    table, _ = sample(8)
    with pytest.raises(IngestError) as caught:
        encode_parquet(parquet_bytes(change(table)), SCHEMA)
    assert caught.value.code == code and words in caught.value.message


def test_columns_the_schema_does_not_name_are_not_read() -> None:
    table, _ = sample(50)
    expected = encode_parquet(parquet_bytes(table), SCHEMA)
    # Columns of any type, even types no attribute could read (a date, a list).
    wider = table.append_column("note", pa.array([[1, 2]] * 50, pa.list_(pa.int64())))
    wider = wider.add_column(0, "index", pa.array(range(50), pa.int64()))
    wider = wider.append_column("when", pa.array([None] * 50, pa.date32()))
    rows, codes = encode_parquet(parquet_bytes(wider), SCHEMA)
    assert rows == expected[0] and list(codes) == list(SCHEMA.names)
    for name in SCHEMA.names:
        np.testing.assert_array_equal(codes[name], expected[1][name], err_msg=name)


def test_a_broken_file_and_one_too_large_are_refused() -> None:
    with pytest.raises(IngestError) as caught:
        encode_upload(io.BytesIO(b"PAR1 not really"), SCHEMA)
    assert caught.value.code == "bad_parquet"
    table, _ = sample(50)
    data = parquet_bytes(table)
    size = len(data.getvalue())
    with pytest.raises(IngestError) as caught:
        encode_upload(data, SCHEMA, max_bytes=size - 1)
    assert caught.value.code == "too_large" and caught.value.status == 413
    data.seek(0)
    assert encode_upload(data, SCHEMA, max_bytes=size).rows == 50
