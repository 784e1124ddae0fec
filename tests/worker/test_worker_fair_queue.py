"""One job slot, two tenants: A's long mechanism job gives its slot to B's short jobs
between rounds and still finishes, with its ledger exact and no round drawn twice; with
fairness off the queue is first come, first served. Queue positions over the API."""

from __future__ import annotations

import itertools
from datetime import datetime
from fractions import Fraction
from typing import Any

from conftest import ADMIN_HEADERS, ApiHelper, adult_domain, adult_slice, job_row
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.config import Settings
from app.db import Database, Job, LedgerEntry, MeasurementRecord, RecordAccess
from app.services import gate
from app.services.refunds import units_up
from app.worker import Worker
from app.worker.runner import REQUEUED_STAGE

PAIRS = [["age", "sex"], ["race", "sex"], ["workclass", "sex"], ["age", "race"]]


class CountingWorker(Worker):
    """A worker that notes the stage of every job it gives back."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.given_back: list[tuple[str, str]] = []

    def _give_back(
        self, job: Job, *, attempt_spent: bool = True, stage: str = REQUEUED_STAGE
    ) -> None:
        self.given_back.append((job.id, stage))
        super()._give_back(job, attempt_spent=attempt_spent, stage=stage)


def one_slot(database: Database, settings: Settings, *, fair: bool) -> CountingWorker:
    # A waiting job counts after two polls of an idle slot: 0.1 s here.
    quick = settings.model_copy(update={"worker_poll_seconds": 0.05, "fair_queue": fair})
    return CountingWorker(database, quick, poll_seconds=0.01)


def submit_mwem(client: TestClient, tenant: dict[str, Any], dataset_id: str, rounds: int) -> str:
    response = client.post(
        f"/v1/datasets/{dataset_id}/mechanisms/mwem",
        json={"rho": 0.5, "workload": PAIRS, "rounds": rounds},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


def submit_measure(client: TestClient, tenant: dict[str, Any], dataset_id: str) -> str:
    response = client.post(
        f"/v1/datasets/{dataset_id}/measurements",
        json={"marginals": [["relationship"]], "rho": 0.01},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


def round_times(database: Database, job_id: str) -> list[datetime]:
    with database.read_only() as session:
        return list(
            session.scalars(
                select(MeasurementRecord.created_at)
                .where(MeasurementRecord.job_id == job_id)
                .order_by(MeasurementRecord.position)
            )
        )


def two_tenants(api: ApiHelper) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    dataset = api.upload_dataset(adult_slice(1000), adult_domain())
    a, b = api.create_tenant(), api.create_tenant()
    for tenant in (a, b):
        api.grant(dataset["id"], tenant["id"], 1)
    return a, b, dataset


def test_a_long_mechanism_job_yields_to_another_tenants_jobs_and_still_finishes(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    a, b, dataset = two_tenants(api)
    rounds = 12
    a_job = submit_mwem(client, a, dataset["id"], rounds)
    b_jobs = [submit_measure(client, b, dataset["id"]) for _ in range(3)]

    worker = one_slot(database, settings, fair=True)
    worker.run_until_idle()

    a_row, b_rows = job_row(database, a_job), [job_row(database, j) for j in b_jobs]
    assert a_row.status == "succeeded", a_row.error
    assert all(row.status == "succeeded" for row in b_rows)
    # B's jobs all finished before A's, A gave its slot back for each of them, and never
    # spent an attempt doing so.
    assert max(row.finished_at for row in b_rows) < a_row.finished_at  # type: ignore[operator]
    yields = [job_id for job_id, stage in worker.given_back if stage == "yielded"]
    assert yields and set(yields) == {a_job} and len(yields) >= len(b_jobs)
    assert a_row.attempts == 1
    # No starvation: A stored a round between any two of B's jobs (it had its turn).
    times = round_times(database, a_job)
    ends = sorted(row.finished_at for row in b_rows if row.finished_at is not None)
    for earlier, later in itertools.pairwise(ends):
        assert any(earlier < t < later for t in times)
    # Nothing drawn twice: one access a round, each with its stored round, none lost.
    with database.read_only() as session:
        accesses = list(session.scalars(select(RecordAccess).where(RecordAccess.job_id == a_job)))
        positions = list(
            session.scalars(
                select(MeasurementRecord.position).where(MeasurementRecord.job_id == a_job)
            )
        )
        assert gate.lost_accesses(session, a_job) == []
        ledger = [
            (e.kind, e.rho_units)
            for e in session.scalars(select(LedgerEntry).where(LedgerEntry.job_id == a_job))
        ]
    assert sorted(positions) == list(range(rounds))
    assert len(accesses) == rounds
    assert sorted(a.round_index for a in accesses) == list(range(rounds))
    # The ledger: the one charge made at submission, nothing refunded or charged again.
    charge = 500_000_000_000
    assert ledger == [("charge", charge)]
    assert units_up(sum((Fraction(a.exact_rho) for a in accesses), Fraction(0))) <= charge


def test_with_fairness_off_the_first_come_is_served_first(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    a, b, dataset = two_tenants(api)
    a_job = submit_mwem(client, a, dataset["id"], 4)
    b_job = submit_measure(client, b, dataset["id"])

    worker = one_slot(database, settings, fair=False)
    worker.run_until_idle()

    a_row, b_row = job_row(database, a_job), job_row(database, b_job)
    assert a_row.status == b_row.status == "succeeded"
    assert a_row.finished_at < b_row.started_at  # type: ignore[operator]
    assert worker.given_back == []


def test_queue_position_while_queued_and_null_once_running_or_done(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    a, b, dataset = two_tenants(api)
    a_jobs = [submit_measure(client, a, dataset["id"]) for _ in range(2)]
    b_job = submit_measure(client, b, dataset["id"])

    def position(tenant: dict[str, Any], job_id: str) -> Any:
        response = client.get(f"/v1/jobs/{job_id}", headers=tenant["headers"])
        assert response.status_code == 200, response.text
        return response.json()["queue_position"]

    # Tenants in turn: A's first, B's, then A's second.
    assert [position(a, a_jobs[0]), position(b, b_job), position(a, a_jobs[1])] == [1, 2, 3]
    listed = client.get("/v1/jobs", params={"status": "queued"}, headers=a["headers"]).json()
    assert {job["id"]: job["queue_position"] for job in listed} == {
        a_jobs[0]: 1,
        a_jobs[1]: 3,
    }
    # Another tenant's job stays invisible: a position is all a tenant learns of it.
    assert client.get(f"/v1/jobs/{b_job}", headers=a["headers"]).status_code == 404

    worker = one_slot(database, settings, fair=True)
    assert worker.run_once()  # A's first
    assert position(b, b_job) == 1 and position(a, a_jobs[1]) == 2
    worker.run_until_idle()
    done = client.get(f"/v1/jobs/{b_job}", headers=ADMIN_HEADERS).json()
    assert done["status"] == "succeeded" and done["queue_position"] is None
    assert job_row(database, b_job).started_at < job_row(database, a_jobs[1]).started_at  # type: ignore[operator]
