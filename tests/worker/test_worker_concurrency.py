"""Several workers on one queue: each job runs once, one fit per dataset at a time, coalesced."""

from __future__ import annotations

import threading
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
