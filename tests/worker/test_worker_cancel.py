"""Cancelling a running job: it stops at its next safe point and refunds exactly what it
had not used; noise already drawn stays charged and goes into the model."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from conftest import ADMIN_HEADERS
from sqlalchemy import select

from app.db import Job, LedgerEntry, MeasurementRecord, ModelVersion
from app.privacy.mechanisms.budget import exact_round_cost
from app.services import jobs
from app.services.rho import UNITS_PER_RHO, units_to_decimal_str
from app.worker import Worker


def request_cancel(database, job_id: str) -> None:
    """What POST /v1/jobs/{id}/cancel does, from another process, while the job runs."""
    with database.unit_of_work() as session:
        jobs.cancel(session, jobs.get(session, job_id, for_update=True))


class CancellingWorker(Worker):
    """A worker whose job is cancelled (by someone else) when it reports `stage`."""

    def __init__(self, *args: Any, cancel_when: str, after_rounds: int = 0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.cancel_when = cancel_when
        self.after_rounds = after_rounds
        self.requested = False

    def progress(self, job: Job, update: dict[str, Any]) -> None:
        super().progress(job, update)
        stage = str(update.get("stage", ""))
        if (
            not self.requested
            and stage.startswith(self.cancel_when)
            and int(update.get("rounds_done", 0)) >= self.after_rounds
        ):
            self.requested = True
            request_cancel(self.database, job.id)


def stored_rounds_of(database, job_id: str) -> list[MeasurementRecord]:  # type: ignore[no-untyped-def]
    """The job's stored rounds, in order, detached from their session."""
    with database.read_only() as session:
        rounds = session.scalars(
            select(MeasurementRecord)
            .where(MeasurementRecord.job_id == job_id)
            .order_by(MeasurementRecord.position)
        ).all()
        session.expunge_all()
        return list(rounds)


def exact_cost_of(rounds) -> Fraction:  # type: ignore[no-untyped-def]
    """The exact ρ of stored mechanism rounds, from the σ and ε each used."""
    return sum(
        (exact_round_cost(r.scale, float((r.details or {}).get("epsilon", 0.0))) for r in rounds),
        Fraction(0),
    )


def ledger_of(database, job_id: str) -> list[tuple[str, int]]:
    with database.read_only() as session:
        return [
            (entry.kind, entry.rho_units)
            for entry in session.scalars(
                select(LedgerEntry).where(LedgerEntry.job_id == job_id).order_by(LedgerEntry.id)
            )
        ]


def test_a_measurement_cancelled_before_its_noise_is_drawn_is_refunded_whole(
    client, api, database, settings
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    job_id = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"], ["age"]], "rho": 0.2},
        headers=tenant["headers"],
    ).json()["job_id"]
    worker = CancellingWorker(database, settings, poll_seconds=0.01, cancel_when="measuring")
    assert worker.run_once()
    job = client.get(f"/v1/jobs/{job_id}", headers=tenant["headers"]).json()
    assert job["status"] == "cancelled" and job["cancel_requested_at"]
    with database.read_only() as session:
        stored = session.scalars(
            select(MeasurementRecord.id).where(MeasurementRecord.job_id == job_id)
        ).all()
    assert stored == []  # no noise was drawn
    charge = 200_000_000_000
    assert ledger_of(database, job_id) == [("charge", charge), ("refund", -charge)]


def test_a_mechanism_cancelled_mid_run_refunds_exactly_its_unused_rounds(
    client, api, database, settings
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    accepted = client.post(
        f"/v1/datasets/{dataset['id']}/mechanisms/mwem",
        json={"rho": 0.4, "workload": [["sex", "age"], ["sex"], ["age"]], "rounds": 6},
        headers=tenant["headers"],
    ).json()
    job_id = accepted["job_id"]
    worker = CancellingWorker(
        database, settings, poll_seconds=0.01, cancel_when="round measured", after_rounds=2
    )
    assert worker.run_once()
    job = client.get(f"/v1/jobs/{job_id}", headers=ADMIN_HEADERS).json()
    assert job["status"] == "cancelled"

    rounds = stored_rounds_of(database, job_id)
    with database.read_only() as session:
        latest = session.scalars(
            select(ModelVersion)
            .where(ModelVersion.dataset_id == dataset["id"])
            .order_by(ModelVersion.version.desc())
        ).first()
    assert 2 <= len(rounds) < 6  # stopped at the safe point after the request
    # What the stored rounds cost, exactly, rounded up to the ledger unit: that stays.
    exact = exact_cost_of(rounds)
    used = math.ceil(exact * UNITS_PER_RHO)
    charged = 400_000_000_000
    assert ledger_of(database, job_id) == [("charge", charged), ("refund", -(charged - used))]
    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=tenant["headers"]).json()
    assert budget["rho_spent_exact"] == units_to_decimal_str(used)
    # The rounds drawn are releases: they are in the model.
    assert latest is not None and latest.high_water >= max(r.id for r in rounds)


def test_a_cancelled_job_whose_worker_died_is_finished_by_the_next_claim(
    client, api, database, settings
) -> None:
    from datetime import timedelta

    from app.db import utcnow

    tenant, dataset = api.tenant_with_grant(1)
    job_id = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.3},
        headers=tenant["headers"],
    ).json()["job_id"]
    with database.unit_of_work() as session:  # a worker claims it, then dies
        claimed = jobs.claim(session, owner="gone", lease_seconds=60, is_sqlite=database.is_sqlite)
        assert claimed is not None and claimed.id == job_id
    cancel = client.post(f"/v1/jobs/{job_id}/cancel", headers=tenant["headers"])
    assert cancel.status_code == 200
    assert cancel.json()["status"] == "running" and cancel.json()["cancel_requested_at"]
    with database.unit_of_work() as session:
        row = session.get(Job, job_id)
        assert row is not None
        row.lease_expires_at = utcnow() - timedelta(seconds=1)
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    assert client.get(f"/v1/jobs/{job_id}", headers=tenant["headers"]).json()["status"] == (
        "cancelled"
    )
    assert ledger_of(database, job_id) == [
        ("charge", 300_000_000_000),
        ("refund", -300_000_000_000),
    ]


def cancel_inside_selection(monkeypatch, database, job_id: str, at_call: int) -> list[float]:
    """Ask for the job's cancellation from inside its `at_call`-th exponential-mechanism
    selection (the moment an attacker's cancel lands while the selection scores the true
    marginals); returns the ε of every selection that ran."""
    from app.privacy import selection

    real = selection.exponential_mechanism
    epsilons: list[float] = []

    def spy(scores, epsilon, sensitivity):  # type: ignore[no-untyped-def]
        epsilons.append(epsilon)
        if len(epsilons) == at_call:
            request_cancel(database, job_id)
        return real(scores, epsilon, sensitivity)

    monkeypatch.setattr(selection, "exponential_mechanism", spy)
    return epsilons


def test_a_cancel_that_lands_inside_a_selection_does_not_refund_that_round(
    client, api, database, settings, monkeypatch
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    job_id = client.post(
        f"/v1/datasets/{dataset['id']}/mechanisms/mwem",
        json={"rho": 0.3, "workload": [["sex", "age"], ["sex"], ["age"]], "rounds": 3},
        headers=tenant["headers"],
    ).json()["job_id"]
    selections = cancel_inside_selection(monkeypatch, database, job_id, at_call=2)
    assert Worker(database, settings, poll_seconds=0.01).run_once()
    job = client.get(f"/v1/jobs/{job_id}", headers=tenant["headers"]).json()
    assert job["status"] == "cancelled"
    rounds = stored_rounds_of(database, job_id)
    # The selection the cancel landed in ran: its round is drawn, stored and charged, and
    # the third round never began (no selection of its own).
    assert len(selections) == 2 and len(rounds) == 2
    exact = exact_cost_of(rounds)
    assert all(float((r.details or {})["epsilon"]) > 0 for r in rounds)
    charged = 300_000_000_000
    kept = sum(units for _, units in ledger_of(database, job_id))
    assert Fraction(kept, UNITS_PER_RHO) >= exact
    assert ledger_of(database, job_id) == [
        ("charge", charged),
        ("refund", -(charged - math.ceil(exact * UNITS_PER_RHO))),
    ]


def test_a_one_round_run_cancelled_inside_its_selection_is_not_refunded(
    client, api, database, settings, monkeypatch
) -> None:
    """The timing attack: a one-round MWEM cancelled as soon as it runs. Its selection ran,
    so it finishes its round and keeps its whole charge: nothing to learn for free."""
    tenant, dataset = api.tenant_with_grant(1)
    job_id = client.post(
        f"/v1/datasets/{dataset['id']}/mechanisms/mwem",
        json={"rho": 0.2, "workload": [["sex", "age"], ["sex"]], "rounds": 1},
        headers=tenant["headers"],
    ).json()["job_id"]
    cancel_inside_selection(monkeypatch, database, job_id, at_call=1)
    assert Worker(database, settings, poll_seconds=0.01).run_once()
    job = client.get(f"/v1/jobs/{job_id}", headers=tenant["headers"]).json()
    assert job["cancel_requested_at"] and job["status"] == "succeeded"
    assert ledger_of(database, job_id) == [("charge", 200_000_000_000)]
