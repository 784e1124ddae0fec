"""One dataset's measurements commit in id order, and a version's high-water mark is the
largest id its fit read: a job is never told that a version covers a measurement that
the version was fitted without."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from conftest import ApiHelper, job_row
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, MeasurementRecord, ModelVersion
from app.services import fits
from app.services import measurements as measurement_service
from app.services import mechanisms as mechanism_service
from app.worker import Worker


def _measured_dataset(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> tuple[str, str, int]:
    """(dataset id, a measurement job's id, cells of `sex`): one job run by a worker."""
    tenant, dataset = api.tenant_with_grant(1)
    job_id = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        headers=tenant["headers"],
        json={"marginals": [["sex"]], "rho": 0.5},
    ).json()["job_id"]
    worker = Worker(database, settings, poll_seconds=0.01)
    worker.run_until_idle()
    return dataset["id"], job_id, worker.domain_of(dataset["id"]).cells(("sex",))


def _store(session: Any, dataset_id: str, job_id: str, position: int, cells: int) -> int:
    record = measurement_service.store(
        session,
        dataset_id=dataset_id,
        job_id=job_id,
        position=position,
        attributes=("sex",),
        noise_kind="gaussian",
        scale=10.0,
        rho_units_used=1,
        values=np.full(cells, 5, dtype=np.int64),
        access_id=None,
    )
    return int(record.id)


def test_a_second_store_on_a_dataset_waits_for_the_first_to_commit(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    dataset_id, job_id, cells = _measured_dataset(client, api, database, settings)
    first = database.session()
    try:
        first_id = _store(first, dataset_id, job_id, 10, cells)  # flushed, not committed
        second: dict[str, int] = {}

        def store_second() -> None:
            with database.unit_of_work() as session:
                second["id"] = _store(session, dataset_id, job_id, 11, cells)

        thread = threading.Thread(target=store_second)
        thread.start()
        thread.join(timeout=1.0)
        # Without the dataset's lock the second row would take a larger id and could
        # commit before the first.
        assert thread.is_alive() and "id" not in second
        first.commit()
    finally:
        first.close()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert second["id"] > first_id


def test_a_version_covers_only_what_its_fit_read(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dataset_id, job_id, cells = _measured_dataset(client, api, database, settings)
    domain = Worker(database, settings).domain_of(dataset_id)
    real_list = measurement_service.list_for_dataset
    late: list[int] = []

    def list_then_commit_another(session: Any, dataset: str, **kwargs: Any) -> Any:
        listed = real_list(session, dataset, **kwargs)
        if not late:  # a measurement commits while the fit is reading
            with database.unit_of_work() as other:
                late.append(_store(other, dataset_id, job_id, 20, cells))
        return listed

    monkeypatch.setattr(measurement_service, "list_for_dataset", list_then_commit_another)
    assert fits.acquire(database, dataset_id, owner="fitter", lease_seconds=60)
    version = fits.fit_now(
        database,
        dataset_id,
        domain,
        owner="fitter",
        options=fits.FitOptions(),
        progress=lambda update: None,
        force=True,
    )
    assert version is not None and late
    with database.read_only() as session:
        row = session.query(ModelVersion).filter_by(dataset_id=dataset_id, version=version).one()
        high_water, fitted = row.high_water, row.measurement_count
    assert fitted == 1 and high_water < late[0]
    # the late measurement's job is not told that this version covers it
    assert fits.covering_version(database, dataset_id, late[0]) is None
    assert fits.covering_version(database, dataset_id, high_water) == version


def test_an_aim_model_is_not_saved_over_a_measurement_stored_while_it_ran(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dataset_id, job_id, cells = _measured_dataset(client, api, database, settings)
    real = mechanism_service.RUNNERS["aim"]
    late: list[int] = []

    def aim_while_another_job_stores(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        with database.unit_of_work() as session:  # after the run's final fit
            late.append(_store(session, dataset_id, job_id, 30, cells))
        return result

    monkeypatch.setitem(mechanism_service.RUNNERS, "aim", aim_while_another_job_stores)
    tenant = api.create_tenant()
    api.grant(dataset_id, tenant["id"], 1)
    aim = client.post(
        f"/v1/datasets/{dataset_id}/mechanisms/aim", json={"rho": 0.2}, headers=tenant["headers"]
    ).json()["job_id"]
    assert Worker(database, settings, poll_seconds=0.01).run_until_idle() == 1
    job = job_row(database, aim)
    assert job.status == "succeeded" and late
    with database.read_only() as session:
        row = (
            session.query(ModelVersion)
            .filter_by(dataset_id=dataset_id, version=job.model_version)
            .one()
        )
        covered = (
            session.query(MeasurementRecord)
            .filter(
                MeasurementRecord.dataset_id == dataset_id,
                MeasurementRecord.status == "active",
                MeasurementRecord.id <= row.high_water,
            )
            .count()
        )
    # the job's version was fitted on every measurement its high-water mark claims
    assert row.high_water >= late[0] and row.measurement_count == covered
