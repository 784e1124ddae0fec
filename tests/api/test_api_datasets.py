"""Dataset upload and visibility: encoding stored in the database, refusals store nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import (
    ADMIN_HEADERS,
    TINY_CSV,
    TINY_SCHEMA,
    adult_domain,
    adult_slice,
    bearer,
    unique_name,
)
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.api import create_app
from app.db import Dataset, DatasetColumn
from app.services.columns import load_columns

RHO_TOTAL_RANGE = "0 < rho_total ≤ 1e6"


def _dataset_count(database) -> int:
    with database.read_only() as session:
        return int(session.scalar(select(func.count()).select_from(Dataset)))


def test_upload_with_value_schema_stores_encoded_columns(api, database) -> None:
    dataset = api.upload_dataset(TINY_CSV, TINY_SCHEMA, name="tiny", rho_total="2.5")
    assert dataset["rows"] == 5 and dataset["name"] == "tiny"
    assert [a["name"] for a in dataset["attributes"]] == ["sex", "age"]
    assert dataset["rho_total"] == 2.5
    with database.read_only() as session:
        columns = load_columns(session, dataset["id"])
        stored = session.execute(
            select(DatasetColumn.position, DatasetColumn.name).where(
                DatasetColumn.dataset_id == dataset["id"]
            )
        ).all()
    # The codes in schema order, then the binned attribute's places within its bins.
    assert sorted(tuple(row) for row in stored) == [(0, "sex"), (1, "age"), (2, "fraction:age")]
    # sex F,M,F,M,F → 0,1,0,1,0; age 23,41,67,17,30 in bins [0,18,30,45,65,120) → 1,2,4,0,2
    np.testing.assert_array_equal(columns["sex"], [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(columns["age"], [1, 2, 4, 0, 2])


def test_upload_adult_slice_with_size_map_schema(api, database) -> None:
    dataset = api.upload_dataset(adult_slice(200), adult_domain(), name="adult-200")
    assert dataset["rows"] == 200
    assert [a["name"] for a in dataset["attributes"]] == list(adult_domain())
    with database.read_only() as session:
        columns = load_columns(session, dataset["id"], ["age", "sex"])
    assert set(columns) == {"age", "sex"}
    first_record = adult_slice(1).decode().splitlines()[1].split(",")
    assert columns["age"][0] == int(first_record[0]) and len(columns["sex"]) == 200


def test_value_outside_schema_is_422_naming_column_and_lines_and_stores_nothing(
    api, database
) -> None:
    before = _dataset_count(database)
    bad_csv = "sex,age\nF,23\nX,41\nM,30\nF,130\n"
    error = api.upload_dataset(bad_csv, TINY_SCHEMA, expect=422)["error"]
    assert error["column"] in {"sex", "age"}
    assert error["lines"] and all(isinstance(line, int) for line in error["lines"])
    assert error["column"] in error["message"]
    assert _dataset_count(database) == before


def test_malformed_uploads_are_clear_4xx_and_store_nothing(api, database) -> None:
    before = _dataset_count(database)
    cases = [
        ("sex,height\nF,23\n", TINY_SCHEMA),  # wrong header: a column the schema lacks
        ("", TINY_SCHEMA),  # empty file
        ("sex,age\n", TINY_SCHEMA),  # header only
        ("sex,age\nF\n", TINY_SCHEMA),  # short row
    ]
    for csv_text, schema in cases:
        response = api.client.post(
            "/v1/datasets",
            data={"schema": json.dumps(schema), "name": "bad"},
            files={"file": ("bad.csv", csv_text.encode(), "text/csv")},
            headers=ADMIN_HEADERS,
        )
        assert 400 <= response.status_code < 500, (csv_text, response.text)
        assert response.json()["error"]["message"], response.text
    assert _dataset_count(database) == before


def test_bad_schema_or_form_fields_are_422(client, database) -> None:
    before = _dataset_count(database)
    for data in (
        {"schema": "{not json", "name": "x"},
        {"schema": json.dumps({"attributes": [{"name": "sex", "type": "colour"}]}), "name": "x"},
        {"schema": json.dumps(TINY_SCHEMA), "name": "x", "rho_total": "-1"},
        {"schema": json.dumps(TINY_SCHEMA), "name": "x", "rho_total": "0.0000000000001"},
        {"name": "x"},
    ):
        response = client.post(
            "/v1/datasets",
            data=data,
            files={"file": ("a.csv", TINY_CSV.encode(), "text/csv")},
            headers=ADMIN_HEADERS,
        )
        assert response.status_code == 422, (data, response.text)
        assert response.json()["error"]["code"]
    assert _dataset_count(database) == before


@pytest.mark.parametrize(
    "rho_total",
    [
        "abc",
        "2.0 rho",
        "true",
        "nan",
        "NaN",
        "inf",
        "-Infinity",
        "0",
        "-0",
        "-1",
        "1000000.000001",
        "2e6",
        "1e400",
        "1e999999999",
        pytest.param("1" * 101, id="101-digits"),
    ],
)
def test_rho_total_outside_its_range_is_422_naming_field_and_range_and_stores_nothing(
    api, database, rho_total: str
) -> None:
    before = _dataset_count(database)
    name = unique_name("refused")
    error = api.upload_dataset(name=name, rho_total=rho_total, expect=422)["error"]
    assert error["code"] == "invalid_request"
    assert [(f["field"], f["range"]) for f in error["fields"]] == [
        ("body.rho_total", RHO_TOTAL_RANGE)
    ]
    assert "rho_total" in error["message"] and RHO_TOTAL_RANGE in error["message"]
    assert _dataset_count(database) == before
    listed = api.client.get("/v1/datasets", headers=ADMIN_HEADERS).json()
    assert name not in {d["name"] for d in listed}


def test_rho_total_at_the_ends_of_its_range_is_kept(api) -> None:
    assert api.upload_dataset(rho_total="1e6")["rho_total"] == 1e6
    assert api.upload_dataset(rho_total=" 0.000000000001 ")["rho_total"] == 1e-12
    assert "rho_total" not in api.upload_dataset(rho_total="")


def test_oversized_upload_is_413(settings, database) -> None:
    small = settings.model_copy(update={"max_upload_bytes": 64})
    big_csv = "sex,age\n" + "F,23\n" * 100  # > 64 bytes, < the multipart envelope slack
    with TestClient(create_app(small, database=database)) as small_client:
        response = small_client.post(
            "/v1/datasets",
            data={"schema": json.dumps(TINY_SCHEMA), "name": "big"},
            files={"file": ("big.csv", big_csv.encode(), "text/csv")},
            headers=ADMIN_HEADERS,
        )
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"]
        # A body declared far larger than the limit is refused before it is read.
        huge = small_client.post(
            "/v1/datasets",
            content=b"x" * (2 * 1024 * 1024 + 100),
            headers={**ADMIN_HEADERS, "Content-Type": "multipart/form-data; boundary=b"},
        )
        assert huge.status_code == 413
        assert huge.json()["error"]["code"] == "payload_too_large"


def test_tenant_sees_only_granted_datasets_without_row_counts(client, api) -> None:
    tenant = api.create_tenant()
    granted = api.upload_dataset()
    hidden = api.upload_dataset()
    api.grant(granted["id"], tenant["id"], 1.0)

    listed = client.get("/v1/datasets", headers=tenant["headers"]).json()
    assert [d["id"] for d in listed] == [granted["id"]]
    assert "rows" not in listed[0] and "rho_total" not in listed[0]

    detail = client.get(f"/v1/datasets/{granted['id']}", headers=tenant["headers"])
    assert detail.status_code == 200
    assert "rows" not in detail.json() and detail.json()["attributes"] == granted["attributes"]

    # An ungranted dataset is exactly as absent as a missing one: same status, same body.
    for suffix in ("", "/budget", "/ledger"):
        ungranted = client.get(f"/v1/datasets/{hidden['id']}{suffix}", headers=tenant["headers"])
        missing = client.get(f"/v1/datasets/no-such-id{suffix}", headers=tenant["headers"])
        assert ungranted.status_code == missing.status_code == 404
        assert ungranted.json() == missing.json()


def test_admin_sees_every_dataset_with_rows(client, api) -> None:
    dataset = api.upload_dataset()
    listed = client.get("/v1/datasets", headers=ADMIN_HEADERS).json()
    assert dataset["id"] in {d["id"] for d in listed}
    detail = client.get(f"/v1/datasets/{dataset['id']}", headers=ADMIN_HEADERS).json()
    assert detail["rows"] == 5
    assert client.get("/v1/datasets/nope", headers=ADMIN_HEADERS).status_code == 404
    assert client.get("/v1/datasets", headers=bearer("wrong")).status_code == 401
