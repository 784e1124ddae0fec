"""Retiring data: purge a dataset's raw records (free answers unchanged), delete a dataset."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import ADMIN_HEADERS
from sqlalchemy import func, select

from app.db import DatasetColumn, MeasurementRecord, ModelVersion
from app.errors import RecordsPurged
from app.worker import Worker

# (path, body): GET without a body, POST with one.
FREE_ANSWERS = [
    ("/model", None),
    ("/marginals?attrs=sex,age", None),
    ("/count?where=sex:F&where=age:18..45", None),
    ("/queries", {"queries": [{"by": {"age": "cdf"}, "where": {"sex": ["M"]}}]}),
    ("/synthetic?rows=50&seed=7", None),
]


def free_answers(client, dataset_id: str, headers: dict[str, str]) -> list[Any]:
    answers = []
    for path, body in FREE_ANSWERS:
        url = f"/v1/datasets/{dataset_id}{path}"
        response = (
            client.post(url, json=body, headers=headers)
            if body
            else client.get(url, headers=headers)
        )
        assert response.status_code == 200, (path, response.text)
        answers.append(response.text)
    return answers


def measured(client, api, database, settings) -> tuple[dict[str, Any], dict[str, Any], Worker]:
    tenant, dataset = api.tenant_with_grant(1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex", "age"]], "rho": 0.5},
        headers=tenant["headers"],
    )
    assert response.status_code == 202
    worker = Worker(database, settings, poll_seconds=0.01)
    assert worker.run_until_idle() == 1
    return tenant, dataset, worker


def count_rows(database, table: Any, dataset_id: str) -> int:
    with database.read_only() as session:
        return int(
            session.scalar(
                select(func.count()).select_from(table).where(table.dataset_id == dataset_id)
            )
            or 0
        )


def test_free_answers_are_unchanged_after_the_records_are_purged(
    client, api, database, settings
) -> None:
    tenant, dataset, worker = measured(client, api, database, settings)
    before = free_answers(client, dataset["id"], tenant["headers"])
    # Two attributes' codes, and the numeric one's places within its bins.
    assert count_rows(database, DatasetColumn, dataset["id"]) == 3
    assert worker.columns.holds(dataset["id"])  # the worker holds a decoded copy

    url = f"/v1/datasets/{dataset['id']}/records"
    assert client.delete(url, headers=tenant["headers"]).status_code == 403
    assert client.delete(url).status_code == 401
    assert client.delete(url, headers=ADMIN_HEADERS).status_code == 204
    assert count_rows(database, DatasetColumn, dataset["id"]) == 0
    assert free_answers(client, dataset["id"], tenant["headers"]) == before
    shown = client.get(f"/v1/datasets/{dataset['id']}", headers=tenant["headers"]).json()
    assert shown["records_purged_at"]

    # Measuring needs records: refused, nothing charged — dry runs and mechanisms too.
    for path, body, params in (
        ("/measurements", {"marginals": [["sex"]], "rho": 0.1}, {}),
        ("/measurements", {"marginals": [["sex"]], "rho": 0.1}, {"dry_run": True}),
        ("/mechanisms/aim", {"rho": 0.1}, {}),
        ("/mechanisms/mwem", {"rho": 0.1}, {"dry_run": True}),
    ):
        refused = client.post(
            f"/v1/datasets/{dataset['id']}{path}",
            json=body,
            params=params,
            headers=tenant["headers"],
        )
        assert refused.status_code == 409, (path, refused.text)
        assert refused.json()["error"]["code"] == "records_purged"
    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=tenant["headers"])
    assert budget.json()["rho_remaining_exact"] == "0.5"

    # The idle worker drops its copy; one asked to measure refuses.
    worker.forget_retired_columns()
    assert not worker.columns.holds(dataset["id"])
    with database.read_only() as session, pytest.raises(RecordsPurged):
        worker.columns.get(session, dataset["id"], ["sex"])
    assert client.delete(url, headers=ADMIN_HEADERS).status_code == 204  # again: no change


def test_purge_and_delete_wait_for_unfinished_jobs(client, api) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    job = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.1},
        headers=tenant["headers"],
    ).json()["job_id"]
    for url in (f"/v1/datasets/{dataset['id']}/records", f"/v1/datasets/{dataset['id']}"):
        refused = client.delete(url, headers=ADMIN_HEADERS)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "jobs_pending"
        assert refused.json()["error"]["job_ids"] == [job]
    client.post(f"/v1/jobs/{job}/cancel", headers=ADMIN_HEADERS)
    assert (
        client.delete(f"/v1/datasets/{dataset['id']}/records", headers=ADMIN_HEADERS).status_code
        == 204
    )


def test_deleting_a_dataset_keeps_only_the_ledger(client, api, database, settings) -> None:
    tenant, dataset, _worker = measured(client, api, database, settings)
    dataset_id = dataset["id"]
    assert client.delete(f"/v1/datasets/{dataset_id}", headers=tenant["headers"]).status_code == 403
    assert client.delete(f"/v1/datasets/{dataset_id}", headers=ADMIN_HEADERS).status_code == 204
    for table in (DatasetColumn, MeasurementRecord, ModelVersion):
        assert count_rows(database, table, dataset_id) == 0, table
    for headers in (tenant["headers"], ADMIN_HEADERS):
        for path in ("", "/model", "/marginals?attrs=sex", "/measurements"):
            response = client.get(f"/v1/datasets/{dataset_id}{path}", headers=headers)
            assert response.status_code == 404, path
        listed = client.get("/v1/datasets", params={"limit": 1000}, headers=headers).json()
        assert dataset_id not in [d["id"] for d in listed]
    lines = client.get("/v1/ledger", params={"dataset_id": dataset_id}, headers=ADMIN_HEADERS)
    assert [(e["kind"], e["rho_exact"]) for e in lines.json()] == [("charge", "0.5")]
    # The tenant's grant on it is revoked; the job history stays.
    tenant_view = client.get(f"/v1/tenants/{tenant['id']}", headers=ADMIN_HEADERS).json()
    assert tenant_view["grants"] == []
    jobs = client.get("/v1/jobs", params={"dataset_id": dataset_id}, headers=ADMIN_HEADERS)
    assert [j["status"] for j in jobs.json()] == ["succeeded"]
    assert client.delete(f"/v1/datasets/{dataset_id}", headers=ADMIN_HEADERS).status_code == 404
    # Nothing else the admin may do to a dataset reaches a deleted one.
    for method, path, body in (
        ("PATCH", "", {"estimator": "cgm-em"}),
        ("DELETE", "/records", None),
        ("POST", "/grants", {"tenant_id": tenant["id"], "rho": 1}),
        ("GET", "/grants", None),
    ):
        response = client.request(
            method, f"/v1/datasets/{dataset_id}{path}", json=body, headers=ADMIN_HEADERS
        )
        assert response.status_code == 404, (method, path, response.text)
