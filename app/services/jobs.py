"""Jobs: the queue in the `jobs` table — create, claim under a lease, renew, report, finish.

A job is created in the same transaction as the ledger charge that pays for it
(`create`, called by the measurement and mechanism services). Workers claim the
next claimable job in one statement — tenants in turn, each tenant's oldest first
(`app.services.queue`), `SELECT … FOR UPDATE SKIP LOCKED` on PostgreSQL — with claims
serialised (an advisory lock on PostgreSQL, the IMMEDIATE transaction on SQLite), and
hold a lease they renew while they work. A job whose lease expired (its worker died)
is claimable again; after `MAX_ATTEMPTS` claims it fails for good. A worker that stops
(a redeploy) does so at a safe point (`WorkerStopping`) and gives its job back at once
with its attempt taken back (`release`), so redeploys never use up a job's attempts; a
mechanism job that yields its slot to another tenant's (`JobYielding`) goes back the
same way.

A job that fails (or is abandoned, or is cancelled) is refunded, in the same
transaction, exactly the ρ no access to the records recorded as used
(`app.services.refunds`, `app.services.gate`): all of it if none passed the gate, the
rounds a mechanism stopped part-way never began; what passed the gate stays charged.

`JobRunner` is what a job handler (a plain measurement, or a mechanism in
`app.services.mechanisms`) needs from whoever runs it; `app.worker.Worker` is one.
Services see the worker only through it, so they never import the worker.

A registration job (`REGISTRATION_KIND`, `app.services.sources`) belongs to a dataset
that is `registering`: whichever way it ends without succeeding — refused, failed on
an internal error, abandoned, cancelled — the dataset becomes `rejected` with the
reason in the same transaction (`_end_registration`), so none stays registering.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

import numpy as np
from sqlalchemy import case, func, select, update
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Database, Dataset, Job, MeasurementRecord, utcnow
from app.errors import JobFinished, NotFound
from app.pgm.domain import Domain
from app.services import queue, refunds
from app.services.pages import Page, page

MAX_ATTEMPTS = 3
ERROR_MESSAGE_LENGTH = 500
# The job that scans a source registered by reference (`app.services.sources`).
REGISTRATION_KIND = "register"


def create(
    session: Session,
    *,
    job_id: str,
    dataset_id: str,
    tenant_id: str | None,
    kind: str,
    params: dict[str, Any],
    idempotency_key: str | None = None,
    request_hash: str | None = None,
) -> Job:
    """Add a queued job (the caller's unit of work commits it with its charge, if any).

    `tenant_id` None: the admin's job (a refit), which no tenant sees.
    """
    job = Job(
        id=job_id,
        dataset_id=dataset_id,
        tenant_id=tenant_id,
        kind=kind,
        params=params,
        status="queued",
        progress={"stage": "queued"},
        idempotency_key=idempotency_key,
        request_hash=request_hash,
    )
    session.add(job)
    session.flush()
    return job


def get(
    session: Session, job_id: str, *, tenant_id: str | None = None, for_update: bool = False
) -> Job:
    """The job; with `tenant_id`, only that tenant's (others are NotFound, like a missing one)."""
    query = select(Job).where(Job.id == job_id)
    if tenant_id is not None:
        query = query.where(Job.tenant_id == tenant_id)
    if for_update:
        query = query.with_for_update()
    job = session.scalars(query).one_or_none()
    if job is None:
        raise NotFound("job not found")
    return job


def list_jobs(
    session: Session,
    *,
    tenant_id: str | None = None,
    dataset_id: str | None = None,
    status: str | None = None,
    kind: str | None = None,
    limit: int,
    cursor: str | None = None,
) -> Page[Job]:
    """One page of jobs, newest first; with `tenant_id`, only that tenant's."""
    query = select(Job)
    for column, value in (
        (Job.tenant_id, tenant_id),
        (Job.dataset_id, dataset_id),
        (Job.status, status),
        (Job.kind, kind),
    ):
        if value is not None:
            query = query.where(column == value)
    return page(
        session,
        query,
        keys=(Job.created_at, Job.id),
        kinds=(datetime, str),
        limit=limit,
        cursor=cursor,
        descending=True,
        key_of=lambda job: (job.created_at, job.id),
    )


def claim(
    session: Session, *, owner: str, lease_seconds: float, is_sqlite: bool, fair: bool = True
) -> Job | None:
    """Lease the next claimable job to `owner`, or None; never commits.

    `fair`: the oldest job of the queue (a tenant, or the tenant-less jobs) served least
    recently (`app.services.queue`); otherwise the oldest job. Either way the claim
    records its queue's turn. A job that has already been claimed `MAX_ATTEMPTS` times
    (each time its worker died) is failed instead, and the next one is looked at.
    """
    queue.serialise_claims(session, is_sqlite=is_sqlite)
    while True:
        now = utcnow()
        query = select(Job).where(queue.claimable(now))
        query = queue.fair_order(query) if fair else query.order_by(Job.created_at, Job.id)
        query = query.limit(1)
        if not is_sqlite:
            query = query.with_for_update(skip_locked=True, of=Job)
        job = session.scalars(query).first()
        if job is None:
            return None
        if job.cancel_requested_at is not None:
            # Its worker stopped before reaching a safe point: it never will now.
            finish_cancelled(session, job)
            continue
        if job.attempts >= MAX_ATTEMPTS:
            fail(
                session,
                job,
                f"abandoned: {job.attempts} workers stopped while running this job",
                reason="job abandoned",
            )
            continue
        job.status = "running"
        job.lease_owner = owner
        job.lease_expires_at = now + timedelta(seconds=lease_seconds)
        job.attempts += 1
        job.started_at = job.started_at or now
        queue.take_turn(session, job, now)
        return job


def renew(
    session: Session,
    *,
    job_id: str,
    owner: str,
    lease_seconds: float,
    progress: dict[str, Any] | None = None,
) -> bool:
    """Extend `owner`'s lease (and record progress); False if the lease is no longer its own.

    The expiry only moves forward: the heartbeat and the job's own progress reports
    renew from two threads, and one whose time was taken first may commit last (it
    waited for the write lock); it must not pull the expiry back."""
    expires = utcnow() + timedelta(seconds=lease_seconds)
    values: dict[str, Any] = {
        "lease_expires_at": case(
            (Job.lease_expires_at > expires, Job.lease_expires_at), else_=expires
        )
    }
    if progress is not None:
        values["progress"] = progress
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.lease_owner == owner, Job.status == "running")
        .values(**values)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def holds_lease(session: Session, *, job_id: str, owner: str) -> bool:
    job = session.get(Job, job_id)
    return job is not None and job.status == "running" and job.lease_owner == owner


class LeaseLost(RuntimeError):
    """Another worker holds this job now (our lease expired)."""


def require_lease(session: Session, *, job_id: str, owner: str) -> None:
    """LeaseLost unless `owner` still holds the running job: checked before every write."""
    if not holds_lease(session, job_id=job_id, owner=owner):
        raise LeaseLost()


class JobCancelled(RuntimeError):
    """The job's cancellation was asked for; it stops at this safe point."""


class WorkerStopping(BaseException):
    """The worker was asked to stop (SIGTERM): raised only at a safe point — before a gate
    records an access, after a stored round or measurement, between a fit's iterations —
    so the job goes back to the queue with nothing in flight and no attempt spent.

    A BaseException, like KeyboardInterrupt: no `except Exception` on the way (a fit's
    failure handling, a mechanism's) may take it for the job's own failure."""


class JobYielding(BaseException):
    """The job gives its slot back to another tenant's waiting job (`app.services.queue`):
    raised only after a mechanism round is stored, never between a gate and storing what
    it produced. Like `WorkerStopping` the job goes back to the queue with its attempt
    taken back and its progress kept, and resumes from its stored rounds when claimed.

    A BaseException for the same reason as `WorkerStopping`."""


def stop_if_cancelled(session: Session, job_id: str) -> None:
    """JobCancelled if cancelling the job was asked for. A safe point: the gate calls it
    before recording an access (`app.services.gate`), never between the gate and storing
    what the access produced."""
    requested = session.scalar(select(Job.cancel_requested_at).where(Job.id == job_id))
    if requested is not None:
        raise JobCancelled()


def finish_cancelled(session: Session, job: Job, *, reason: str = "cancelled on request") -> int:
    """End a running job as cancelled (the caller holds it) and refund what it had not
    used on data: all of it if no noise was drawn, a mechanism's unused rounds; noise
    already drawn stays charged (`refunds.refund_unused`). Returns the units refunded."""
    job.status = "cancelled"
    job.error = reason[:ERROR_MESSAGE_LENGTH]
    job.lease_owner = None
    job.lease_expires_at = None
    job.finished_at = utcnow()
    job.progress = {**(job.progress or {}), "stage": "cancelled"}
    refunded = refunds.refund_unused(session, job, reason="job cancelled")
    _end_registration(session, job, f"the registration was cancelled ({reason})")
    session.flush()
    return refunded


class RecordSource(Protocol):
    """A worker's cache of decoded columns (`app.services.gate.RecordCache`). Only the gate
    reads through it, after recording the access as used."""

    def get(
        self, session: Session, dataset_id: str, attributes: Iterable[str]
    ) -> dict[str, np.ndarray]: ...


class JobRunner(Protocol):
    """What a job handler uses of the worker that runs it (`app.worker.Worker`)."""

    database: Database
    settings: Settings
    worker_id: str

    @property
    def columns(self) -> RecordSource:
        """The worker's decoded columns (read only through `app.services.gate`)."""

    def check_lease(self) -> None:
        """LeaseLost if the job's lease was lost since the last renewal; WorkerStopping if
        the worker is stopping (every caller is at a safe point)."""

    def checkpoint(self) -> None:
        """WorkerStopping if the worker was asked to stop: called only at safe points."""

    def progress(self, job: Job, update: dict[str, Any]) -> None:
        """Record progress visible through GET /v1/jobs/{id} (LeaseLost if not ours)."""

    def domain_of(self, dataset_id: str) -> Domain:
        """The dataset's domain."""

    def fit_covering(self, job: Job, high_water: int, domain: Domain) -> int:
        """The model version covering measurements up to `high_water`, fitting if needed."""

    def refit(self, job: Job, domain: Domain) -> int:
        """A new model version over every measurement, with the dataset's estimator."""


def succeed(
    session: Session,
    job: Job,
    *,
    model_version: int | None,
    progress: dict[str, Any] | None = None,
) -> None:
    """End the job as succeeded (`model_version` None: a job that fits no model, such as a
    registration)."""
    job.status = "succeeded"
    job.model_version = model_version
    job.progress = {**(job.progress or {}), **(progress or {}), "stage": "done"}
    job.error = None
    job.lease_owner = None
    job.lease_expires_at = None
    job.finished_at = utcnow()
    session.flush()


def noise_drawn(session: Session, job_id: str) -> bool:
    """Whether any measurement of the job was stored (released): then its ρ is spent."""
    count = session.scalar(
        select(func.count())
        .select_from(MeasurementRecord)
        .where(MeasurementRecord.job_id == job_id)
    )
    return bool(count)


def fail(
    session: Session,
    job: Job,
    message: str,
    *,
    code: str = "internal_error",
    reason: str = "job failed",
) -> int:
    """Fail the job for good and refund the ρ it has not used on data
    (`refunds.refund_unused`: all of it if no noise was drawn). Returns units refunded.

    `code` is the error's code (`PrivqError.code`: "source_changed", "records_purged",
    ...), kept in the job's progress as `error_code` beside the message in `error`."""
    job.status = "failed"
    job.error = message[:ERROR_MESSAGE_LENGTH]
    job.lease_owner = None
    job.lease_expires_at = None
    job.finished_at = utcnow()
    job.progress = {**(job.progress or {}), "stage": "failed", "error_code": code}
    refunded = refunds.refund_unused(session, job, reason=reason)
    _end_registration(session, job, message)
    session.flush()
    return refunded


def _end_registration(session: Session, job: Job, reason: str) -> None:
    """A registration job ended without succeeding: its dataset, if still registering,
    becomes rejected with `reason` (the curator's eyes only: it may quote values)."""
    if job.kind != REGISTRATION_KIND:
        return
    dataset = session.scalars(
        select(Dataset).where(Dataset.id == job.dataset_id).with_for_update()
    ).one_or_none()
    if dataset is not None and dataset.status == "registering":
        dataset.status = "rejected"
        dataset.source_error = reason


UNFINISHED = ("queued", "running")


def unfinished(session: Session, *, dataset_id: str, tenant_id: str | None = None) -> Sequence[Job]:
    """The dataset's jobs (or one tenant's of them) that are queued or running, locked."""
    query = select(Job).where(Job.dataset_id == dataset_id, Job.status.in_(UNFINISHED))
    if tenant_id is not None:
        query = query.where(Job.tenant_id == tenant_id)
    return session.scalars(query.order_by(Job.created_at, Job.id).with_for_update()).all()


def cancel(session: Session, job: Job, *, reason: str = "cancelled on request") -> int:
    """Cancel a job (the caller holds its row lock); never commits. Returns units refunded now.

    - queued: it becomes `cancelled` at once and its whole charge is refunded (it never
      ran, so none of it was used);
    - running: `cancel_requested_at` is set; the worker stops at its next safe point —
      before drawing any more noise — and refunds what the job had not used
      (`finish_cancelled`);
    - cancelled: nothing changes (cancelling twice is harmless);
    - succeeded or failed: JobFinished (409).
    """
    if job.status == "cancelled":
        return 0
    if job.status in ("succeeded", "failed"):
        raise JobFinished(f"the job has already {job.status}; there is nothing to cancel")
    now = utcnow()
    if job.status == "running":
        if job.cancel_requested_at is None:
            job.cancel_requested_at = now
            session.flush()
        return 0
    job.cancel_requested_at = job.cancel_requested_at or now
    job.status = "cancelled"
    job.finished_at = now
    job.error = reason[:ERROR_MESSAGE_LENGTH]
    job.progress = {**(job.progress or {}), "stage": "cancelled"}
    # It never ran, so nothing of it was used: the whole charge comes back.
    refunded = refunds.refund_unused(session, job, reason=f"job cancelled ({reason})")
    _end_registration(session, job, f"the registration was cancelled ({reason})")
    session.flush()
    return refunded


def release(
    session: Session,
    *,
    job_id: str,
    owner: str,
    attempt_spent: bool = True,
    progress: dict[str, Any] | None = None,
) -> bool:
    """Give a claimed job back to the queue; False if `owner` no longer held it.

    `attempt_spent` False (the worker stopped at a safe point: nothing was in flight)
    takes back the attempt its claim counted, so a redeploy never brings a job nearer to
    `MAX_ATTEMPTS`; a database hiccup or a forced stop keeps it counted.
    """
    values: dict[str, Any] = {"status": "queued", "lease_owner": None, "lease_expires_at": None}
    if not attempt_spent:
        values["attempts"] = Job.attempts - 1  # a running job's claim counted one
    if progress is not None:
        values["progress"] = progress
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.lease_owner == owner, Job.status == "running")
        .values(**values)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]
