"""Adversarial uploads (the privacy unit, Parquet, the schema as a file part): every one
is a clear 4xx that stores nothing, and the privacy unit groups equal ids as one unit."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ADMIN_HEADERS, unique_name
from sqlalchemy import func, select

from app.db import Dataset

SCHEMA = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "kids", "type": "integer", "size": 3},
    ]
}
BASE = {"sex": ["F", "M", "F", "M", "F", "M"], "kids": [0, 1, 2, 0, 1, 2]}


def parquet(columns: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    return buffer.getvalue()


def post(client, content: bytes, *, schema: Any = None, **form: str):  # type: ignore[no-untyped-def]
    data = {"name": unique_name("audit"), **form}
    files: dict[str, Any] = {"file": ("data", io.BytesIO(content), "application/octet-stream")}
    if isinstance(schema, bytes):
        files["schema"] = ("schema.json", schema, "application/json")
    else:
        data["schema"] = json.dumps(SCHEMA) if schema is None else schema
    return client.post("/v1/datasets", data=data, files=files, headers=ADMIN_HEADERS)


def datasets(database) -> int:  # type: ignore[no-untyped-def]
    with database.read_only() as session:
        return int(session.scalar(select(func.count()).select_from(Dataset)) or 0)


@pytest.mark.parametrize(
    "ids",
    [
        pa.array([[1], [1], [2], [2], [3], [3]]),
        pa.array([{"a": 1}] * 6),
        pa.array([[("a", 1)]] * 6, type=pa.map_(pa.string(), pa.int64())),
    ],
    ids=["list", "struct", "map"],
)
def test_a_nested_id_column_is_a_clear_422(client, database, ids) -> None:  # type: ignore[no-untyped-def]
    before = datasets(database)
    unit = json.dumps({"column": "pid", "max_rows": 2})
    response = post(client, parquet({**BASE, "pid": ids}), privacy_unit=unit)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "bad_privacy_unit" and "'pid'" in error["message"]
    assert datasets(database) == before


def test_an_empty_binary_id_is_refused_like_an_empty_text_id(client) -> None:  # type: ignore[no-untyped-def]
    ids = pa.array([b"a", b"a", b"b", b"b", b"", b"c"])
    unit = json.dumps({"column": "pid", "max_rows": 2})
    response = post(client, parquet({**BASE, "pid": ids}), privacy_unit=unit)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "missing_unit_id" and error["rows"] == [5]


def test_signed_zeros_are_one_unit(client) -> None:  # type: ignore[no-untyped-def]
    # 0.0 == -0.0: the same person, whose four rows keep at most two.
    ids = pa.array([0.0, -0.0, 0.0, -0.0, 1.0, 1.0])
    unit = json.dumps({"column": "pid", "max_rows": 2})
    response = post(client, parquet({**BASE, "pid": ids}), privacy_unit=unit)
    assert response.status_code == 201, response.text
    assert response.json()["rows"] == 4


HUGE = "1" + "0" * 5000  # past Python's 4300-digit limit for int()


@pytest.mark.parametrize("as_file", [False, True], ids=["field", "file part"])
def test_a_schema_with_a_huge_integer_is_a_422(client, database, as_file: bool) -> None:  # type: ignore[no-untyped-def]
    before = datasets(database)
    text = '{"sex": ' + HUGE + "}"
    content = b"sex\n1\n"
    response = post(client, content, schema=text.encode() if as_file else text)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert HUGE not in response.text
    assert datasets(database) == before


def test_a_privacy_unit_with_a_huge_integer_is_a_422(client) -> None:  # type: ignore[no-untyped-def]
    field = '{"column": "pid", "max_rows": ' + HUGE + "}"
    content = b"sex,kids,pid\nF,0,a\n"
    response = post(client, content, privacy_unit=field)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "bad_privacy_unit"
