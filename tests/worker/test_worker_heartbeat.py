"""The heartbeat keeps a long job's lease: no other worker takes a job still running.

A job's lease is renewed every third of it by `app.worker.Heartbeat`, not only when the
job reports progress. Here a fit sits silent (no progress reported) for three leases of
2 s while another worker polls the queue: it must never claim the job, and the lease
expiry stored in the database must keep moving forward all along.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

import pytest
from conftest import ApiHelper, job_row
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database
from app.services import jobs, quarantine
from app.worker import Worker

LEASE_SECONDS = 2  # long enough that a loaded machine still renews every third of it
SILENT_SECONDS = 6.0  # three leases without a word of progress


def test_a_job_longer_than_its_lease_is_never_claimed_by_another_worker(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"], ["age"]], "rho": 0.1},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]

    silent = threading.Event()
    real_fit = quarantine.fit

    def silent_fit(*args: Any, **kwargs: Any) -> Any:
        silent.set()
        try:
            time.sleep(SILENT_SECONDS)  # no progress reported: only the heartbeat renews
        finally:
            silent.clear()
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(quarantine, "fit", silent_fit)
    short = settings.model_copy(update={"lease_seconds": LEASE_SECONDS})
    runner = Worker(database, short, worker_id="runner", poll_seconds=0.01)
    other = Worker(database, short, worker_id="other", poll_seconds=0.01)

    thread = threading.Thread(target=runner.run_once)
    thread.start()
    # The other worker starts polling only once the runner holds the job and is inside
    # its silent fit (before that, the other could simply claim the job first).
    assert silent.wait(timeout=60), "the runner never reached the fit"
    assert job_row(database, job_id).lease_owner == "runner"
    other_claims = 0
    expiries: list[datetime] = []  # the stored lease expiry, seen while the fit is silent
    deadline = time.monotonic() + 60
    while thread.is_alive() and time.monotonic() < deadline:
        if other.run_once():
            other_claims += 1
        job = job_row(database, job_id)
        if silent.is_set() and job.lease_expires_at is not None:
            expiries.append(job.lease_expires_at)
        time.sleep(0.05)
    thread.join(timeout=60)
    assert not thread.is_alive()

    assert other_claims == 0
    job = job_row(database, job_id)
    assert job.status == "succeeded", job.error
    assert job.attempts == 1
    # Renewed every third of the lease while the fit said nothing: ~9 renewals in 6 s.
    assert expiries == sorted(expiries)
    assert len(set(expiries)) >= 4, expiries
    assert (expiries[-1] - expiries[0]).total_seconds() >= SILENT_SECONDS / 2, expiries


def test_a_renewal_never_pulls_the_lease_expiry_back(
    api: ApiHelper, client: TestClient, database: Database
) -> None:
    """The heartbeat and a progress report renew from two threads; the one whose time was
    taken first can commit last. A renewal ending sooner than the stored expiry keeps it."""
    tenant, dataset = api.tenant_with_grant(1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.1},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    with database.unit_of_work() as session:
        claimed = jobs.claim(
            session, owner="runner", lease_seconds=60, is_sqlite=database.is_sqlite
        )
        assert claimed is not None and claimed.id == job_id
    long = job_row(database, job_id).lease_expires_at
    with database.unit_of_work() as session:  # as if computed a minute earlier
        assert jobs.renew(session, job_id=job_id, owner="runner", lease_seconds=1)
    assert job_row(database, job_id).lease_expires_at == long
    with database.unit_of_work() as session:  # a later expiry still moves it forward
        assert jobs.renew(session, job_id=job_id, owner="runner", lease_seconds=120)
    assert job_row(database, job_id).lease_expires_at > long
    with database.unit_of_work() as session:  # and another owner renews nothing
        assert not jobs.renew(session, job_id=job_id, owner="other", lease_seconds=600)
