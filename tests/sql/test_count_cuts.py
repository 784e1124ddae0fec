"""`GET /count` with a range that cuts a bin: the bin's count spread uniformly within it,
`approximate: true`, and bounds that count the cut bin not at all and whole; ranges on
bin edges stay exact. Checked against the model's own marginals."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import unique_name
from test_sql_api import SCHEMA, _csv, _fit


@pytest.fixture(scope="module")
def world(api, database):
    tenant = api.create_tenant()
    dataset = api.upload_dataset(_csv(seed=9), SCHEMA, name=unique_name("cuts"))
    api.grant(dataset["id"], tenant["id"], 1.0)
    _fit(database, dataset["id"])
    return {"headers": tenant["headers"], "url": f"/v1/datasets/{dataset['id']}"}


def _count(client, world, *where):
    response = client.get(
        world["url"] + "/count", params={"where": list(where)}, headers=world["headers"]
    )
    assert response.status_code == 200, response.text
    return response.json()


def _marginal(client, world, attrs):
    body = client.get(
        world["url"] + "/marginals", params={"attrs": attrs}, headers=world["headers"]
    ).json()
    return np.array(body["counts"])


def test_a_range_that_cuts_a_bin_is_spread_with_bounds(client, world):
    age = _marginal(client, world, "age")  # bins [0, 18, 30, 45, 65, 120]
    body = _count(client, world, "age:30..37")
    assert body["approximate"] is True
    assert body["count"] == pytest.approx(7 / 15 * age[2], abs=0.01)
    low, high = body["bounds"]
    assert low == pytest.approx(0.0, abs=0.01) and high == pytest.approx(age[2], abs=0.01)
    body = _count(client, world, "age:20..50")
    assert body["count"] == pytest.approx(10 / 12 * age[1] + age[2] + 5 / 20 * age[3], abs=0.01)
    assert body["bounds"] == [
        pytest.approx(age[2], abs=0.01),
        pytest.approx(age[1:4].sum(), abs=0.01),
    ]


def test_ranges_on_edges_stay_exact(client, world):
    age = _marginal(client, world, "age")
    body = _count(client, world, "age:30..65")
    assert body["approximate"] is False
    assert body["count"] == pytest.approx(age[2:4].sum(), abs=0.01)
    assert body["bounds"] == [body["count"], body["count"]]
    assert _count(client, world, "age:65..")["approximate"] is False


def test_the_closed_last_bin_is_cut_by_its_high_edge(client, world):
    age = _marginal(client, world, "age")
    body = _count(client, world, "age:65..120")  # 120 itself is in [65, 120]
    assert body["approximate"] is True
    assert body["count"] == pytest.approx(age[4], abs=0.01)
    assert body["bounds"][0] == pytest.approx(0.0, abs=0.01)


def test_cut_ranges_combine_with_other_filters_and_repeats(client, world):
    joint = _marginal(client, world, "sex,age").reshape(2, 5)
    body = _count(client, world, "sex:F", "age:37..", "age:..50")  # repeats meet: [37, 50)
    assert body["approximate"] is True
    assert body["count"] == pytest.approx(8 / 15 * joint[0, 2] + 5 / 20 * joint[0, 3], abs=0.01)
    assert body["bounds"][0] == pytest.approx(0.0, abs=0.01)
    assert body["bounds"][1] == pytest.approx(joint[0, 2:4].sum(), abs=0.01)


def test_factored_queries_spread_a_cut_range_with_bounds(client, world):
    joint = _marginal(client, world, "sex,age").reshape(2, 5)
    where = {"age": {"ge": 30, "lt": 37}}
    response = client.post(
        world["url"] + "/queries",
        json={
            "queries": [
                {"where": where, "by": {"sex": "value"}},
                {"where": where, "moments": {"hours-per-week": 1}},
                {"where": {"age": {"ge": 30, "lt": 45}}, "by": {"sex": "value"}},
            ]
        },
        headers=world["headers"],
    )
    assert response.status_code == 200, response.text
    cut, moments, exact = response.json()["answers"]
    assert cut["approximate"] is True and "cuts a bin" in cut["note"]
    assert cut["values"] == pytest.approx(7 / 15 * joint[:, 2], abs=0.01)
    assert [low for low, _ in cut["bounds"]] == pytest.approx([0, 0], abs=0.01)
    assert [high for _, high in cut["bounds"]] == pytest.approx(joint[:, 2], abs=0.01)
    assert moments["approximate"] is True and moments["bounds"] is None
    assert "no bounds" in moments["note"]
    assert exact["approximate"] is False and exact["bounds"] is None
    assert exact["values"] == pytest.approx(joint[:, 2], abs=0.01)
