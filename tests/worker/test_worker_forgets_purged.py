"""Every worker drops its decoded copy of a dataset's records once they are purged.

A worker keeps the columns it decoded (`Worker.columns`). After a purge it must not
keep them in memory: an idle worker drops them between polls, and a busy one — running
a long job of another dataset — from its heartbeat, every third of the lease.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from conftest import ADMIN_HEADERS, ApiHelper, job_row
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database
from app.services import quarantine
from app.worker import Worker

LEASE_SECONDS = 1  # the heartbeat beats every third of it
WAIT_SECONDS = 30.0  # generous: a loaded machine still beats many times in this


def measure(client: TestClient, api: ApiHelper, marginal: str) -> tuple[str, str]:
    """A new dataset with one measurement job queued on it: (dataset id, job id)."""
    tenant, dataset = api.tenant_with_grant(1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [[marginal]], "rho": 0.1},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    return dataset["id"], response.json()["job_id"]


def worker_holding(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> tuple[Worker, str]:
    """A worker that ran a job of a new dataset and so holds its columns: (worker, id)."""
    dataset_id, _job = measure(client, api, "sex")
    short = settings.model_copy(update={"lease_seconds": LEASE_SECONDS})
    worker = Worker(database, short, poll_seconds=0.01)
    assert worker.run_until_idle() == 1
    assert worker.columns.holds(dataset_id)
    return worker, dataset_id


def purge(client: TestClient, dataset_id: str) -> None:
    url = f"/v1/datasets/{dataset_id}/records"
    assert client.delete(url, headers=ADMIN_HEADERS).status_code == 204


def wait_until_dropped(worker: Worker, dataset_id: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while worker.columns.holds(dataset_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not worker.columns.holds(dataset_id), "the worker still holds the purged records"


def test_a_busy_worker_drops_the_purged_records_from_its_heartbeat(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker, purged_id = worker_holding(client, api, database, settings)
    _other, job_id = measure(client, api, "age")

    fitting, finish = threading.Event(), threading.Event()
    real_fit = quarantine.fit

    def long_fit(*args: Any, **kwargs: Any) -> Any:
        fitting.set()
        finish.wait(timeout=2 * WAIT_SECONDS)  # busy: never idle while the test looks
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(quarantine, "fit", long_fit)
    runner = threading.Thread(target=worker.run_once)
    runner.start()
    try:
        assert fitting.wait(timeout=WAIT_SECONDS), "the worker never reached the fit"
        purge(client, purged_id)
        wait_until_dropped(worker, purged_id)
        assert runner.is_alive()  # dropped while the job was still running, not after
    finally:
        finish.set()
        runner.join(timeout=2 * WAIT_SECONDS)
    assert not runner.is_alive()
    assert job_row(database, job_id).status == "succeeded"


def test_an_idle_worker_drops_the_purged_records_between_polls(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    worker, purged_id = worker_holding(client, api, database, settings)
    stop = threading.Event()
    loop = threading.Thread(target=worker.run_forever, args=(stop,))
    loop.start()
    try:
        purge(client, purged_id)
        wait_until_dropped(worker, purged_id)
    finally:
        stop.set()
        loop.join(timeout=WAIT_SECONDS)
    assert not loop.is_alive()
