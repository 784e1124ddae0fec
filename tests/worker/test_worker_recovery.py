"""A worker killed mid-fit: the next worker finishes the job without drawing noise again.

Also: the noise in what the worker releases is OpenDP's discrete Gaussian.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest
from conftest import ApiHelper, adult_domain, adult_slice, job_row
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, LedgerEntry, MeasurementRecord
from app.worker import Worker

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stored_values(database: Database, job_id: str) -> list[bytes]:
    with database.read_only() as session:
        return [
            r.values
            for r in session.query(MeasurementRecord)
            .filter_by(job_id=job_id)
            .order_by(MeasurementRecord.position)
        ]


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def start_slow_worker(database_url: str, *, lease_seconds: int) -> subprocess.Popen[bytes]:
    """`privq worker` whose fits run until it is stopped (mirror descent, no tolerance)."""
    env = {
        **os.environ,
        "PRIVQ_DATABASE_URL": database_url,
        "PRIVQ_LEASE_SECONDS": str(lease_seconds),
        "PRIVQ_WORKER_POLL_SECONDS": "0.05",
        "PRIVQ_FIT_SOLVER": "mirror_descent",
        "PRIVQ_FIT_MAX_ITERATIONS": "100000000",
        "PRIVQ_FIT_TOLERANCE": "0",
        "PRIVQ_ADMIN_KEY": "unused-admin-key-for-the-worker-process",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "worker"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_until_fitting(database: Database, job_id: str) -> None:
    wait_for(
        lambda: (job_row(database, job_id).progress or {}).get("iteration", 0) > 0,
        timeout=60,
        what="the worker to be fitting",
    )


def test_worker_killed_during_the_fit_is_recovered_without_new_noise(
    client: TestClient, api: ApiHelper, database: Database, database_url: str, settings: Settings
) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(adult_slice(800), adult_domain())
    api.grant(dataset["id"], tenant["id"], 1)
    job_id = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["age"], ["sex"], ["age", "sex"], ["sex", "race"]], "rho": 0.5},
        headers=tenant["headers"],
    ).json()["job_id"]

    worker = start_slow_worker(database_url, lease_seconds=2)
    try:
        wait_until_fitting(database, job_id)
        before = stored_values(database, job_id)
        assert len(before) == 4
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert job_row(database, job_id).status == "running"

    # A new worker (the default solver) takes the job once the dead one's lease expires.
    survivor = Worker(database, settings.model_copy(update={"lease_seconds": 2}), poll_seconds=0.05)
    deadline = time.monotonic() + 60
    while job_row(database, job_id).status == "running" and time.monotonic() < deadline:
        survivor.run_once() or time.sleep(0.1)
    job = job_row(database, job_id)
    assert job.status == "succeeded", job.error
    assert job.attempts == 2
    assert job.model_version is not None
    assert stored_values(database, job_id) == before  # byte-identical: no noise drawn twice
    with database.read_only() as session:
        entries = session.query(LedgerEntry).filter_by(job_id=job_id).all()
    assert [(e.kind, e.rho_units) for e in entries] == [("charge", entries[0].rho_units)]


def test_released_noise_is_discrete_gaussian_with_the_stated_sigma(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.privacy import noise as opendp_noise

    calls: list[tuple[int, float]] = []
    sampler = opendp_noise.discrete_gaussian

    def spy(counts: np.ndarray, scale: float) -> np.ndarray:
        calls.append((counts.size, scale))
        return sampler(counts, scale)

    monkeypatch.setattr(opendp_noise, "discrete_gaussian", spy)
    # 10,000 cells: a 100 × 100 marginal of a dataset whose rows are all in one cell.
    tenant = api.create_tenant()
    schema = {"a": 100, "b": 100}
    dataset = api.upload_dataset("a,b\n" + "3,7\n" * 50, schema)
    api.grant(dataset["id"], tenant["id"], 1)
    sigma = 5.0
    job_id = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["a", "b"]], "sigma": sigma},
        headers=tenant["headers"],
    ).json()["job_id"]
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    assert job_row(database, job_id).status == "succeeded"
    released = client.get(
        f"/v1/datasets/{dataset['id']}/measurements", headers=tenant["headers"]
    ).json()[0]["values"]
    truth = np.zeros(10_000, dtype=np.int64)
    truth[3 * 100 + 7] = 50
    noise = np.asarray(released, dtype=np.int64) - truth
    assert all(isinstance(v, int) for v in released)
    # The discrete Gaussian's variance (slightly below σ² for σ = 5), from its pmf.
    support = np.arange(-200, 201)
    pmf = np.exp(-(support**2) / (2 * sigma**2))
    pmf /= pmf.sum()
    variance = float((pmf * support**2).sum())
    standard_error = variance * np.sqrt(2 / noise.size)
    assert abs(noise.var() - variance) < 5 * standard_error
    assert abs(noise.mean()) < 5 * np.sqrt(variance / noise.size)
    assert calls == [(10_000, sigma)]


@pytest.mark.parametrize("signal_to_send", [signal.SIGTERM])
def test_worker_stopped_gracefully_gives_its_job_back(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    database_url: str,
    signal_to_send: int,
) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(adult_slice(300), adult_domain())
    api.grant(dataset["id"], tenant["id"], 1)
    job_id = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["age", "sex"], ["sex", "race"]], "rho": 0.5},
        headers=tenant["headers"],
    ).json()["job_id"]
    worker = start_slow_worker(database_url, lease_seconds=300)
    try:
        wait_until_fitting(database, job_id)
        worker.send_signal(signal_to_send)
        assert worker.wait(timeout=20) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
    # Given back at once (not after the 300 s lease), with its measurements kept.
    job = job_row(database, job_id)
    assert job.status == "queued"
    assert job.lease_owner is None
    assert len(stored_values(database, job_id)) == 2
