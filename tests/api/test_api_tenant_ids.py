"""Tenant-visible ids reveal nothing about other datasets' activity (issue 44, audit 1).

Measurements are numbered in their dataset and ledger lines on their grant: however much
happens on other datasets (and other tenants' grants) first, a tenant's first
measurement is 1 and its first ledger line is 1, and the pagination cursors it is given
carry those numbers (and what the lines show), never the global keys.
"""

from __future__ import annotations

import base64
import json

import numpy as np
from sqlalchemy import select

from app.db import Job, LedgerEntry, MeasurementRecord
from app.services import measurements as measurement_service

MEASURE = {"marginals": [["sex"]], "noise": "gaussian", "rho": 0.01}


def decoded(cursor: str) -> list:
    return json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))


def cursor_of(response) -> str:
    target = response.links["next"]["url"]
    return target.split("cursor=")[1].split("&")[0]


def store_measurements(database, dataset_id: str, count: int) -> list[int]:
    """`count` measurements of the dataset as the worker stores them; their global keys."""
    keys = []
    with database.unit_of_work() as session:
        job = Job(dataset_id=dataset_id, kind="measure", params={})
        session.add(job)
        session.flush()
        for position in range(count):
            record = measurement_service.store(
                session,
                dataset_id=dataset_id,
                job_id=job.id,
                position=position,
                attributes=["sex"],
                noise_kind="gaussian",
                scale=1.0,
                rho_units_used=1,
                values=np.zeros(2, dtype=np.int64),
                access_id=None,
            )
            keys.append(record.id)
    return keys


def test_measurement_ids_and_cursors_count_only_the_dataset(client, api, database) -> None:
    _, elsewhere = api.tenant_with_grant(1)
    tenant, dataset = api.tenant_with_grant(1)
    store_measurements(database, elsewhere["id"], 5)  # activity the tenant cannot see
    keys = store_measurements(database, dataset["id"], 3)
    assert min(keys) > 5  # the global keys did count the other dataset's measurements

    url = f"/v1/datasets/{dataset['id']}/measurements"
    listed = client.get(url, headers=tenant["headers"])
    assert [m["id"] for m in listed.json()] == [1, 2, 3]
    first = client.get(url, params={"limit": 1}, headers=tenant["headers"])
    assert [m["id"] for m in first.json()] == [1]
    assert decoded(cursor_of(first)) == [1]
    rest = client.get(url, params={"cursor": cursor_of(first)}, headers=tenant["headers"])
    assert [m["id"] for m in rest.json()] == [2, 3]
    with database.read_only() as session:
        numbers = session.scalars(
            select(MeasurementRecord.number)
            .where(MeasurementRecord.dataset_id == elsewhere["id"])
            .order_by(MeasurementRecord.id)
        ).all()
    assert numbers == [1, 2, 3, 4, 5]


def test_ledger_line_ids_and_cursors_count_only_the_grant(client, api, database) -> None:
    other, elsewhere = api.tenant_with_grant(1)
    for _ in range(4):  # another tenant's charges on another dataset
        url = f"/v1/datasets/{elsewhere['id']}/measurements"
        assert client.post(url, json=MEASURE, headers=other["headers"]).status_code == 202
    tenant, dataset = api.tenant_with_grant(1)
    url = f"/v1/datasets/{dataset['id']}/measurements"
    for _ in range(3):
        assert client.post(url, json=MEASURE, headers=tenant["headers"]).status_code == 202

    ledger_url = f"/v1/datasets/{dataset['id']}/ledger"
    lines = client.get(ledger_url, headers=tenant["headers"]).json()
    assert [line["id"] for line in lines] == [1, 2, 3]
    with database.read_only() as session:
        keys = session.scalars(
            select(LedgerEntry.id).where(LedgerEntry.dataset_id == dataset["id"])
        ).all()
    assert min(keys) > 4  # the global keys counted the other tenant's lines

    first = client.get(ledger_url, params={"limit": 2}, headers=tenant["headers"])
    created_at, grant_id, number = decoded(cursor_of(first))
    assert (grant_id, number) == (lines[1]["grant_id"], 2)
    assert created_at.startswith(lines[1]["created_at"][:19])
    rest = client.get(ledger_url, params={"cursor": cursor_of(first)}, headers=tenant["headers"])
    assert [line["id"] for line in rest.json()] == [3]
