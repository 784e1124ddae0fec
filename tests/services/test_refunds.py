"""Honest refunds: a failed or abandoned job gets back exactly the ρ it never used on data.

Nothing through the gate → the whole charge; a mechanism stopped in round k → the
charge less the exact rational cost of every round that passed the gate (rounded up to
the ledger's unit), the round that broke included though it was never stored; noise
drawn stays charged. Each refund is a ledger line of its own.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from fractions import Fraction
from typing import Any

import pytest
from conftest import ApiHelper, adult_domain, adult_slice, job_row
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, Job, LedgerEntry, MeasurementRecord, RecordAccess, utcnow
from app.privacy.mechanisms.budget import exact_round_cost
from app.services import jobs, refunds
from app.services import measurements as measurement_service
from app.services.rho import UNITS_PER_RHO
from app.worker import Worker

SIZES = {"marital-status": 7, "relationship": 6, "race": 5, "sex": 2, "income>50K": 2}


def small_adult(rows: int = 2000) -> bytes:
    lines = adult_slice(rows).decode().splitlines()
    header = lines[0].split(",")
    keep = [header.index(c) for c in SIZES]
    body = [",".join(line.split(",")[i] for i in keep) for line in lines[1:]]
    return ("\n".join([",".join(SIZES), *body]) + "\n").encode()


@pytest.fixture(scope="module")
def small(api: ApiHelper) -> dict[str, Any]:
    assert set(SIZES) <= set(adult_domain())
    return api.upload_dataset(small_adult(), SIZES)


def ledger_lines(database: Database, job_id: str) -> list[tuple[str, int, str]]:
    with database.read_only() as session:
        return [
            (e.kind, e.rho_units, e.description)
            for e in session.query(LedgerEntry).filter_by(job_id=job_id).order_by(LedgerEntry.id)
        ]


def used_exactly(database: Database, job_id: str) -> Fraction:
    """The exact ρ of every access the gate recorded for the job."""
    with database.read_only() as session:
        accesses = session.query(RecordAccess).filter_by(job_id=job_id).all()
        return sum((Fraction(a.exact_rho) for a in accesses), Fraction(0))


def stored_exactly(database: Database, job_id: str) -> Fraction:
    """The exact ρ of the rounds the job stored."""
    with database.read_only() as session:
        records = session.query(MeasurementRecord).filter_by(job_id=job_id).all()
        return sum(
            (exact_round_cost(r.scale, float(r.details.get("epsilon", 0.0))) for r in records),
            Fraction(0),
        )


def ceil_units(amount: Fraction) -> int:
    return -(-amount.numerator * UNITS_PER_RHO // amount.denominator)


def start_mechanism(
    client: TestClient, api: ApiHelper, dataset_id: str, kind: str, rho: float
) -> str:
    tenant = api.create_tenant()
    api.grant(dataset_id, tenant["id"], 1)
    body: dict[str, Any] = {"rho": rho}
    if kind == "mwem":
        body.update(rounds=5, workload=[["sex", "income>50K"], ["race", "sex"]])
    response = client.post(
        f"/v1/datasets/{dataset_id}/mechanisms/{kind}", json=body, headers=tenant["headers"]
    )
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


@pytest.mark.parametrize("kind", ["aim", "mwem"])
def test_a_mechanism_stopped_at_round_k_refunds_exactly_the_unused_rounds(
    client: TestClient,
    api: ApiHelper,
    small: dict[str, Any],
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    kind: str,
) -> None:
    job_id = start_mechanism(client, api, small["id"], kind, 0.25)
    store = measurement_service.store
    stored = {"rounds": 0}

    def failing_store(session: Any, **kwargs: Any) -> Any:
        if stored["rounds"] == 3:  # a bug in round 3, after rounds 0–2 were released
            raise ZeroDivisionError("a bug")
        stored["rounds"] += 1
        return store(session, **kwargs)

    monkeypatch.setattr(measurement_service, "store", failing_store)
    with caplog.at_level(logging.ERROR, logger="privq.worker"):
        Worker(database, settings, poll_seconds=0.01).run_until_idle()
    job = job_row(database, job_id)
    assert job.status == "failed"
    assert "internal error (ZeroDivisionError)" in (job.error or "")
    assert any(r.exc_info for r in caplog.records if r.getMessage().startswith("job failed"))

    used = used_exactly(database, job_id)
    stored = stored_exactly(database, job_id)
    with database.read_only() as session:
        accesses = session.query(RecordAccess).filter_by(job_id=job_id).count()
        rounds = session.query(MeasurementRecord).filter_by(job_id=job_id).count()
    # Round 3 passed the gate, selected and drew, then its store broke: it stays charged.
    assert (accesses, rounds) == (4, 3)
    assert used > stored > 0
    charge = 25 * UNITS_PER_RHO // 100
    lines = ledger_lines(database, job_id)
    assert [(kind_, units) for kind_, units, _ in lines] == [
        ("charge", charge),
        ("refund", -(charge - ceil_units(used))),
    ]
    assert "spent on accesses to the records that already ran" in lines[1][2]


def test_an_abandoned_mechanism_refunds_the_rounds_it_never_ran(
    client: TestClient,
    api: ApiHelper,
    small: dict[str, Any],
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job_id = start_mechanism(client, api, small["id"], "mwem", 0.2)
    store = measurement_service.store
    stored = {"rounds": 0}

    def dying_store(session: Any, **kwargs: Any) -> Any:
        if stored["rounds"] == 2:
            raise KeyboardInterrupt  # the worker process dies in round 2
        stored["rounds"] += 1
        return store(session, **kwargs)

    monkeypatch.setattr(measurement_service, "store", dying_store)
    with pytest.raises(KeyboardInterrupt):
        Worker(database, settings, poll_seconds=0.01).run_once()
    # Every worker since died the same way: the next claim gives up on the job.
    with database.unit_of_work() as session:
        job = session.get(Job, job_id)
        job.status = "running"
        job.attempts = jobs.MAX_ATTEMPTS
        job.lease_owner = "a-dead-worker"
        job.lease_expires_at = utcnow() - timedelta(seconds=1)
    monkeypatch.setattr(measurement_service, "store", store)
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    job_after = job_row(database, job_id)
    assert job_after.status == "failed" and "abandoned" in (job_after.error or "")
    # The round the dying worker had drawn but not stored stays charged.
    assert used_exactly(database, job_id) > stored_exactly(database, job_id) > 0
    charge = 2 * UNITS_PER_RHO // 10
    lines = ledger_lines(database, job_id)
    assert [(k, u) for k, u, _ in lines] == [
        ("charge", charge),
        ("refund", -(charge - ceil_units(used_exactly(database, job_id)))),
    ]
    assert lines[1][2].startswith("job abandoned")


def test_a_measurement_refunds_all_before_noise_and_nothing_after(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    job_id = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"], ["age"]], "rho": 0.1},
        headers=tenant["headers"],
    ).json()["job_id"]
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    with database.unit_of_work() as session:
        job = session.get(Job, job_id)
        assert refunds.refund_unused(session, job, reason="job failed") == 0  # all drawn
    job_id_2 = client.post(  # a second job, which never draws noise
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.2},
        headers=tenant["headers"],
    ).json()["job_id"]
    with database.unit_of_work() as session:
        job2 = session.get(Job, job_id_2)
        assert refunds.refund_unused(session, job2, reason="job failed") == 2 * UNITS_PER_RHO // 10
    with database.unit_of_work() as session:  # and only once
        job2 = session.get(Job, job_id_2)
        assert refunds.refund_unused(session, job2, reason="job failed") == 0
    assert [k for k, _, _ in ledger_lines(database, job_id_2)] == ["charge", "refund"]
