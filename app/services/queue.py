"""The fair queue: which job a claim takes, when a running job should give its slot back,
and where a queued job stands.

Jobs wait in queues: one per tenant, and one more for the tenant-less jobs (refits,
registrations: the admin's). `queue_turns` keeps, per queue, when a claim last took one
of its jobs. A claim takes the oldest claimable job of the queue served least recently
(a queue never served first; between those, the one with the oldest job), and records
the turn: tenants are taken in turn whatever how many jobs each has queued, and within
a queue jobs run oldest first. Every queue is served after at most one job of each
other, so no job starves.

Concurrent claimers: the turns are read and written inside the claim, so claims are
serialised — SQLite's IMMEDIATE transaction does it already, on PostgreSQL a
transaction-scoped advisory lock (`serialise_claims`), held for the few milliseconds a
claim takes. Without it two claimers could read the same turns and both take a job of
the same tenant while another waits. `FOR UPDATE SKIP LOCKED` still keeps a claim from
waiting on a job row someone else holds (a cancel in progress).

A mechanism job runs for many rounds; it gives its slot back between them when a job of
another queue waits that the fair claim would take before it (`another_waits`), and is
taken again in its turn (`app.services.mechanisms` decides where it may).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Select, and_, func, or_, select, tuple_
from sqlalchemy.orm import Session

from app.db import Job, QueueTurn, utcnow

Row = TypeVar("Row", bound=Any)

# The queue of the jobs no tenant submitted (a tenant id is never empty).
TENANTLESS_QUEUE = ""
# pg_advisory_xact_lock's key for claims: any constant no other code uses ("privq_q").
CLAIM_LOCK_KEY = 0x70726976715F71


def queue_of(job: Job) -> str:
    return job.tenant_id if job.tenant_id is not None else TENANTLESS_QUEUE


def _queue_column() -> Any:
    return func.coalesce(Job.tenant_id, TENANTLESS_QUEUE)


def claimable(now: datetime) -> Any:
    """Queued, or running under a lease that expired (its worker died)."""
    return or_(
        Job.status == "queued",
        and_(Job.status == "running", Job.lease_expires_at < now),
    )


def serialise_claims(session: Session, *, is_sqlite: bool) -> None:
    """Make this transaction the only claim in progress until it ends (PostgreSQL; on
    SQLite the IMMEDIATE transaction already holds the write lock)."""
    if not is_sqlite:
        session.execute(select(func.pg_advisory_xact_lock(CLAIM_LOCK_KEY)))


def fair_order(query: Select[Row]) -> Select[Row]:
    """`query` (of jobs) in the order the fair claim takes them: the queue served least
    recently first (never served before all), then the oldest job."""
    return query.outerjoin(QueueTurn, QueueTurn.queue == _queue_column()).order_by(
        QueueTurn.served_at.asc().nulls_first(), Job.created_at, Job.id
    )


def take_turn(session: Session, job: Job, now: datetime) -> None:
    """Record that a claim took `job` now: its queue goes to the back."""
    key = queue_of(job)
    turn = session.get(QueueTurn, key)
    if turn is None:
        session.add(QueueTurn(queue=key, served_at=now))
    else:
        turn.served_at = max(turn.served_at, now)
    session.flush()


def another_waits(session: Session, job: Job, *, grace_seconds: float) -> bool:
    """Whether a claimable job of another queue waits that the fair claim would take
    before `job` if it were queued again: its queue was served before `job`'s was.

    A job created less than `grace_seconds` ago does not count yet: an idle slot (one
    polls every `worker_poll_seconds`) may be about to take it, and giving this slot
    back would only cost `job` a resume. A job given back before (it has been claimed)
    counts at once.
    """
    own = session.get(QueueTurn, queue_of(job))
    if own is None:  # claimed before the turns were kept: nothing to compare with
        return False
    now = utcnow()
    waiting = (
        select(Job.id)
        .outerjoin(QueueTurn, QueueTurn.queue == _queue_column())
        .where(
            claimable(now),
            _queue_column() != queue_of(job),
            or_(QueueTurn.served_at.is_(None), QueueTurn.served_at < own.served_at),
            or_(Job.attempts > 0, Job.created_at <= now - timedelta(seconds=grace_seconds)),
        )
        .limit(1)
    )
    return session.scalar(waiting) is not None


def positions(session: Session, jobs: Sequence[Job]) -> dict[str, int]:
    """Each queued job's 1-based place in the order the fair claim would take the queued
    jobs now (jobs not queued have none).

    The claim takes one job per queue in turn, the queues in the order of their last
    turn, so the k-th job (from 0) of a queue comes after k jobs of every queue that
    has more than k (k rounds), and after the k-th of every queue ahead of its own.
    Only counts of other tenants' jobs go into it, never which or whose.
    """
    queued = [job for job in jobs if job.status == "queued"]
    if not queued:
        return {}
    queue = _queue_column()
    rows = session.execute(
        select(queue, QueueTurn.served_at, func.count(), func.min(Job.created_at))
        .select_from(Job)
        .outerjoin(QueueTurn, QueueTurn.queue == queue)
        .where(Job.status == "queued")
        .group_by(queue, QueueTurn.served_at)
    ).all()
    # The queues in the claim's order: never served first, then by last turn; ties by
    # the oldest queued job (what the claim's own order comes down to).
    ordered = sorted(rows, key=lambda row: (row[1] is not None, row[1] or row[3], row[3], row[0]))
    rank = {row[0]: index for index, row in enumerate(ordered)}
    sizes = {row[0]: int(row[2]) for row in ordered}
    found: dict[str, int] = {}
    for job in queued:
        own = queue_of(job)
        if own not in rank:  # it stopped being queued since it was read
            continue
        ahead_in_queue = session.scalar(
            select(func.count())
            .select_from(Job)
            .where(
                Job.status == "queued",
                queue == own,
                tuple_(Job.created_at, Job.id) < tuple_(job.created_at, job.id),
            )
        )
        k = int(ahead_in_queue or 0)
        earlier_rounds = sum(min(size, k) for size in sizes.values())
        this_round = sum(1 for q, size in sizes.items() if size > k and rank[q] < rank[own])
        found[job.id] = earlier_rounds + this_round + 1
    return found
