"""Every list route pages with `limit` and `cursor` and names the next page in `Link`."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from conftest import ADMIN_HEADERS

from app.db import new_id
from app.services import jobs, ledger
from app.services import measurements as measurement_service
from app.services.rho import rho_units

LINK = re.compile(r'^<([^>]+)>; rel="next"$')


def walk(client, url: str, headers: dict[str, str], **params: Any) -> list[list[dict[str, Any]]]:
    """Every page of a list, following `Link: <…>; rel="next"` until there is none."""
    pages = []
    response = client.get(url, params=params, headers=headers)
    while True:
        assert response.status_code == 200, response.text
        body = response.json()
        assert isinstance(body, list)
        pages.append(body)
        link = response.headers.get("link")
        if link is None:
            return pages
        match = LINK.match(link)
        assert match, link
        assert len(pages) < 100, "pagination does not end"
        response = client.get(match.group(1), headers=headers)


def flat_ids(pages: list[list[dict[str, Any]]]) -> list[Any]:
    return [item["id"] for page in pages for item in page]


def test_tenants_and_datasets_page_in_creation_order(client, api) -> None:
    everyone = flat_ids(walk(client, "/v1/tenants", ADMIN_HEADERS, limit=1000))
    made = [api.create_tenant()["id"] for _ in range(5)]
    pages = walk(client, "/v1/tenants", ADMIN_HEADERS, limit=2)
    assert all(len(page) == 2 for page in pages[:-1]) and 1 <= len(pages[-1]) <= 2
    ids = flat_ids(pages)
    assert len(ids) == len(set(ids))  # nobody twice
    assert ids[: len(everyone)] == everyone and ids[-5:] == made

    tenant = api.create_tenant()
    datasets = [api.upload_dataset()["id"] for _ in range(3)]
    for dataset_id in datasets:
        api.grant(dataset_id, tenant["id"], 0.1)
    visible = walk(client, "/v1/datasets", tenant["headers"], limit=2)
    assert [len(page) for page in visible] == [2, 1]
    assert flat_ids(visible) == datasets
    assert flat_ids(walk(client, "/v1/datasets", ADMIN_HEADERS, limit=3))[-3:] == datasets


def test_the_last_page_has_no_link_and_filters_stay_in_the_link(client, api, database) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    with database.unit_of_work() as session:
        for _ in range(5):
            ledger.charge(
                session, tenant_id=tenant["id"], dataset_id=dataset["id"], rho_units=rho_units(0.1)
            )
    url = f"/v1/datasets/{dataset['id']}/ledger"
    first = client.get(url, params={"limit": 2}, headers=tenant["headers"])
    link = LINK.match(first.headers["link"])
    assert link and "limit=2" in link.group(1) and "cursor=" in link.group(1)
    pages = walk(client, url, tenant["headers"], limit=2)
    assert [len(page) for page in pages] == [2, 2, 1]
    ids = flat_ids(pages)
    assert ids == sorted(ids)
    exact = client.get(url, params={"limit": 5}, headers=tenant["headers"])
    assert "link" not in exact.headers and len(exact.json()) == 5


def test_grants_page_with_spent_and_remaining(client, api, database) -> None:
    dataset = api.upload_dataset()
    tenants = [api.create_tenant() for _ in range(3)]
    for tenant in tenants:
        api.grant(dataset["id"], tenant["id"], 0.5)
    with database.unit_of_work() as session:
        ledger.charge(
            session,
            tenant_id=tenants[0]["id"],
            dataset_id=dataset["id"],
            rho_units=rho_units("0.125"),
        )
    pages = walk(client, f"/v1/datasets/{dataset['id']}/grants", ADMIN_HEADERS, limit=2)
    grants = [grant for page in pages for grant in page]
    assert [len(page) for page in pages] == [2, 1]
    assert [g["tenant_id"] for g in grants] == [t["id"] for t in tenants]
    assert (grants[0]["rho_spent_exact"], grants[0]["rho_remaining_exact"]) == ("0.125", "0.375")
    assert grants[1]["rho_remaining_exact"] == "0.5"


def test_measurements_page(client, api, database) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    job_id = new_id()
    with database.unit_of_work() as session:
        jobs.create(
            session,
            job_id=job_id,
            dataset_id=dataset["id"],
            tenant_id=tenant["id"],
            kind="measure",
            params={},
        )
        for position in range(3):
            measurement_service.store(
                session,
                access_id=None,  # a row written directly, as before accesses were recorded
                dataset_id=dataset["id"],
                job_id=job_id,
                position=position,
                attributes=["sex"],
                noise_kind="gaussian",
                scale=1.0,
                rho_units_used=1,
                values=np.array([position, 1]),
            )
    pages = walk(client, f"/v1/datasets/{dataset['id']}/measurements", tenant["headers"], limit=1)
    assert [page[0]["values"] for page in pages] == [[0, 1], [1, 1], [2, 1]]


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": 1001}, {"cursor": "not-a-cursor"}, {"cursor": "WyJ4Il0"}],
)
def test_bad_limits_and_cursors_are_422(client, params) -> None:
    response = client.get("/v1/tenants", params=params, headers=ADMIN_HEADERS)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_request"
