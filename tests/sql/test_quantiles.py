"""Quantiles from the model: MEDIAN, PERCENTILE_CONT, MIN and MAX in SQL and
`GET /quantiles`, checked against the model's own counts — each value inside the bin
it names, the model's mass below it p of the total, integers for integer attributes —
and the 422s for categorical and unknown attributes and p outside [0, 1]."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import unique_name
from sql_fixtures import AGE_MIDPOINTS, MISSING, Joint, answer, loaded, random_model
from test_sql_api import SCHEMA, _csv, _fit

from app.sql.quantiles import code_intervals, extreme, quantile

AGE_EDGES = [0, 18, 30, 45, 65, 120]


def _row_bins(body):
    """`bins` (per column: null, or an interval per row) as one list per row."""
    rows = len(body["rows"])
    return [[None if c is None else c[r] for c in body["bins"]] for r in range(rows)]


def _mass_below(counts: np.ndarray, edges: list[float], value: float) -> float:
    """The model's mass below `value` when each bin's count is spread evenly over it."""
    below = 0.0
    for code, count in enumerate(counts):
        low, high = edges[code], edges[code + 1]
        below += count * min(max((value - low) / (high - low), 0.0), 1.0)
    return below


def test_quantile_of_known_counts_interpolates_within_its_bin():
    from app.schema import parse_schema

    schema = parse_schema(
        {"attributes": [{"name": "x", "type": "numeric", "bins": [0, 10, 20, 30]}]}
    )
    intervals = code_intervals(schema.attribute("x"))
    counts = np.array([10.0, 30.0, 60.0])
    median = quantile(counts, intervals, 0.5)
    # 50 of 100: 40 lie below 20, so 10 of the last bin's 60 → 20 + 10·(10/60).
    assert median.value == pytest.approx(20 + 10 * 10 / 60)
    assert (median.low, median.high) == (20, 30)
    assert quantile(counts, intervals, 0.0).value == 0.0
    assert quantile(counts, intervals, 1.0).value == 30.0
    assert quantile(np.zeros(3), intervals, 0.5) is None
    # MIN/MAX: bins whose estimated count reaches half a record.
    assert extreme(np.array([0.2, 3.0, 0.4]), intervals, highest=False).value == 10
    assert extreme(np.array([0.2, 3.0, 0.4]), intervals, highest=True).value == 20
    assert extreme(np.array([0.2, 0.3, 0.4]), intervals, highest=True) is None


@pytest.fixture(scope="module")
def model():
    schema, fitted = random_model(seed=5)
    return loaded(schema, fitted), Joint(fitted)


def test_sql_quantiles_match_the_models_own_marginal(model):
    served, joint = model
    body = answer(
        served,
        "SELECT race, MEDIAN(age), PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY age), "
        "MIN(age), MAX(age) FROM people WHERE sex = 'F' GROUP BY race",
    )
    assert body["columns"][1:] == ["median(age)", "percentile_cont(0.9)", "min(age)", "max(age)"]
    female = joint.code("sex") == 0
    for row, bins in zip(body["rows"], _row_bins(body), strict=True):
        race = ["asian", "black", "white"].index(row[0])
        where = female & (joint.code("race") == race)
        counts = np.array([joint.count(where & (joint.code("age") == c)) for c in range(5)])
        for p, value, interval in ((0.5, row[1], bins[1]), (0.9, row[2], bins[2])):
            low, high = interval
            assert low <= value <= high
            assert [low, high] in [AGE_EDGES[i : i + 2] for i in range(5)]
            assert _mass_below(counts, AGE_EDGES, value) == pytest.approx(p * counts.sum())
        holding = np.flatnonzero(counts >= 0.5)
        assert row[3] == AGE_EDGES[holding[0]] and bins[3][0] == row[3]
        assert row[4] == AGE_EDGES[holding[-1] + 1] and bins[4][1] == row[4]
        assert bins[0] is None  # a grouped attribute has no interval


def test_sql_quantiles_of_an_integer_attribute_are_integers(model):
    served, joint = model
    body = answer(
        served, "SELECT sex, MEDIAN(hours), MIN(hours), MAX(hours) FROM people GROUP BY sex"
    )
    for row, bins in zip(body["rows"], _row_bins(body), strict=True):
        sex = ["F", "M"].index(row[0])
        where = joint.code("sex") == sex
        counts = np.array([joint.count(where & (joint.code("hours") == c)) for c in range(4)])
        median = row[1]
        assert isinstance(median, int) and bins[1] == [median, median]
        # The median integer: less than half the mass below it, at least half up to it.
        assert counts[:median].sum() < 0.5 * counts.sum() <= counts[: median + 1].sum()
        assert all(isinstance(v, int) for v in row[2:])
    # the "no value" code of hours is no integer: never a quantile
    assert MISSING["hours"] == 4


def test_sql_median_of_a_grouped_attribute_is_inside_its_own_group(model):
    served, _ = model
    body = answer(served, "SELECT age, MEDIAN(age) FROM people GROUP BY age")
    for row, bins in zip(body["rows"], _row_bins(body), strict=True):
        low, high = bins[1]
        assert row[0].startswith(f"[{low:g},") and low <= row[1] <= high
        assert row[1] == pytest.approx(AGE_MIDPOINTS[AGE_EDGES.index(low)])


# ---- GET /quantiles ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(api, database):
    tenant = api.create_tenant()
    dataset = api.upload_dataset(_csv(), SCHEMA, name=unique_name("quantiles"))
    api.grant(dataset["id"], tenant["id"], 1.0)
    _fit(database, dataset["id"])
    return {"headers": tenant["headers"], "url": f"/v1/datasets/{dataset['id']}"}


def test_quantiles_route_reads_the_one_way_marginal(client, world):
    response = client.get(
        world["url"] + "/quantiles",
        params={"attr": "age", "p": "0,0.5,0.9,1"},
        headers=world["headers"],
    )
    assert response.status_code == 200, response.text
    body = response.json()
    marginal = client.get(
        world["url"] + "/marginals", params={"attrs": "age"}, headers=world["headers"]
    ).json()
    counts = np.array(marginal["counts"])
    assert [q["p"] for q in body["quantiles"]] == [0, 0.5, 0.9, 1]
    for item in body["quantiles"]:
        low, high = item["bin"]
        assert low <= item["value"] <= high
        assert _mass_below(counts, AGE_EDGES, item["value"]) == pytest.approx(
            item["p"] * counts.sum(), abs=0.01
        )
    holding = np.flatnonzero(counts >= body["min_max_count"])
    assert body["min"] == {
        "value": AGE_EDGES[holding[0]],
        "bin": AGE_EDGES[holding[0] : holding[0] + 2],
    }
    assert body["max"]["value"] == AGE_EDGES[holding[-1] + 1]
    assert body["count"] == pytest.approx(counts.sum(), abs=0.01)


def test_quantiles_route_gives_integers_for_integer_attributes(client, world):
    body = client.get(
        world["url"] + "/quantiles", params={"attr": "hours-per-week"}, headers=world["headers"]
    ).json()
    assert [q["p"] for q in body["quantiles"]] == [0.25, 0.5, 0.75]
    for item in body["quantiles"]:
        assert isinstance(item["value"], int) and item["bin"] == [item["value"], item["value"]]
    assert isinstance(body["min"]["value"], int) and isinstance(body["max"]["value"], int)


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"attr": "sex"}, "categorical"),
        ({"attr": "colour"}, "colour"),
        ({"attr": "age", "p": "1.5"}, "outside [0, 1]"),
        ({"attr": "age", "p": "0.5,-0.1"}, "outside [0, 1]"),
        ({"attr": "age", "p": "half"}, "not a number"),
    ],
)
def test_quantiles_route_refuses_with_422(client, world, params, words):
    response = client.get(world["url"] + "/quantiles", params=params, headers=world["headers"])
    assert response.status_code == 422, response.text
    assert words in response.json()["error"]["message"]


def test_client_quantiles_is_a_frame_of_the_routes_answer(client, world):
    from privq_client import Client

    key = world["headers"]["Authorization"].split()[-1]
    analyst = Client("http://testserver", key, http_client=client)
    dataset_id = world["url"].rsplit("/", 1)[-1]
    frame = analyst.quantiles(dataset_id, "age", p=[0.1, 0.5])
    body = client.get(
        world["url"] + "/quantiles",
        params={"attr": "age", "p": "0.1,0.5"},
        headers=world["headers"],
    ).json()
    assert list(frame.columns) == ["p", "value", "low", "high"]
    assert frame["value"].tolist() == [q["value"] for q in body["quantiles"]]
    assert frame["low"].tolist() == [q["bin"][0] for q in body["quantiles"]]
    assert frame.attrs["max"] == body["max"]
