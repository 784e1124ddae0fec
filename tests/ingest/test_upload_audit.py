"""Adversarial files at the encoder: a long bad Parquet cell is quoted as a CSV's is
(truncated), ids that are equal numbers are one unit, nested id columns are refused,
and a schema file may start with a byte-order mark."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.ingest import IngestError, PrivacyUnit, encode_upload
from app.ingest.errors import QUOTED_CELL_CHARS
from app.schema import SchemaError, parse_schema

SCHEMA = parse_schema(
    json.dumps(
        {
            "attributes": [
                {"name": "sex", "type": "categorical", "values": ["F", "M"]},
                {"name": "kids", "type": "integer", "size": 3},
            ]
        }
    )
)
SECRET = "secret-" + "x" * 300


def parquet(columns: dict[str, object]) -> io.BytesIO:
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize("column", ["sex", "kids"])
def test_a_long_bad_parquet_cell_is_quoted_truncated_like_a_csv_cell(column: str) -> None:
    columns: dict[str, object] = {"sex": ["F", "M"], "kids": ["0", "1"]}
    columns[column] = [columns[column][0], SECRET]  # type: ignore[index]
    with pytest.raises(IngestError) as caught:
        encode_upload(parquet(columns), SCHEMA)
    assert caught.value.code == "value_out_of_schema"
    assert SECRET not in caught.value.message
    assert SECRET[: QUOTED_CELL_CHARS - 1] + "…" in caught.value.message


def test_a_bad_parquet_number_is_shown_as_a_number() -> None:
    with pytest.raises(IngestError) as caught:
        encode_upload(parquet({"sex": ["F", "M"], "kids": [0, 1234567]}), SCHEMA)
    assert "on row 2: 1234567 is outside the integers 0..2" in caught.value.message


def test_float_ids_equal_as_numbers_are_one_unit() -> None:
    ids = pa.array([0.0, -0.0, 0.0, -0.0, 1.0, 1.0])
    columns = {"sex": ["F", "M"] * 3, "kids": [0, 1, 2] * 2, "pid": ids}
    table = encode_upload(parquet(columns), SCHEMA, unit=PrivacyUnit("pid", 2))
    assert table.rows == 4


def test_an_empty_byte_string_is_no_id() -> None:
    ids = pa.array([b"a", b"a", b"", b"b"])
    columns = {"sex": ["F", "M"] * 2, "kids": [0, 1, 2, 0], "pid": ids}
    with pytest.raises(IngestError) as caught:
        encode_upload(parquet(columns), SCHEMA, unit=PrivacyUnit("pid", 2))
    assert caught.value.code == "missing_unit_id" and caught.value.details["rows"] == [3]


@pytest.mark.parametrize(
    "ids",
    [
        pa.array([[1], [2]]),
        pa.array([{"a": 1}, {"a": 2}]),
        pa.array([[("a", 1)], [("b", 2)]], type=pa.map_(pa.string(), pa.int64())),
    ],
    ids=["list", "struct", "map"],
)
def test_a_nested_id_column_is_refused_before_reading(ids: pa.Array) -> None:
    columns = {"sex": ["F", "M"], "kids": [0, 1], "pid": ids}
    with pytest.raises(IngestError) as caught:
        encode_upload(parquet(columns), SCHEMA, unit=PrivacyUnit("pid", 2))
    assert caught.value.code == "bad_privacy_unit" and caught.value.status == 422


def test_a_schema_file_may_start_with_a_byte_order_mark() -> None:
    text = json.dumps({"sex": 2}).encode("utf-8-sig")
    assert parse_schema(text).names == ("sex",)


def test_a_schema_number_of_too_many_digits_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="too many digits"):
        parse_schema('{"sex": 1' + "0" * 5000 + "}")
    with pytest.raises(SchemaError, match="duplicate key"):
        parse_schema('{"sex": 2, "sex": 3}')
