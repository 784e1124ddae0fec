"""Numbers as analysts see them, over HTTP on both backends: integer attributes (min, max,
a bin width) with integer labels, moments and synthetic values; one bin convention in
`where` and SQL (the last bin closed, `le` at its top edge); uploads that read only the
schema's columns; and a pretty-printed schema as a form field."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ADMIN_HEADERS, unique_name
from sqlalchemy import func, select

from app.db import Job, MeasurementRecord
from app.ingest import pack_column
from app.pgm.estimation import fit
from app.pgm.measurement import Measurement
from app.schema import parse_schema
from app.services import models as model_service
from app.services.columns import load_columns

SCHEMA: dict[str, Any] = {
    "attributes": [
        {"name": "day", "type": "integer", "min": 1, "max": 31},
        {"name": "hhmm", "type": "integer", "min": 0, "max": 2359, "width": 100},
        {"name": "wage", "type": "numeric", "bins": [0, 1000, 3000, 6000], "clip": True},
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
    ]
}
MEASURED = [("day", "sex"), ("hhmm", "sex"), ("wage", "sex")]
ROWS = 600


def table(rows: int = ROWS, seed: int = 4) -> dict[str, list[Any]]:
    rng = np.random.default_rng(seed)
    wage = rng.gamma(2.0, 900.0, rows).round(2)
    wage[:3] = [6000.0, 3000.0, 9000.0]  # the top edge itself, an inner edge, clipped
    return {
        "day": rng.integers(1, 32, rows).tolist(),
        "hhmm": (rng.integers(0, 24, rows) * 100 + rng.integers(0, 60, rows)).tolist(),
        "wage": wage.tolist(),
        "sex": rng.choice(["F", "M"], rows).tolist(),
    }


def as_csv(columns: dict[str, list[Any]]) -> bytes:
    lines = [",".join(columns)]
    lines += [",".join(map(str, row)) for row in zip(*columns.values(), strict=True)]
    return ("\n".join(lines) + "\n").encode()


def as_parquet(columns: dict[str, list[Any]]) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer)
    return buffer.getvalue()


def post_upload(client, content: bytes, schema_text: str, content_type: str = "text/csv"):  # type: ignore[no-untyped-def]
    return client.post(
        "/v1/datasets",
        data={"name": unique_name("numbers"), "schema": schema_text},
        files={"file": ("data", io.BytesIO(content), content_type)},
        headers=ADMIN_HEADERS,
    )


def fit_truth(database, dataset_id: str) -> None:  # type: ignore[no-untyped-def]
    """The true marginals (no noise: a test only) as measurements, fitted and saved."""
    with database.read_only() as session:
        columns = load_columns(session, dataset_id)
    domain = parse_schema(SCHEMA).domain()
    measurements = []
    with database.unit_of_work() as session:
        job = Job(dataset_id=dataset_id, kind="measure", params={}, status="succeeded")
        session.add(job)
        session.flush()
        numbered = session.scalar(
            select(func.count())
            .select_from(MeasurementRecord)
            .where(MeasurementRecord.dataset_id == dataset_id)
        )
        high_water = 0
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
    columns = table()
    # Columns the schema does not name: an unnamed index first, a note with commas.
    extra = {"": list(range(ROWS)), **columns, "note": ['"a, b"'] * ROWS}
    # The schema pretty-printed, as a string form field.
    response = post_upload(client, as_csv(extra), json.dumps(SCHEMA, indent=2))
    assert response.status_code == 201, response.text
    dataset = response.json()
    tenant = api.create_tenant()
    api.grant(dataset["id"], tenant["id"], 1.0)
    fit_truth(database, dataset["id"])
    with database.read_only() as session:
        stored = load_columns(session, dataset["id"])
    return {
        "columns": columns,
        "stored": stored,
        "dataset": dataset,
        "base": f"/v1/datasets/{dataset['id']}",
        "headers": tenant["headers"],
    }


def get(client, world, path: str, expect: int = 200, **params):  # type: ignore[no-untyped-def]
    response = client.get(world["base"] + path, params=params, headers=world["headers"])
    assert response.status_code == expect, response.text
    return response.json() if path != "/synthetic" else response.text


def post(client, world, path: str, body: dict[str, Any], expect: int = 200):  # type: ignore[no-untyped-def]
    response = client.post(world["base"] + path, json=body, headers=world["headers"])
    assert response.status_code == expect, response.text
    return response.json()


def test_a_pretty_printed_schema_is_accepted_and_its_columns_alone_are_read(world) -> None:  # type: ignore[no-untyped-def]
    assert [a["name"] for a in world["dataset"]["attributes"]] == ["day", "hhmm", "wage", "sex"]
    assert world["dataset"]["attributes"][1] == {
        "name": "hhmm",
        "type": "integer",
        "min": 0,
        "max": 2359,
        "width": 100,
        "clip": False,
    }
    columns, stored = world["columns"], world["stored"]
    assert set(stored) == {"day", "hhmm", "wage", "sex"}
    np.testing.assert_array_equal(stored["day"], np.array(columns["day"]) - 1)
    np.testing.assert_array_equal(stored["hhmm"], np.array(columns["hhmm"]) // 100)
    # [0, 1000), [1000, 3000), [3000, 6000]: 6000 itself and the clipped 9000 in the last.
    assert stored["wage"][:3].tolist() == [2, 2, 2]


def test_control_characters_other_than_json_whitespace_are_still_refused(client) -> None:  # type: ignore[no-untyped-def]
    content = as_csv(table(5))
    pretty = json.dumps(SCHEMA, indent="\t").replace("\n", "\r\n")
    assert post_upload(client, content, pretty).status_code == 201
    bell = post_upload(client, content, json.dumps(SCHEMA) + "\x07")
    assert bell.status_code == 422 and "U+0007" in bell.text
    escaped = json.loads(json.dumps(SCHEMA))
    escaped["attributes"][3]["values"] = ["F\nX", "M"]  # "\n" escaped in the JSON
    refused = post_upload(client, content, json.dumps(escaped))
    assert refused.status_code == 422 and "U+000A" in refused.text
    assert "names and values must not contain control characters" in refused.text


def test_parquet_uploads_read_only_the_schemas_columns(client, database, world) -> None:  # type: ignore[no-untyped-def]
    columns = world["columns"]
    wider = {"index": list(range(ROWS)), **columns, "tags": [[1, 2]] * ROWS}
    response = post_upload(client, as_parquet(wider), json.dumps(SCHEMA))
    assert response.status_code == 201, response.text
    with database.read_only() as session:
        stored = load_columns(session, response.json()["id"])
    for name, codes in world["stored"].items():
        np.testing.assert_array_equal(stored[name], codes, err_msg=name)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_fraction_in_an_integer_column_is_refused_naming_the_column(client, kind) -> None:  # type: ignore[no-untyped-def]
    columns = table(20)
    columns["hhmm"] = [float(v) for v in columns["hhmm"]]
    columns["hhmm"][12] = 1230.5
    content = as_csv(columns) if kind == "csv" else as_parquet(columns)
    response = post_upload(client, content, json.dumps(SCHEMA))
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "value_out_of_schema"
    where = ("lines", [14]) if kind == "csv" else ("rows", [13])  # the header is line 1
    assert (error["column"], error[where[0]]) == ("hhmm", where[1])
    assert "1230.5" in error["message"] and "not an integer" in error["message"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"min": 10, "max": 5}, "min (10) must not be greater than max (5)"),
        ({"width": 0}, "width must be at least 1, got 0"),
        ({"min": 1.5}, "min must be an integer"),
        ({"size": 24}, "give either size or min and max, not both"),
    ],
)
def test_integer_schemas_are_refused_with_clear_messages(client, change, words) -> None:  # type: ignore[no-untyped-def]
    schema = json.loads(json.dumps(SCHEMA))
    schema["attributes"][1].update(change)
    response = post_upload(client, as_csv(table(5)), json.dumps(schema))
    assert response.status_code == 422 and words in response.json()["error"]["message"]


def test_labels_are_integers_or_integer_bins(client, world) -> None:  # type: ignore[no-untyped-def]
    day = get(client, world, "/marginals", attrs="day")
    assert day["values"] == [[v] for v in range(1, 32)]
    hhmm = get(client, world, "/marginals", attrs="hhmm")
    labels = [cell[0] for cell in hhmm["values"]]
    assert labels[:2] == ["[0, 100)", "[100, 200)"] and labels[-1] == "[2300, 2359]"
    wage = get(client, world, "/marginals", attrs="wage")
    assert [cell[0] for cell in wage["values"]] == ["[0, 1000)", "[1000, 3000)", "[3000, 6000]"]


def test_moments_of_integer_attributes_sum_their_integer_values(client, world) -> None:  # type: ignore[no-untyped-def]
    body = {"queries": [{"moments": {"day": 2}}, {"moments": {"hhmm": 1}}]}
    day, hhmm = post(client, world, "/queries", body)["answers"]
    marginal = np.asarray(get(client, world, "/marginals", attrs="day")["counts"])
    values = np.arange(1, 32)
    np.testing.assert_allclose(day["values"], [marginal @ values, marginal @ values**2])
    # The model holds the exact day marginal: Σ day is the data's integer sum.
    assert day["values"][0] == pytest.approx(sum(world["columns"]["day"]), rel=1e-6)
    # A bin of integers stands for its integers' mean: 0..99 → 49.5, 2300..2359 → 2329.5.
    counts = np.asarray(get(client, world, "/marginals", attrs="hhmm")["counts"])
    means = np.arange(24) * 100 + 49.5
    means[-1] = 2329.5
    assert hhmm["values"][0] == pytest.approx(counts @ means, rel=1e-6)  # counts rounded


def test_synthetic_values_are_integers_and_numbers_inside_their_bins(client, world) -> None:  # type: ignore[no-untyped-def]
    text = get(client, world, "/synthetic", rows=2000, seed=3)
    records = list(csv.DictReader(io.StringIO(text)))
    assert len(records) == 2000
    day = [int(r["day"]) for r in records]  # int() refuses "18.364"
    hhmm = [int(r["hhmm"]) for r in records]
    assert min(day) >= 1 and max(day) <= 31 and len(set(day)) == 31
    assert min(hhmm) >= 0 and max(hhmm) <= 2359
    # Drawn among the bin's integers, not its first or middle one: most values of a bin.
    assert len(set(hhmm)) > 20 * 24
    # The bins of the synthetic records follow the model's hhmm marginal (rounding).
    counts = np.asarray(get(client, world, "/marginals", attrs="hhmm")["counts"])
    drawn = np.bincount(np.asarray(hhmm) // 100, minlength=24)
    np.testing.assert_allclose(drawn / 2000, counts / counts.sum(), atol=0.01)
    wage = np.array([float(r["wage"]) for r in records])
    assert wage.min() >= 0 and wage.max() <= 6000
    midpoints = {500.0, 2000.0, 4500.0}
    assert np.mean([w in midpoints for w in wage]) < 0.01


def test_where_takes_edges_as_edges(client, world) -> None:  # type: ignore[no-untyped-def]
    total = get(client, world, "/count")["count"]
    last = get(client, world, "/count", where="wage:3000..=6000")["count"]
    below = get(client, world, "/count", where="wage:..3000")["count"]
    assert below + last == pytest.approx(total, rel=1e-9)
    query = {"queries": [{"where": {"wage": {"ge": 3000, "le": 6000}}}]}
    assert post(client, world, "/queries", query)["answers"][0]["values"] == [pytest.approx(last)]
    # Integer bins: the first integer of a bin is an edge; an integer inside one is not.
    morning = get(client, world, "/count", where="hhmm:..1200")["count"]
    also = get(client, world, "/count", where="hhmm:..=1199")["count"]
    assert morning == pytest.approx(also)
    labelled = get(client, world, "/count", where="hhmm:[0, 100),[1100, 1200),[1000,1100)")
    sliced = get(client, world, "/count", where="hhmm:1000..1200")["count"]
    first = get(client, world, "/count", where="hhmm:..100")["count"]
    assert labelled["count"] == pytest.approx(sliced + first)
    days = get(client, world, "/count", where="day:10..=20")["count"]
    truth = sum(10 <= d <= 20 for d in world["columns"]["day"])
    assert days == pytest.approx(truth, rel=1e-3)


def test_sql_compares_integer_values_and_bin_edges(client, world) -> None:  # type: ignore[no-untyped-def]
    name = world["dataset"]["name"]

    def sql(query: str, expect: int = 200) -> dict[str, Any]:
        response = client.post(
            world["base"] + "/sql", json={"query": query}, headers=world["headers"]
        )
        assert response.status_code == expect, response.text
        return response.json()  # type: ignore[no-any-return]

    rows = sql(f'SELECT COUNT(*) AS n FROM "{name}" WHERE day >= 10 AND day <= 20')["rows"]
    assert rows[0][0] == pytest.approx(get(client, world, "/count", where="day:10..=20")["count"])
    total = sql(f'SELECT SUM(day) AS s FROM "{name}"')["rows"][0][0]
    assert total == pytest.approx(sum(world["columns"]["day"]), rel=1e-6)
    whole = sql(f'SELECT COUNT(*) FROM "{name}" WHERE wage <= 6000')["rows"][0][0]
    assert whole == pytest.approx(get(client, world, "/count")["count"])
    grouped = sql(f'SELECT day, COUNT(*) FROM "{name}" WHERE day < 4 GROUP BY day')["rows"]
    assert [row[0] for row in grouped] == [1, 2, 3]
