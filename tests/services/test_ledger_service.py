"""The ρ ledger: atomic charges under real concurrency, idempotency, refunds, on both backends."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select

from app.db import Database, LedgerEntry
from app.errors import IdempotencyConflict, InsufficientBudget, NotFound
from app.services import ledger
from app.services.rho import rho_units

ONE = rho_units(1.0)
TWENTIETH = rho_units(0.05)


def _entries_of(database: Database, grant_id: str) -> list[LedgerEntry]:
    with database.read_only() as session:
        return list(
            session.scalars(select(LedgerEntry).where(LedgerEntry.grant_id == grant_id)).all()
        )


def test_sixty_concurrent_charges_of_a_twentieth_exactly_twenty_succeed(database, seed) -> None:
    grant = seed.grant(rho_limit_units=ONE)
    attempts = 60
    start_together = threading.Barrier(attempts)

    def attempt(index: int) -> str:
        start_together.wait()
        try:
            # Each thread: its own session, hence its own pooled connection and transaction.
            with database.unit_of_work() as session:
                ledger.charge(
                    session,
                    tenant_id=grant.tenant_id,
                    dataset_id=grant.dataset_id,
                    rho_units=TWENTIETH,
                    description=f"concurrent charge {index}",
                )
            return "charged"
        except InsufficientBudget as refusal:
            assert refusal.details["rho_remaining"] == 0.0
            return "refused"

    with ThreadPoolExecutor(max_workers=attempts) as pool:
        outcomes = list(pool.map(attempt, range(attempts)))

    assert outcomes.count("charged") == 20
    assert outcomes.count("refused") == 40
    entries = _entries_of(database, grant.id)
    assert len(entries) == 20
    with database.read_only() as session:
        total = session.scalar(
            select(func.sum(LedgerEntry.rho_units)).where(LedgerEntry.grant_id == grant.id)
        )
        grant_budget = ledger.budget(
            session, tenant_id=grant.tenant_id, dataset_id=grant.dataset_id
        )
    assert int(total) == ONE  # exactly 1.0, not 0.9999… or 1.0000…1
    assert grant_budget.remaining_units == 0


def test_insufficient_budget_writes_nothing_and_reports_remaining(database, seed) -> None:
    grant = seed.grant(rho_limit_units=rho_units(0.3))
    with database.unit_of_work() as session:
        ledger.charge(
            session,
            tenant_id=grant.tenant_id,
            dataset_id=grant.dataset_id,
            rho_units=rho_units(0.25),
        )
    with pytest.raises(InsufficientBudget) as refused, database.unit_of_work() as session:
        ledger.charge(
            session,
            tenant_id=grant.tenant_id,
            dataset_id=grant.dataset_id,
            rho_units=rho_units(0.1),
        )
    assert refused.value.status == 409
    assert refused.value.code == "insufficient_budget"
    assert refused.value.details["rho_remaining"] == pytest.approx(0.05, abs=1e-15)
    assert len(_entries_of(database, grant.id)) == 1


def test_idempotent_retry_returns_first_charge_and_charges_nothing_more(database, seed) -> None:
    grant = seed.grant(rho_limit_units=ONE)
    kwargs = {
        "tenant_id": grant.tenant_id,
        "dataset_id": grant.dataset_id,
        "rho_units": rho_units(0.4),
        "idempotency_key": "retry-1",
        "request_hash": "h1",
        "job_id": "job-1",
    }
    with database.unit_of_work() as session:
        first = ledger.charge(session, **kwargs)
    with database.unit_of_work() as session:
        again = ledger.charge(session, **{**kwargs, "job_id": "job-2"})
    assert not first.replayed and again.replayed
    assert again.entry_id == first.entry_id
    assert again.job_id == "job-1"  # the first charge's job, so the caller reuses it
    assert again.rho_remaining_units == ONE - rho_units(0.4)
    assert len(_entries_of(database, grant.id)) == 1

    # The same key for a different request is a conflict, and writes nothing.
    with pytest.raises(IdempotencyConflict), database.unit_of_work() as session:
        ledger.charge(session, **{**kwargs, "request_hash": "h2"})
    assert len(_entries_of(database, grant.id)) == 1


def test_concurrent_retries_with_one_key_charge_once(database, seed) -> None:
    grant = seed.grant(rho_limit_units=ONE)
    attempts = 8
    start_together = threading.Barrier(attempts)

    def attempt(_index: int) -> int:
        start_together.wait()
        with database.unit_of_work() as session:
            result = ledger.charge(
                session,
                tenant_id=grant.tenant_id,
                dataset_id=grant.dataset_id,
                rho_units=rho_units(0.1),
                idempotency_key="same-key",
                request_hash="same",
            )
        return result.entry_id

    with ThreadPoolExecutor(max_workers=attempts) as pool:
        entry_ids = set(pool.map(attempt, range(attempts)))
    assert len(entry_ids) == 1
    assert len(_entries_of(database, grant.id)) == 1


def test_charge_is_not_committed_by_the_ledger(database, seed) -> None:
    grant = seed.grant(rho_limit_units=ONE)
    with database.session() as session:
        ledger.charge(
            session,
            tenant_id=grant.tenant_id,
            dataset_id=grant.dataset_id,
            rho_units=rho_units(0.5),
        )
        session.rollback()  # the caller's unit of work failed: the charge goes with it
    assert _entries_of(database, grant.id) == []


def test_refund_appends_a_negative_entry_once(database, seed) -> None:
    grant = seed.grant(rho_limit_units=ONE)
    with database.unit_of_work() as session:
        ledger.charge(
            session,
            tenant_id=grant.tenant_id,
            dataset_id=grant.dataset_id,
            rho_units=rho_units(0.3),
            job_id="job-refund",
        )
    with database.unit_of_work() as session:
        assert ledger.refund(session, job_id="job-refund") == rho_units(0.3)
    with database.unit_of_work() as session:
        assert ledger.refund(session, job_id="job-refund") == 0  # already given back
        assert ledger.refund(session, job_id="no-such-job") == 0
    entries = _entries_of(database, grant.id)
    assert sorted(entry.rho_units for entry in entries) == [-rho_units(0.3), rho_units(0.3)]
    assert {entry.kind for entry in entries} == {"charge", "refund"}
    with database.read_only() as session:
        assert (
            ledger.budget(
                session, tenant_id=grant.tenant_id, dataset_id=grant.dataset_id
            ).remaining_units
            == ONE
        )


def test_charge_without_a_grant_is_not_found(database, seed) -> None:
    grant = seed.grant(rho_limit_units=ONE)
    other_tenant = seed.tenant()
    with pytest.raises(NotFound), database.unit_of_work() as session:
        ledger.charge(session, tenant_id=other_tenant.id, dataset_id=grant.dataset_id, rho_units=1)


def test_read_only_session_never_keeps_a_charge(database, seed) -> None:
    grant = seed.grant(rho_limit_units=ONE)
    if database.is_sqlite:
        # A deferred SQLite transaction would not hold the write lock while checking.
        with pytest.raises(RuntimeError), database.read_only() as session:
            ledger.charge(
                session, tenant_id=grant.tenant_id, dataset_id=grant.dataset_id, rho_units=1
            )
    else:
        with database.read_only() as session:
            ledger.charge(
                session, tenant_id=grant.tenant_id, dataset_id=grant.dataset_id, rho_units=1
            )
    assert _entries_of(database, grant.id) == []
