"""Moments with guaranteed bounds over HTTP: `POST /queries` (and SQL) answers over a
model fitted to a table's exact counts contain the table's true sums, whatever lies
inside the bins; exact (integer) attributes have bounds equal to their values.

The model is fitted in the test (no worker) from noise-free marginals — test-only
measurements, never a release — and saved with `save_version`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import unique_name
from sqlalchemy import func, select

from app.db import Job, MeasurementRecord
from app.ingest import pack_column
from app.pgm.estimation import fit
from app.pgm.measurement import Measurement
from app.schema import parse_schema
from app.services import models as model_service
from app.services.columns import load_columns

EDGES = [0, 10, 30, 100, 400]
SCHEMA = {
    "attributes": [
        {"name": "team", "type": "categorical", "values": ["a", "b", "c"]},
        {"name": "delay", "type": "numeric", "bins": EDGES},
        {"name": "day", "type": "integer", "size": 5},
    ]
}
MEASURED = [("team", "delay"), ("team", "day"), ("delay", "day")]


def _table(rows: int, seed: int) -> tuple[str, dict[str, np.ndarray]]:
    """A skewed table: delays mostly near the low edge of their bin (so midpoints are
    biased), values kept a little inside every bin so a near-exact fit stays within."""
    rng = np.random.default_rng(seed)
    team = rng.integers(0, 3, rows)
    delay = np.minimum(rng.exponential(25 + 20 * team), 399.0)
    day = rng.integers(0, 5, rows)
    lines = ["team,delay,day"] + [f"{'abc'[team[i]]},{delay[i]:.6f},{day[i]}" for i in range(rows)]
    return "\n".join(lines) + "\n", {"team": team, "delay": np.round(delay, 6), "day": day}


def _fit_exact(database, dataset_id: str) -> None:
    """Measurements equal to the true marginals (a tiny nominal scale), fitted and saved."""
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
                scale=0.01,
                rho_units=1,
                values=pack_column(truth),
            )
            session.add(record)
            session.flush()
            high_water = record.id
            measurements.append(Measurement(attrs, truth, "gaussian", 0.01))
        model, fitted = fit(domain, measurements, max_iterations=3000, tolerance=1e-10)
        model_service.save_version(
            session,
            dataset_id=dataset_id,
            model=model,
            record=fitted,
            high_water=high_water,
            measurement_count=len(measurements),
        )


@pytest.fixture(scope="module")
def table(api, database):
    text, truth = _table(800, seed=11)
    tenant = api.create_tenant()
    dataset = api.upload_dataset(text, SCHEMA, name=unique_name("bounds"))
    api.grant(dataset["id"], tenant["id"], 1.0)
    _fit_exact(database, dataset["id"])
    return {
        "tenant": tenant,
        "dataset": dataset,
        "base": f"/v1/datasets/{dataset['id']}",
        "truth": truth,
    }


def _queries(client, table, queries):
    response = client.post(
        table["base"] + "/queries", json={"queries": queries}, headers=table["tenant"]["headers"]
    )
    assert response.status_code == 200, response.text
    return response.json()["answers"]


def _all_finite(body) -> bool:
    if isinstance(body, float):
        return math.isfinite(body)
    if isinstance(body, dict):
        return all(_all_finite(v) for v in body.values())
    if isinstance(body, list):
        return all(_all_finite(v) for v in body)
    return True


def test_moment_bounds_contain_the_true_sums(client, table) -> None:
    (answer,) = _queries(client, table, [{"by": {"team": "value"}, "moments": {"delay": 2}}])
    truth = table["truth"]
    assert answer["estimates"] == {"delay": "midpoint"}
    assert len(answer["bounds"]) == len(answer["values"]) == 6
    assert _all_finite(answer)
    for index, (team, power) in enumerate((t, k) for t in range(3) for k in (1, 2)):
        true = float((truth["delay"][truth["team"] == team] ** power).sum())
        low, high = answer["bounds"][index]
        assert low <= answer["values"][index] <= high
        assert low - 1e-6 * true <= true <= high + 1e-6 * true
        # the midpoint estimate is off (values sit low in their bins), the bounds hold
        if power == 1:
            assert abs(answer["values"][index] - true) > 0.05 * true


def test_exact_attributes_have_bounds_equal_to_their_values(client, table) -> None:
    (answer,) = _queries(client, table, [{"moments": {"day": 2}}])
    assert answer["estimates"] == {"day": "exact"}
    for value, (low, high) in zip(answer["values"], answer["bounds"], strict=True):
        assert low == pytest.approx(value, rel=1e-6) and high == pytest.approx(value, rel=1e-6)
    truth = table["truth"]["day"]
    assert answer["values"] == pytest.approx([truth.sum(), (truth**2).sum()], rel=1e-4)


def test_negative_weights_keep_the_bounds_valid(client, table) -> None:
    weights = [1.0, -2.0, 0.5]
    (answer,) = _queries(client, table, [{"weights": {"team": weights}, "moments": {"delay": 1}}])
    truth = table["truth"]
    true = float(sum(w * truth["delay"][truth["team"] == t].sum() for t, w in enumerate(weights)))
    ((low, high),) = answer["bounds"]
    assert low <= answer["values"][0] <= high
    assert low - 1e-3 <= true <= high + 1e-3


def test_answers_without_moments_have_no_bounds(client, table) -> None:
    (answer,) = _queries(client, table, [{"by": {"team": "value"}}])
    assert answer["bounds"] is None and answer["estimates"] == {}


SQL_FUNCTIONS = ("SUM", "AVG", "VAR_POP", "STDDEV_SAMP")


def _true_aggregate(function: str, values: np.ndarray) -> float:
    if function == "SUM":
        return float(values.sum())
    if function == "AVG":
        return float(values.mean())
    if function == "VAR_POP":
        return float(values.var())
    return float(values.std(ddof=1))


def test_sql_bounds_contain_the_true_aggregates(client, table) -> None:
    name = table["dataset"]["name"]
    columns = ", ".join(f"{f}(delay)" for f in SQL_FUNCTIONS)
    query = f'SELECT team, {columns}, COUNT(*) AS n FROM "{name}" GROUP BY team ORDER BY team'
    response = client.post(
        table["base"] + "/sql", json={"query": query}, headers=table["tenant"]["headers"]
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["estimates"] == [None, *["midpoint"] * len(SQL_FUNCTIONS), None]
    assert len(body["bounds"]) == len(body["rows"]) == 3
    assert _all_finite(body)
    truth = table["truth"]
    for team, (row, bounds) in enumerate(zip(body["rows"], body["bounds"], strict=True)):
        assert bounds[0] is None and bounds[-1] is None
        values = truth["delay"][truth["team"] == team]
        for function, value, (low, high) in zip(
            SQL_FUNCTIONS, row[1:-1], bounds[1:-1], strict=True
        ):
            true = _true_aggregate(function, values)
            assert low <= value <= high
            assert low - 1e-4 * true <= true <= high + 1e-4 * true, function

    csv_response = client.post(
        table["base"] + "/sql",
        json={"query": f'SELECT AVG(delay) AS mean FROM "{name}"'},
        headers={**table["tenant"]["headers"], "Accept": "text/csv"},
    )
    header, line = csv_response.text.splitlines()
    assert header == "mean,mean_low,mean_high"
    mean, low, high = (float(cell) for cell in line.split(","))
    assert low <= truth["delay"].mean() <= high and low <= mean <= high


def test_client_returns_bounds_as_columns(client, table) -> None:
    from privq_client import Client

    analyst = Client("http://testserver", table["tenant"]["api_key"], http_client=client)
    frame = analyst.sql(
        table["dataset"]["id"],
        f'SELECT team, AVG(delay) AS mean FROM "{table["dataset"]["name"]}" GROUP BY team',
    )
    assert list(frame.columns) == ["team", "mean", "mean_low", "mean_high"]
    assert (frame["mean_low"] <= frame["mean"]).all() and (
        frame["mean"] <= frame["mean_high"]
    ).all()
    assert frame.attrs["estimates"] == [None, "midpoint"]
    moments = analyst.query(table["dataset"]["id"], by={"team": "value"}, moments={"delay": 1})
    assert list(moments.columns) == ["team", "delay", "value", "low", "high"]
    assert (moments["low"] <= moments["value"]).all() and (
        moments["value"] <= moments["high"]
    ).all()
    assert moments.attrs["estimates"] == {"delay": "midpoint"}
