"""The per-dataset fit lock: one holder at a time, leases expire, a lost holder saves nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from conftest import ApiHelper
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, FitLock, ModelVersion, utcnow
from app.services import fits
from app.worker import Worker


def expire(database: Database, dataset_id: str) -> None:
    with database.unit_of_work() as session:
        lock = session.get(FitLock, dataset_id)
        assert lock is not None
        lock.lease_expires_at = utcnow() - timedelta(seconds=1)


def test_fit_lock_is_exclusive_until_released_or_expired(
    api: ApiHelper, database: Database
) -> None:
    _tenant, dataset = api.tenant_with_grant(1)
    dataset_id = dataset["id"]
    assert fits.acquire(database, dataset_id, owner="a", lease_seconds=60)
    assert fits.acquire(database, dataset_id, owner="a", lease_seconds=60)  # re-entrant
    assert not fits.acquire(database, dataset_id, owner="b", lease_seconds=60)
    assert not fits.renew(database, dataset_id, owner="b", lease_seconds=60)
    fits.release(database, dataset_id, owner="b")  # not b's to release
    assert not fits.acquire(database, dataset_id, owner="b", lease_seconds=60)
    fits.release(database, dataset_id, owner="a")
    assert fits.acquire(database, dataset_id, owner="b", lease_seconds=60)
    expire(database, dataset_id)
    assert fits.acquire(database, dataset_id, owner="c", lease_seconds=60)


def test_a_fit_whose_lock_was_taken_over_saves_no_version(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    dataset_id = dataset["id"]
    client.post(
        f"/v1/datasets/{dataset_id}/measurements",
        headers=tenant["headers"],
        json={"marginals": [["sex"], ["age"]], "rho": 0.5},
    )
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    domain = Worker(database, settings).domain_of(dataset_id)

    assert fits.acquire(database, dataset_id, owner="slow", lease_seconds=60)
    expire(database, dataset_id)
    assert fits.acquire(database, dataset_id, owner="fast", lease_seconds=60)
    with pytest.raises(fits.FitLockLost):
        fits.fit_now(
            database,
            dataset_id,
            domain,
            owner="slow",
            options=fits.FitOptions(),
            progress=lambda update: None,
        )
    with database.read_only() as session:
        assert session.query(ModelVersion).filter_by(dataset_id=dataset_id).count() == 1
    version = fits.fit_now(
        database,
        dataset_id,
        domain,
        owner="fast",
        options=fits.FitOptions(),
        progress=lambda update: None,
    )
    assert version == 2
