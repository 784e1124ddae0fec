"""The fair queue: claims take tenants in turn (tenant-less jobs are one more queue), each
tenant's jobs oldest first; queue positions predict the claims; concurrent claimers keep
the turns. Jobs here are rows only: they are claimed and marked done, never run."""

from __future__ import annotations

import threading
from datetime import timedelta

from conftest import SeedHelper

from app.db import Database, Job, new_id, utcnow
from app.services import jobs, queue


def queued_jobs(database: Database, seed: SeedHelper, owners: list[str | None]) -> list[str]:
    """One queued job per entry (a tenant id, or None: a refit), created a second apart
    in that order; their ids."""
    dataset = seed.dataset()
    start = utcnow() - timedelta(minutes=5)
    ids = []
    with database.unit_of_work() as session:
        for index, tenant_id in enumerate(owners):
            job = jobs.create(
                session,
                job_id=new_id(),
                dataset_id=dataset.id,
                tenant_id=tenant_id,
                kind="measure" if tenant_id else "refit",
                params={},
            )
            job.created_at = start + timedelta(seconds=index)
            ids.append(job.id)
    return ids


def positions(database: Database, ids: list[str]) -> dict[str, int]:
    with database.read_only() as session:
        rows = list(session.query(Job).filter(Job.id.in_(ids)))
        return queue.positions(session, rows)


def claim_and_finish(database: Database, *, fair: bool = True) -> str | None:
    """Claim the next job and mark it done at once; its id (None: nothing to claim)."""
    with database.unit_of_work() as session:
        job = jobs.claim(
            session, owner="test", lease_seconds=30, is_sqlite=database.is_sqlite, fair=fair
        )
        if job is None:
            return None
        jobs.succeed(session, job, model_version=1)
        return job.id


def test_claims_take_queues_in_turn_and_positions_predict_them(
    database: Database, seed: SeedHelper
) -> None:
    a, b = seed.tenant().id, seed.tenant().id
    # Created in this order: three of A's, a refit, B's, a refit, B's.
    a1, a2, a3, n1, b1, n2, b2 = queued_jobs(database, seed, [a, a, a, None, b, None, b])
    expected = [a1, n1, b1, a2, n2, b2, a3]  # one per queue per round, oldest queue first

    before = positions(database, expected)
    assert [before[job_id] for job_id in expected] == list(range(1, 8))

    claimed = [claim_and_finish(database) for _ in expected]
    assert claimed == expected
    assert claim_and_finish(database) is None
    assert positions(database, expected) == {}  # none is queued any more


def test_a_tenant_served_last_waits_for_the_others(database: Database, seed: SeedHelper) -> None:
    a, b = seed.tenant().id, seed.tenant().id
    (first,) = queued_jobs(database, seed, [a])
    assert claim_and_finish(database) == first  # A was served just now
    # A's job is older than B's, but B's queue has not had a turn since A's.
    a_next, b_next = queued_jobs(database, seed, [a, b])
    with database.read_only() as session:
        a_job = session.get(Job, a_next)
        assert a_job is not None
        waiting = queue.positions(session, [a_job])
    assert waiting == {a_next: 2}
    assert [claim_and_finish(database), claim_and_finish(database)] == [b_next, a_next]


def test_without_fairness_the_oldest_job_goes_first(database: Database, seed: SeedHelper) -> None:
    a, b = seed.tenant().id, seed.tenant().id
    ids = queued_jobs(database, seed, [a, a, b])
    assert [claim_and_finish(database, fair=False) for _ in ids] == ids


def claim_at_once(
    database: Database, barrier: threading.Barrier, claimed: list[str | None]
) -> None:
    """Claim (without finishing) as soon as the other claimer is ready too."""
    barrier.wait()
    with database.unit_of_work() as session:
        job = jobs.claim(session, owner="test", lease_seconds=30, is_sqlite=database.is_sqlite)
        claimed.append(None if job is None else job.id)  # list.append is atomic


def test_concurrent_claimers_take_one_job_of_each_waiting_tenant(
    database: Database, seed: SeedHelper
) -> None:
    for _ in range(3):
        a, b = seed.tenant().id, seed.tenant().id
        a1, a2, b1 = queued_jobs(database, seed, [a, a, b])
        barrier = threading.Barrier(2)
        claimed: list[str | None] = []
        threads = [
            threading.Thread(target=claim_at_once, args=(database, barrier, claimed))
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        # Two slots, two tenants waiting: one job of each, never both of A's.
        assert sorted(claimed, key=str) == sorted([a1, b1])
        with database.unit_of_work() as session:
            for job_id in [a1, b1]:
                row = session.get(Job, job_id)
                assert row is not None
                jobs.succeed(session, row, model_version=1)
        assert claim_and_finish(database) == a2
