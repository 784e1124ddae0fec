"""An admin's purge, delete or revoke never deadlocks with a running job or a charge.

A job's gate and stores lock the job's row, then the dataset's. These admin actions
take the same rows in the same order: one that arrives while a store holds the job's
row waits for it, then answers as it would have (409 `jobs_pending`, or the revoke
cancels the job), and the store commits. A charge locks the tenant's grant, then
writes rows that point at the dataset; the admin's lock on the dataset lets those
writes through, and a purge or delete takes the grants' rows before its last look for
unfinished jobs, so it sees the job such a charge makes; a charge after a purge is
refused. In the other order, or with a lock that blocks them, the two would deadlock
on PostgreSQL and one of them would be aborted (SQLite runs one writer at a time:
there the tests check the answers only).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from conftest import ApiHelper, job_row
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Database
from app.errors import RecordsPurged
from app.pgm.domain import Domain
from app.services import jobs, ledger
from app.services import measurements as measurement_service
from app.services.rho import rho_units_ceil
from app.worker import Worker


def _queued_job(client: TestClient, api: ApiHelper) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(tenant, dataset, id of a queued measurement job of that tenant on it)."""
    tenant, dataset = api.tenant_with_grant(1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        headers=tenant["headers"],
        json={"marginals": [["sex"]], "rho": 0.5},
    )
    assert response.status_code == 202, response.text
    return tenant, dataset, response.json()["job_id"]


def _measure(
    session: Session, settings: Settings, tenant_id: str, dataset_id: str, domain: Domain
) -> str:
    """A tenant's measurement submitted in `session` (`measurements.submit`: the charge,
    then the job), uncommitted; the job's id."""
    job, _charge = measurement_service.submit(
        session,
        tenant_id=tenant_id,
        dataset_id=dataset_id,
        domain=domain,
        kind="measure",
        params={"marginals": [["sex"]]},
        rho_units_total=rho_units_ceil(Fraction(1, 2)),
        attribute_sets=[("sex",)],
        max_model_cells=settings.max_model_cells,
        idempotency_key=None,
        body_hash="lock-order",
        description="lock order",
    )
    return str(job.id)


def _beside(
    database: Database,
    hold: Callable[[Session], None],
    finish: Callable[[Session], str | None],
    request: Callable[[], Any],
) -> tuple[Any, str | None]:
    """In a session of its own, `hold` takes a first lock; `request()` (an admin's call)
    starts in a thread and must wait for it; then `finish` goes on in the same session and
    commits. (The admin's response, what `finish` returned.)"""
    answer: dict[str, Any] = {}
    session = database.session()
    try:
        hold(session)
        thread = threading.Thread(target=lambda: answer.update(response=request()))
        thread.start()
        thread.join(timeout=1.0)
        assert thread.is_alive(), "the admin's call did not wait for the first lock"
        result = finish(session)
        session.commit()
    finally:
        session.close()
    thread.join(timeout=30)
    assert not thread.is_alive()
    return answer["response"], result


def _beside_a_store(
    database: Database,
    settings: Settings,
    dataset_id: str,
    job_id: str,
    request: Callable[[], Any],
) -> Any:
    """`request()` while a store holds the job's row (as `RecordGate.store_fence` does); the
    store then locks the dataset's row (`measurements.store`), which the admin's call must
    not hold. The admin's response."""
    cells = Worker(database, settings).domain_of(dataset_id).cells(("sex",))

    def store(session: Session) -> None:
        measurement_service.store(
            session,
            dataset_id=dataset_id,
            job_id=job_id,
            position=0,
            attributes=("sex",),
            noise_kind="gaussian",
            scale=10.0,
            rho_units_used=1,
            values=np.full(cells, 5, dtype=np.int64),
            access_id=None,
        )

    def hold(session: Session) -> None:
        jobs.get(session, job_id, for_update=True)

    return _beside(database, hold, store, request)[0]


def _beside_a_charge(
    database: Database,
    settings: Settings,
    tenant_id: str,
    dataset_id: str,
    request: Callable[[], Any],
) -> tuple[Any, str]:
    """`request()` while a tenant's charge holds its grant's row (`ledger.charge` locks it
    first); the charge then writes its ledger line and job, rows that point at the dataset,
    which the admin's call must not block. (The admin's response, the job's id.)"""
    domain = Worker(database, settings).domain_of(dataset_id)

    def hold(session: Session) -> None:
        ledger.get_grant(session, tenant_id=tenant_id, dataset_id=dataset_id, for_update=True)

    def charge(session: Session) -> str | None:
        return _measure(session, settings, tenant_id, dataset_id, domain)

    response, job_id = _beside(database, hold, charge, request)
    assert job_id is not None
    return response, job_id


def _grant_path(client: TestClient, api: ApiHelper, tenant_id: str, dataset_id: str) -> str:
    """The path of the tenant's grant on the dataset."""
    grants = client.get(f"/v1/datasets/{dataset_id}/grants", headers=api.admin).json()
    (grant,) = [g for g in grants if g["tenant_id"] == tenant_id]
    return f"/v1/datasets/{dataset_id}/grants/{grant['id']}"


@pytest.mark.parametrize("action", ["records", "dataset"])
def test_a_purge_or_delete_beside_a_store_waits_and_is_refused(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings, action: str
) -> None:
    tenant, dataset, job_id = _queued_job(client, api)
    path = f"/v1/datasets/{dataset['id']}" + ("/records" if action == "records" else "")
    response = _beside_a_store(
        database, settings, dataset["id"], job_id, lambda: client.delete(path, headers=api.admin)
    )
    assert response.status_code == 409, response.text
    assert response.json()["error"]["code"] == "jobs_pending"
    assert response.json()["error"]["job_ids"] == [job_id]
    assert client.get(f"/v1/datasets/{dataset['id']}", headers=api.admin).status_code == 200
    cancelled = client.post(f"/v1/jobs/{job_id}/cancel", headers=tenant["headers"])
    assert cancelled.status_code == 200, cancelled.text


def test_a_revoke_beside_a_store_waits_and_cancels_the_job(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    tenant, dataset, job_id = _queued_job(client, api)
    path = _grant_path(client, api, tenant["id"], dataset["id"])
    response = _beside_a_store(
        database, settings, dataset["id"], job_id, lambda: client.delete(path, headers=api.admin)
    )
    assert response.status_code == 204, response.text
    assert job_row(database, job_id).status == "cancelled"


def test_a_revoke_beside_a_charge_waits_and_cancels_the_job_it_made(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    path = _grant_path(client, api, tenant["id"], dataset["id"])
    response, job_id = _beside_a_charge(
        database,
        settings,
        tenant["id"],
        dataset["id"],
        lambda: client.delete(path, headers=api.admin),
    )
    assert response.status_code == 204, response.text
    assert job_row(database, job_id).status == "cancelled"


@pytest.mark.parametrize("action", ["records", "dataset"])
def test_a_purge_or_delete_beside_a_charge_sees_the_job_it_makes(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings, action: str
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    path = f"/v1/datasets/{dataset['id']}" + ("/records" if action == "records" else "")
    response, job_id = _beside_a_charge(
        database,
        settings,
        tenant["id"],
        dataset["id"],
        lambda: client.delete(path, headers=api.admin),
    )
    # Without its last look under the grants' locks, the purge or delete would succeed and
    # leave this job queued on records that are gone.
    assert response.status_code == 409, response.text
    assert response.json()["error"]["job_ids"] == [job_id]
    assert client.get(f"/v1/datasets/{dataset['id']}", headers=api.admin).status_code == 200
    assert job_row(database, job_id).status == "queued"


def test_a_charge_after_a_purge_is_refused_and_writes_nothing(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    domain = Worker(database, settings).domain_of(dataset["id"])
    # the request's own checks passed before the purge; its charge comes after it
    purged = client.delete(f"/v1/datasets/{dataset['id']}/records", headers=api.admin)
    assert purged.status_code == 204, purged.text
    with database.session() as submit, pytest.raises(RecordsPurged):
        _measure(submit, settings, tenant["id"], dataset["id"], domain)
    ledger_lines = client.get(
        "/v1/ledger", headers=api.admin, params={"dataset_id": dataset["id"]}
    ).json()
    assert [line for line in ledger_lines if line["kind"] == "charge"] == []
