"""Data as curators have it, over HTTP on both backends: missing values answered
everywhere (labels null, `where` null, moments that skip them, empty synthetic cells),
Parquet uploads, the schema as a file part, and the privacy unit (checked, truncated,
its ids stored nowhere)."""

from __future__ import annotations

import csv
import io
import json
import logging
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ADMIN_HEADERS, unique_name
from sqlalchemy import func, inspect, select, text

from app.db import Dataset, Job, MeasurementRecord
from app.ingest import pack_column
from app.pgm.estimation import fit
from app.pgm.measurement import Measurement
from app.schema import parse_schema
from app.services import models as model_service
from app.services.columns import load_columns

SCHEMA: dict[str, Any] = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M"], "missing": True},
        {"name": "age", "type": "numeric", "bins": [0, 30, 60, 90], "missing": True},
        {"name": "kids", "type": "integer", "size": 3, "missing": True},
        {"name": "region", "type": "categorical", "values": ["n", "s"]},
    ]
}
MEASURED = [("sex", "age"), ("kids",), ("region", "sex"), ("age",)]


def messy_frame(rows: int, seed: int = 3) -> dict[str, list[Any]]:
    rng = np.random.default_rng(seed)
    sex = [None if r < 0.15 else "FM"[int(r * 10) % 2] for r in rng.random(rows)]
    age = [None if r < 0.2 else float(round(r * 89, 1)) for r in rng.random(rows)]
    kids = [None if r < 0.1 else int(r * 10) % 3 for r in rng.random(rows)]
    region = ["ns"[int(r * 2)] for r in rng.random(rows)]
    return {"sex": sex, "age": age, "kids": kids, "region": region}


def as_csv(columns: dict[str, list[Any]], extra: dict[str, list[str]] | None = None) -> bytes:
    names = list(columns) + list(extra or {})
    values = list(columns.values()) + list((extra or {}).values())
    lines = [",".join(names)]
    for row in zip(*values, strict=True):
        lines.append(",".join("" if v is None else str(v) for v in row))
    return ("\n".join(lines) + "\n").encode()


def as_parquet(columns: dict[str, list[Any]], extra: dict[str, list[Any]] | None = None) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table({**columns, **(extra or {})}), buffer, row_group_size=100)
    return buffer.getvalue()


def upload(  # type: ignore[no-untyped-def]
    client,
    content: bytes,
    *,
    schema_part: bool = False,
    expect: int = 201,
    content_type: str = "application/octet-stream",
    **form: str,
):
    """POST /v1/datasets with SCHEMA (a string field, or a pretty-printed file part)."""
    data = {"name": unique_name("curated"), **form}
    files: dict[str, Any] = {"file": ("data", io.BytesIO(content), content_type)}
    if schema_part:
        pretty = json.dumps(SCHEMA, indent=2).encode()
        files["schema"] = ("schema.json", pretty, "application/json")
    else:
        data["schema"] = json.dumps(SCHEMA)
    response = client.post("/v1/datasets", data=data, files=files, headers=ADMIN_HEADERS)
    assert response.status_code == expect, response.text
    body = response.json()
    return body["error"] if expect >= 400 else body


def fit_model(database, dataset_id: str) -> None:  # type: ignore[no-untyped-def]
    """The true marginals (no noise: a test only) as measurements, fitted and saved."""
    with database.read_only() as session:
        columns = load_columns(session, dataset_id)
    domain = parse_schema(SCHEMA).domain()
    measurements = []
    with database.unit_of_work() as session:
        job = Job(dataset_id=dataset_id, kind="measure", params={}, status="succeeded")
        session.add(job)
        session.flush()
        high_water = 0
        numbered = session.scalar(  # measurements the dataset has already
            select(func.count())
            .select_from(MeasurementRecord)
            .where(MeasurementRecord.dataset_id == dataset_id)
        )
        for position, attrs in enumerate(MEASURED):
            flat = np.ravel_multi_index([columns[a] for a in attrs], domain.shape(attrs))
            truth = np.bincount(flat, minlength=domain.cells(attrs)).astype(np.int64)
            record = MeasurementRecord(
                number=numbered + position + 1,
                dataset_id=dataset_id,
                job_id=job.id,
                position=position,
                attributes=list(attrs),
                noise="gaussian",
                scale=0.5,
                rho_units=1,
                values=pack_column(truth),
            )
            session.add(record)
            session.flush()
            high_water = record.id
            measurements.append(Measurement(attrs, truth, "gaussian", 0.5))
        model, fitted = fit(domain, measurements, max_iterations=300)
        model_service.save_version(
            session,
            dataset_id=dataset_id,
            model=model,
            record=fitted,
            high_water=high_water,
            measurement_count=len(measurements),
        )


@pytest.fixture(scope="module")
def world(api, client, database):  # type: ignore[no-untyped-def]
    columns = messy_frame(600)
    dataset = upload(client, as_csv(columns))
    tenant = api.create_tenant()
    api.grant(dataset["id"], tenant["id"], 1.0)
    fit_model(database, dataset["id"])
    with database.read_only() as session:
        stored = load_columns(session, dataset["id"])
    return {
        "columns": columns,
        "stored": stored,
        "base": f"/v1/datasets/{dataset['id']}",
        "headers": tenant["headers"],
        "dataset": dataset,
    }


def get(client, world, path: str, **params):  # type: ignore[no-untyped-def]
    response = client.get(world["base"] + path, params=params, headers=world["headers"])
    assert response.status_code == 200, response.text
    return response


def test_missing_cells_are_stored_as_the_last_code(world) -> None:  # type: ignore[no-untyped-def]
    columns, stored = world["columns"], world["stored"]
    for name, size in (("sex", 2), ("age", 3), ("kids", 3)):
        missing = np.array([v is None for v in columns[name]])
        assert ((stored[name] == size) == missing).all()
    assert world["dataset"]["attributes"][0]["missing"] is True


def test_marginals_label_the_missing_code_null(client, world) -> None:  # type: ignore[no-untyped-def]
    body = get(client, world, "/marginals", attrs="sex").json()
    assert body["values"] == [["F"], ["M"], [None]]
    truth = np.bincount(world["stored"]["sex"], minlength=3)
    np.testing.assert_allclose(body["counts"], truth, atol=1.0)
    body = get(client, world, "/marginals", attrs="age,kids").json()
    assert body["values"][-1] == [None, None] and len(body["values"]) == 16


def test_where_takes_null_in_counts_and_queries(client, world) -> None:  # type: ignore[no-untyped-def]
    stored = world["stored"]
    no_sex = int((stored["sex"] == 2).sum())
    count = get(client, world, "/count", where="sex:null").json()["count"]
    assert count == pytest.approx(no_sex, abs=1.0)
    both = get(client, world, "/count", where="sex:F,null").json()["count"]
    assert both == pytest.approx(int((stored["sex"] != 1).sum()), abs=1.0)
    response = client.post(
        world["base"] + "/queries",
        json={"queries": [{"where": {"sex": [None]}}, {"by": {"kids": "value"}}]},
        headers=world["headers"],
    )
    assert response.status_code == 200, response.text
    first, second = response.json()["answers"]
    assert first["values"][0] == pytest.approx(no_sex, abs=1.0)
    assert second["labels"] == [[0], [1], [2], [None]]
    # null on an attribute without missing values is an unknown value.
    response = client.get(
        world["base"] + "/count", params={"where": "region:null"}, headers=world["headers"]
    )
    assert response.status_code == 422 and "unknown value" in response.text


def test_ranges_and_cdfs_leave_the_missing_code_out(client, world) -> None:  # type: ignore[no-untyped-def]
    stored = world["stored"]
    with_age = int((stored["age"] < 3).sum())
    count = get(client, world, "/count", where="age:0..").json()["count"]
    assert count == pytest.approx(with_age, abs=1.0)
    response = client.post(
        world["base"] + "/queries",
        json={"queries": [{"by": {"age": "cdf"}}]},
        headers=world["headers"],
    )
    answer = response.json()["answers"][0]
    assert [label[0] for label in answer["labels"]] == ["< 30", "< 60", "<= 90"]
    assert answer["values"][-1] == pytest.approx(with_age, abs=1.0)


def test_moments_skip_missing_values_and_say_so(client, world) -> None:  # type: ignore[no-untyped-def]
    stored = world["stored"]
    response = client.post(
        world["base"] + "/queries",
        json={"queries": [{"moments": {"age": 2}}, {"moments": {"region": 1}}]},
        headers=world["headers"],
    )
    assert response.status_code == 422  # categorical: no moments, as before
    response = client.post(
        world["base"] + "/queries",
        json={"queries": [{"moments": {"age": 2}}]},
        headers=world["headers"],
    )
    assert response.status_code == 200, response.text
    answer = response.json()["answers"][0]
    midpoints = np.array([15.0, 45.0, 75.0])
    codes = stored["age"][stored["age"] < 3]
    expected = [midpoints[codes].sum(), (midpoints[codes] ** 2).sum()]
    np.testing.assert_allclose(answer["values"], expected, rtol=0.02)
    assert "skip its missing values" in answer["note"]


def test_synthetic_writes_missing_values_as_empty_cells(client, world) -> None:  # type: ignore[no-untyped-def]
    response = get(client, world, "/synthetic", rows=2000, seed=1)
    records = list(csv.DictReader(io.StringIO(response.text)))
    assert len(records) == 2000
    for name in ("sex", "age", "kids"):
        empty = sum(1 for r in records if r[name] == "")
        share = float(
            (world["stored"][name] == parse_schema(SCHEMA).attribute(name).value_size).mean()
        )
        assert empty / 2000 == pytest.approx(share, abs=0.05)
    assert all(r["region"] in ("n", "s") for r in records)
    assert all(r["age"] == "" or 0 <= float(r["age"]) <= 90 for r in records)


def test_empty_cells_without_the_option_are_refused_as_before(client) -> None:  # type: ignore[no-untyped-def]
    columns = messy_frame(50)
    columns["region"][7] = None
    body = upload(client, as_csv(columns), expect=422)
    assert body["code"] == "value_out_of_schema"
    assert body["column"] == "region" and body["lines"] == [9]


def test_parquet_uploads_like_the_same_csv(client, database) -> None:  # type: ignore[no-untyped-def]
    columns = messy_frame(400, seed=8)
    from_csv = upload(client, as_csv(columns))
    from_parquet = upload(client, as_parquet(columns))
    typed = upload(client, as_parquet(columns), content_type="application/vnd.apache.parquet")
    with database.read_only() as session:
        expected = load_columns(session, from_csv["id"])
        for dataset in (from_parquet, typed):
            got = load_columns(session, dataset["id"])
            for name in expected:
                np.testing.assert_array_equal(got[name], expected[name])


def test_a_bad_parquet_value_names_column_and_row_and_stores_nothing(client, database) -> None:  # type: ignore[no-untyped-def]
    columns = messy_frame(300, seed=9)
    columns["kids"][250] = 7
    with database.read_only() as session:
        before = session.scalar(select(func.count()).select_from(Dataset))
    body = upload(client, as_parquet(columns), expect=422)
    assert body["code"] == "value_out_of_schema"
    assert (body["column"], body["rows"]) == ("kids", [251])
    body = upload(client, b"PAR1 nothing", expect=422)
    assert body["code"] == "bad_parquet"
    with database.read_only() as session:
        assert session.scalar(select(func.count()).select_from(Dataset)) == before


def test_the_schema_may_be_a_file_part(client) -> None:  # type: ignore[no-untyped-def]
    dataset = upload(client, as_csv(messy_frame(40)), schema_part=True)
    assert [a["name"] for a in dataset["attributes"]] == ["sex", "age", "kids", "region"]
    response = client.post(
        "/v1/datasets",
        data={"name": unique_name("bad")},
        files={
            "file": ("d.csv", io.BytesIO(as_csv(messy_frame(5))), "text/csv"),
            "schema": ("schema.json", b"{not json", "application/json"),
        },
        headers=ADMIN_HEADERS,
    )
    assert response.status_code == 422 and "invalid schema" in response.text


# ---- the privacy unit ---------------------------------------------------------------

PEOPLE = 60


def people(seed: int = 5) -> tuple[dict[str, list[Any]], list[str]]:
    """Rows of PEOPLE persons, 1 to 5 rows each (about 3), with distinctive ids."""
    rng = np.random.default_rng(seed)
    per_person = rng.integers(1, 6, PEOPLE)
    ids = [f"zq-person-{i:04d}-x7" for i in range(PEOPLE)]
    columns = messy_frame(int(per_person.sum()), seed=seed)
    return columns, [ids[i] for i in range(PEOPLE) for _ in range(per_person[i])]


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_each_unit_keeps_at_most_k_rows(client, database, kind: str) -> None:  # type: ignore[no-untyped-def]
    columns, ids = people()
    counts = np.unique(np.array(ids), return_counts=True)[1]
    content = as_csv(columns, {"pid": ids}) if kind == "csv" else as_parquet(columns, {"pid": ids})
    unit = json.dumps({"column": "pid", "max_rows": 2})
    dataset = upload(client, content, privacy_unit=unit)
    assert dataset["rows"] == int(np.minimum(counts, 2).sum()) < len(ids)
    assert dataset["privacy_unit"] == {"column": "pid", "max_rows": 2}
    assert "pid" not in [a["name"] for a in dataset["attributes"]]
    with database.read_only() as session:
        row = session.get(Dataset, dataset["id"])
        assert (row.unit_column, row.unit_max_rows) == ("pid", 2)
        assert set(load_columns(session, dataset["id"])) == {"sex", "age", "kids", "region"}


def test_the_ids_are_stored_and_logged_nowhere(client, database, caplog) -> None:  # type: ignore[no-untyped-def]
    columns, ids = people(seed=6)
    caplog.set_level(logging.DEBUG)
    unit = json.dumps({"column": "pid", "max_rows": 3})
    dataset = upload(client, as_parquet(columns, {"pid": ids}), privacy_unit=unit)
    upload(client, as_csv(columns, {"pid": ids}), privacy_unit=unit)
    distinct = sorted(set(ids))
    # Every row of every table, as text: no id anywhere.
    with database.read_only() as session:
        dump = []
        for table in inspect(session.get_bind()).get_table_names():
            for row in session.execute(text(f'SELECT * FROM "{table}"')):
                dump.append(repr(tuple(row)))
    everything = "\n".join(dump)
    assert dataset["id"] in everything  # the scan does see the stored rows
    assert not [i for i in distinct if i in everything]
    assert not [i for i in distinct if i in caplog.text]


@pytest.mark.parametrize(
    ("field", "status", "code", "words"),
    [
        ('{"column": "pid"', 422, "bad_privacy_unit", "must be JSON"),
        ('{"column": "pid", "max_rows": 0}', 422, "bad_privacy_unit", "max_rows must be 1 to"),
        ('{"column": "sex", "max_rows": 2}', 422, "bad_privacy_unit", "is a schema attribute"),
        ('{"column": "visitor", "max_rows": 2}', 422, "bad_header", "missing column(s)"),
    ],
)
def test_bad_privacy_units_are_clear_422s(client, field, status, code, words) -> None:  # type: ignore[no-untyped-def]
    columns, ids = people()
    body = upload(client, as_csv(columns, {"pid": ids}), privacy_unit=field, expect=status)
    assert body["code"] == code and words in body["message"]


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_row_without_an_id_is_refused_by_position(client, kind: str) -> None:  # type: ignore[no-untyped-def]
    columns, ids = people()
    with_gap: list[Any] = list(ids)
    with_gap[4] = None if kind == "parquet" else ""
    content = (
        as_csv(columns, {"pid": with_gap})
        if kind == "csv"
        else as_parquet(columns, {"pid": with_gap})
    )
    unit = json.dumps({"column": "pid", "max_rows": 2})
    body = upload(client, content, privacy_unit=unit, expect=422)
    assert body["code"] == "missing_unit_id"
    assert body["column"] == "pid"
    assert body["lines" if kind == "csv" else "rows"] == [6 if kind == "csv" else 5]
    assert not any(i in body["message"] for i in ids)
