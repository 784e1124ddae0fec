"""`Privq-Unmeasured`: synthetic data, marginals, counts and queries name the attributes of
their answer that no measurement touched (the model spreads them uniformly), and say
nothing when every attribute was measured."""

from __future__ import annotations

from urllib.parse import unquote

import pytest

from app.api.unmeasured import UNMEASURED_HEADER, header_value
from app.worker import Worker


@pytest.fixture(scope="module")
def measured_sex(client, api, database, settings):  # type: ignore[no-untyped-def]
    """A tenant whose dataset (sex, age) has a model of one measurement: `sex` alone."""
    tenant, dataset = api.tenant_with_grant(1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.5},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    assert Worker(database, settings).run_until_idle() == 1
    return tenant["headers"], f"/v1/datasets/{dataset['id']}"


def test_a_marginal_names_its_unmeasured_attributes_in_a_header(client, measured_sex) -> None:
    headers, path = measured_sex
    both = client.get(f"{path}/marginals", params={"attrs": "sex,age"}, headers=headers)
    assert both.status_code == 200
    assert both.headers[UNMEASURED_HEADER] == "age"
    assert both.json()["unmeasured_attributes"] == ["age"]  # the same computation
    only_sex = client.get(f"{path}/marginals", params={"attrs": "sex"}, headers=headers)
    assert UNMEASURED_HEADER not in only_sex.headers  # only when there is one


def test_counts_and_queries_name_the_unmeasured_attributes_they_mention(
    client, measured_sex
) -> None:
    headers, path = measured_sex
    count = client.get(f"{path}/count", params=[("where", "age:30..45")], headers=headers)
    assert count.status_code == 200 and count.headers[UNMEASURED_HEADER] == "age"
    measured = client.get(f"{path}/count", params=[("where", "sex:F")], headers=headers)
    assert UNMEASURED_HEADER not in measured.headers
    queries = client.post(
        f"{path}/queries",
        json={"queries": [{"by": {"sex": "value"}}, {"where": {"age": {"ge": 18}}}]},
        headers=headers,
    )
    assert queries.status_code == 200 and queries.headers[UNMEASURED_HEADER] == "age"
    by_sex = client.post(
        f"{path}/queries", json={"queries": [{"by": {"sex": "value"}}]}, headers=headers
    )
    assert UNMEASURED_HEADER not in by_sex.headers


def test_synthetic_data_names_every_attribute_nothing_measured(client, measured_sex) -> None:
    headers, path = measured_sex
    response = client.get(f"{path}/synthetic", params={"rows": 20, "seed": 1}, headers=headers)
    assert response.status_code == 200
    assert response.headers[UNMEASURED_HEADER] == "age"


def test_names_outside_printable_ascii_are_percent_encoded() -> None:
    value = header_value(["âge", "income 50%", "sex"])
    assert value == "%C3%A2ge,income 50%25,sex"
    assert value.isascii()
    assert [unquote(name) for name in value.split(",")] == ["âge", "income 50%", "sex"]
