"""Several workers on one queue: each job runs once, one fit per dataset at a time, coalesced."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest
from conftest import ApiHelper, adult_domain, adult_slice
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, Job, MeasurementRecord, ModelVersion
from app.services import quarantine
from app.worker import Worker

JOBS = 6
WORKERS = 3


def test_many_workers_run_each_job_once_and_never_fit_a_dataset_twice_at_once(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(adult_slice(500), adult_domain())
    api.grant(dataset["id"], tenant["id"], 1)
    attributes = list(adult_domain())
    job_ids = [
        client.post(
            f"/v1/datasets/{dataset['id']}/measurements",
            json={"marginals": [[attributes[i], attributes[i + 1]]], "rho": 0.1},
            headers=tenant["headers"],
        ).json()["job_id"]
        for i in range(JOBS)
    ]

    running: dict[str, int] = {}
    overlaps: list[str] = []
    fits_run: list[int] = []
    guard = threading.Lock()
    real_fit = quarantine.fit  # what every model fit calls

    def watched_fit(domain: Any, measurements: Any, **kwargs: Any) -> Any:
        with guard:
            running[dataset["id"]] = running.get(dataset["id"], 0) + 1
            if running[dataset["id"]] > 1:
                overlaps.append(dataset["id"])
            fits_run.append(len(measurements))
        try:
            return real_fit(domain, measurements, **kwargs)
        finally:
            with guard:
                running[dataset["id"]] -= 1

    monkeypatch.setattr(quarantine, "fit", watched_fit)
    workers = [Worker(database, settings, poll_seconds=0.01) for _ in range(WORKERS)]
    threads = [threading.Thread(target=w.run_until_idle) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert overlaps == []
    with database.read_only() as session:
        jobs = {j.id: j for j in session.query(Job).filter(Job.id.in_(job_ids))}
        versions = {
            v.version: v.high_water
            for v in session.query(ModelVersion).filter_by(dataset_id=dataset["id"])
        }
        job_high_water = {
            job_id: max(r.id for r in session.query(MeasurementRecord).filter_by(job_id=job_id))
            for job_id in job_ids
        }
        assert session.query(MeasurementRecord).filter_by(dataset_id=dataset["id"]).count() == JOBS
    assert {j.status for j in jobs.values()} == {"succeeded"}
    assert all(j.attempts == 1 for j in jobs.values())
    # Coalescing: never more fits than jobs, and each job's version covers its measurements.
    assert len(fits_run) == len(versions) <= JOBS
    assert sorted(versions) == list(range(1, len(versions) + 1))
    for job_id, job in jobs.items():
        assert versions[job.model_version] >= job_high_water[job_id]
    # The last version includes every measurement of the dataset.
    assert fits_run[-1] == JOBS


def test_fits_of_different_datasets_run_at_once_and_of_one_dataset_never(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant = api.create_tenant()
    # Two datasets whose attribute names differ, so a fit tells which one it is for.
    lines = adult_slice(300).decode().splitlines()
    renamed = ",".join(f"b_{name}" for name in lines[0].split(","))
    datasets = [
        api.upload_dataset(adult_slice(300), adult_domain()),
        api.upload_dataset(
            "\n".join([renamed, *lines[1:]]) + "\n",
            {f"b_{name}": size for name, size in adult_domain().items()},
        ),
    ]
    for dataset in datasets:
        api.grant(dataset["id"], tenant["id"], 1)
    # Interleaved (oldest first: A, B, A, B, …), so the two workers claim one of each.
    for i, dataset in itertools.product(range(3), datasets):
        names = [a["name"] for a in dataset["attributes"]]
        response = client.post(
            f"/v1/datasets/{dataset['id']}/measurements",
            json={"marginals": [[names[i], names[i + 1]]], "rho": 0.1},
            headers=tenant["headers"],
        )
        assert response.status_code == 202
    running: dict[str, int] = {}
    most_at_once = {"any": 0, "same": 0}
    guard = threading.Lock()
    real_fit = quarantine.fit

    def slow_fit(domain: Any, measurements: Any, **kwargs: Any) -> Any:
        key = domain.attributes[0]
        with guard:
            running[key] = running.get(key, 0) + 1
            most_at_once["same"] = max(most_at_once["same"], running[key])
            most_at_once["any"] = max(most_at_once["any"], sum(running.values()))
        try:
            time.sleep(0.3)  # long enough for the other worker to start its fit
            return real_fit(domain, measurements, **kwargs)
        finally:
            with guard:
                running[key] -= 1

    monkeypatch.setattr(quarantine, "fit", slow_fit)
    workers = [Worker(database, settings, poll_seconds=0.01) for _ in range(2)]
    threads = [threading.Thread(target=w.run_until_idle) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert most_at_once == {"any": 2, "same": 1}
    with database.read_only() as session:
        statuses = {j.status for j in session.query(Job).filter(Job.tenant_id == tenant["id"])}
    assert statuses == {"succeeded"}
