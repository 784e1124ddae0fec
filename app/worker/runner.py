"""The worker: claim a job, run it (measure → fit), finish it, or give it back when stopping.

`Worker.run_once` claims the next claimable job (tenants in turn) under a lease, runs it and marks
it succeeded or failed. A heartbeat thread renews the lease (and the dataset's fit
lock while fitting) every third of the lease; if the lease is lost, the worker
abandons the job at the next step, leaving it to whoever holds it now.

Running a measurement job:
1. measure — unless the job's measurements are already stored: pass the gate (the
   charge recorded as used; a cancel asked for before stops the job here), compute
   the true marginals, add OpenDP's discrete noise with no transaction open, and
   store the noisy counts in one short transaction. A retried job finds them and
   never draws again (`app.services.gate`).
2. fit — `fits.ensure_fitted`: the first model version covering those measurements.
3. succeed with that version.

A mechanism job runs `mechanisms.run_job`; a refit job (the dataset's estimator
changed: no noise, no charge) runs `refits.run_job`, a new fit of the same measurements;
a registration job (a source registered by reference: no noise, no charge, no model)
runs `sources.run_job`, the scan that makes the dataset ready or rejected.

A failure that is the job's own (a refusal: bad parameters, a model too large) fails
it for good with that refusal's message; any other exception is a bug, logged with
its traceback, and fails the job with a message that names only its kind and stage.
Either way the job is refunded the ρ it had not used on data (`refunds`). A database
hiccup gives the job back to the queue for another attempt.

Yielding: a mechanism job whose round was just stored while another tenant's job waits
(`app.services.queue`) raises `jobs.JobYielding` and goes back to the queue the same
way as a stopping worker's, its stage `yielded`; the worker then claims the next job.

Stopping (`request_stop`, which `privq worker` calls on SIGTERM): the job in hand stops
at its next safe point — a gate about to record an access, a round or measurement just
stored, a fit's next iteration (a fit spends nothing and is redone) — raising
`jobs.WorkerStopping`, and goes straight back to the queue with its attempt taken back
(`jobs.release`): nothing was in flight, so nothing is lost or drawn twice.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import OperationalError

from app import metrics
from app.config import Settings
from app.db import Database, Job, utcnow
from app.errors import PrivqError
from app.pgm.domain import Domain
from app.pgm.junction_tree import ModelTooLarge
from app.services import datasets as dataset_service
from app.services import (
    fits,
    job_progress,
    jobs,
    measuring,
    measuring_within_bins,
    mechanisms,
    quarantine,
    refits,
    sources,
)
from app.services import measurements as measurement_service
from app.services.gate import RecordCache
from app.services.jobs import LeaseLost
from app.worker.heartbeat import KEEPALIVE_SECONDS, Heartbeat

logger = logging.getLogger("privq.worker")

# A job's stage once a stopping worker gave it back (queued again, no attempt spent).
REQUEUED_STAGE = "requeued"
# A mechanism job's stage once it gave its slot to another tenant's job (likewise).
YIELDED_STAGE = "yielded"


def _handler(kind: str) -> Callable[[Worker, Job], dict[str, Any]]:
    if kind == "measure":
        return Worker.run_measurement
    if kind in mechanisms.MECHANISMS:  # the workload-adaptive mechanisms
        return mechanisms.run_job
    if kind == refits.JOB_KIND:  # a new fit after the dataset's estimator changed
        return refits.run_job
    if kind == sources.JOB_KIND:  # the scan of a source registered by reference
        return sources.run_job
    if kind == measuring_within_bins.JOB_KIND:  # noisy sums of places within bins
        return measuring_within_bins.run_job
    raise PrivqError(f"unknown job kind {kind!r}")


def _is_the_jobs_own(error: Exception) -> bool:
    """A refusal of what the job asked (its fault, nothing to report), not a bug."""
    if isinstance(error, PrivqError):
        return error.status < 500
    return isinstance(error, ModelTooLarge)


def internal_error_message(error: Exception, stage: str) -> str:
    """What a job's owner reads when it failed on something that is not their fault."""
    return (
        f"internal error ({type(error).__name__}) while {stage}; the job will not be retried. "
        "The ρ it had not used on data was refunded (see the ledger). The worker's log "
        "has the details under this job's id: please report it to the operator."
    )


# A claimed job's stage before it reports one.
STARTED_STAGE = "started"


class Worker:
    """One worker: claims and runs jobs one at a time."""

    def __init__(
        self,
        database: Database,
        settings: Settings,
        *,
        worker_id: str | None = None,
        poll_seconds: float | None = None,
    ) -> None:
        self.database = database
        self.settings = settings
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.poll_seconds = settings.worker_poll_seconds if poll_seconds is None else poll_seconds
        self.columns = RecordCache()
        self.held_fit_locks: set[str] = set()
        self._heartbeat: Heartbeat | None = None
        self._last_progress: dict[str, Any] = {}
        # Serialises progress writes of the job's thread and the heartbeat's keep-alive,
        # so an older report never lands after a newer one.
        self._progress_lock = threading.Lock()
        self._progress_written = time.monotonic()
        # Set to stop at the next safe point (`request_stop`); run_forever ends then.
        self.stopping = threading.Event()

    def request_stop(self) -> None:
        """Stop at the job's next safe point and give it back, then run no other job."""
        self.stopping.set()

    def checkpoint(self) -> None:
        """WorkerStopping if a stop was asked for: called only at safe points."""
        if self.stopping.is_set():
            raise jobs.WorkerStopping()

    # -- the loop ----------------------------------------------------------------------

    def run_once(self) -> bool:
        """Claim and run one job; False if there was none to claim (or the worker is stopping)."""
        if self.stopping.is_set():
            return False
        with self.database.unit_of_work() as session:
            job = jobs.claim(
                session,
                owner=self.worker_id,
                lease_seconds=self.settings.lease_seconds,
                is_sqlite=self.database.is_sqlite,
                fair=self.settings.fair_queue,
            )
            if job is None:
                return False
            session.expunge(job)
        logger.info(
            "job claimed", extra={"job_id": job.id, "kind": job.kind, "attempt": job.attempts}
        )
        given_back = (job.progress or {}).get("stage") in (REQUEUED_STAGE, YIELDED_STAGE)
        if job.attempts == 1 and job.started_at is not None and not given_back:
            metrics.observe_job_claimed(job.kind, (job.started_at - job.created_at).total_seconds())
        # Until the job reports a stage of its own (a mechanism's first scan of a large
        # source can take minutes), the heartbeat keeps this one fresh.
        self._last_progress = dict(job.progress or {})
        if self._last_progress.get("stage") in (None, "queued", REQUEUED_STAGE, YIELDED_STAGE):
            self._last_progress["stage"] = STARTED_STAGE
        self._progress_written = time.monotonic() - KEEPALIVE_SECONDS
        try:
            with Heartbeat(self, job.id) as heartbeat:
                self._heartbeat = heartbeat
                result = _handler(job.kind)(self, job)
            self._finish(job, result)
        except LeaseLost:
            logger.warning("lease lost; leaving the job to its new owner", extra={"job_id": job.id})
        except jobs.JobCancelled:
            self._cancelled(job)
        except jobs.WorkerStopping:
            # At a safe point: nothing in flight, so the attempt is not counted.
            logger.info("worker stopping; job given back", extra={"job_id": job.id})
            self._give_back(job, attempt_spent=False)
        except jobs.JobYielding:
            # After a stored round, for another tenant's job: back in the queue, its
            # attempt not counted; it resumes from its stored rounds in its turn.
            logger.info("job yields its slot", extra={"job_id": job.id})
            self._give_back(job, attempt_spent=False, stage=YIELDED_STAGE)
        except OperationalError:
            logger.exception("database error; giving the job back", extra={"job_id": job.id})
            self._give_back(job)
        except Exception as error:
            self._fail_on(job, error)
        except BaseException:
            # A forced stop (a second signal, the grace ran out): not at a safe point, so
            # the attempt stays counted; the job is handed back at once, not after its lease.
            self._give_back(job)
            raise
        finally:
            self._heartbeat = None
        return True

    def run_until_idle(self, max_jobs: int = 1000) -> int:
        """Run jobs until none is claimable (tests and `privq worker --once`)."""
        done = 0
        while done < max_jobs and self.run_once():
            done += 1
        return done

    def run_forever(
        self, stop: threading.Event | None = None, alive: Callable[[], bool] | None = None
    ) -> None:
        """Run jobs until `stop` (by default `self.stopping`) is set."""
        if stop is not None:
            self.stopping = stop
        stop = self.stopping
        logger.info("worker started", extra={"worker_id": self.worker_id})
        while not stop.is_set():
            if alive is not None and not alive():
                logger.info("parent process gone; worker stopping")
                return
            try:
                ran = self.run_once()
                if not ran:
                    self.forget_retired_columns()
            except OperationalError:
                logger.exception("cannot reach the database; retrying")
                ran = False
            if not ran:
                stop.wait(self.poll_seconds)

    def forget_retired_columns(self) -> None:
        """Drop cached records of datasets purged or deleted since they were loaded: once
        the curator destroys them, no worker keeps a copy in memory either."""
        with self.database.read_only() as session:
            self.columns.forget_retired(session)

    # -- steps shared by every kind of job ----------------------------------------------

    def check_lease(self) -> None:
        """LeaseLost if the lease was lost; WorkerStopping if stopping (every caller — a gate
        before it records an access, a fit before it starts — is at a safe point)."""
        if self._heartbeat is not None and self._heartbeat.lost.is_set():
            raise LeaseLost()
        self.checkpoint()

    def progress(self, job: Job, update: dict[str, Any]) -> None:
        """Record progress (visible through GET /v1/jobs/{id}); raises LeaseLost if not ours.

        Every report is made at a safe point (before a gate, after a round or a
        measurement is stored, between fit iterations), so a stop asked for is honoured
        here once the progress is recorded. `updated_at` says when (an ETA in it is as of
        then)."""
        with self._progress_lock:
            self._last_progress = {
                **self._last_progress,
                **update,
                "updated_at": utcnow().isoformat(),
            }
            held = self._write_progress(job.id, self._last_progress)
        if not held:
            raise LeaseLost()
        self.checkpoint()

    def _write_progress(self, job_id: str, progress: dict[str, Any]) -> bool:
        with self.database.unit_of_work() as session:
            held = jobs.renew(
                session,
                job_id=job_id,
                owner=self.worker_id,
                lease_seconds=self.settings.lease_seconds,
                progress=progress,
            )
        self._progress_written = time.monotonic()
        return held

    def keep_progress_alive(self, job_id: str) -> bool:
        """From the heartbeat: rewrite the last report if none was written for
        KEEPALIVE_SECONDS (its ETA less the time since, `updated_at` now); False once the
        lease is not this worker's. Skipped while the job's own thread is writing."""
        if time.monotonic() - self._progress_written < KEEPALIVE_SECONDS:
            return True
        if not self._progress_lock.acquire(blocking=False):
            return True
        try:
            if not self._last_progress:
                return True
            now = utcnow()
            progress = dict(self._last_progress)
            progress["eta_seconds"] = job_progress.eta_now("running", progress, now)
            progress["updated_at"] = now.isoformat()
            self._last_progress = progress
            return self._write_progress(job_id, progress)
        finally:
            self._progress_lock.release()

    def domain_of(self, dataset_id: str) -> Domain:
        with self.database.read_only() as session:
            return dataset_service.dataset_schema(
                dataset_service.get_dataset(session, dataset_id)
            ).domain()

    def fit_options(self) -> fits.FitOptions:
        return fits.FitOptions(
            solver=self.settings.fit_solver,
            max_iterations=self.settings.fit_max_iterations,
            tolerance=self.settings.fit_tolerance,
            max_model_cells=self.settings.max_model_cells,
        )

    def fit_covering(self, job: Job, high_water: int, domain: Domain) -> int:
        """The model version covering the job's measurements (fitting it if needed)."""
        self.check_lease()
        return fits.ensure_fitted(
            self.database,
            job.dataset_id,
            domain,
            high_water=high_water,
            owner=self.worker_id,
            lease_seconds=self.settings.lease_seconds,
            options=self.fit_options(),
            progress=lambda update: self.progress(job, update),
            held_locks=self.held_fit_locks,
            checkpoint=self.checkpoint,
        )

    def refit(self, job: Job, domain: Domain) -> int:
        """A new model version over all the dataset's measurements (its estimator changed)."""
        self.check_lease()
        return fits.refit(
            self.database,
            job.dataset_id,
            domain,
            owner=self.worker_id,
            lease_seconds=self.settings.lease_seconds,
            options=self.fit_options(),
            progress=lambda update: self.progress(job, update),
            held_locks=self.held_fit_locks,
            checkpoint=self.checkpoint,
        )

    # -- job kinds ------------------------------------------------------------------------

    def run_measurement(self, job: Job) -> dict[str, Any]:
        domain = self.domain_of(job.dataset_id)
        self.progress(job, {"stage": "measuring"})
        # The one safe point of a measurement is its gate: once the access is recorded
        # its noise is drawn and stored, and the job goes on to put it in the model.
        drawn = measuring.measure_job(self, job, domain)
        with self.database.read_only() as session:
            high_water = measurement_service.high_water(
                session, dataset_id=job.dataset_id, job_id=job.id
            )
        logger.info(
            "measured" if drawn else "measurements already stored", extra={"job_id": job.id}
        )
        self.progress(job, {"stage": "measured"})
        version = self.fit_covering(job, high_water, domain)
        quarantine.check_job(self.database, job.id)  # a fit could not use it: say so
        return {"model_version": version}

    # -- endings ------------------------------------------------------------------------

    def _finish(self, job: Job, result: dict[str, Any]) -> None:
        with self.database.unit_of_work() as session:
            row = session.get(Job, job.id)
            if row is None or row.lease_owner != self.worker_id or row.status != "running":
                raise LeaseLost()
            jobs.succeed(
                session,
                row,
                model_version=result.get("model_version"),
                progress={**self._last_progress, **result},
            )
        logger.info(
            "job succeeded", extra={"job_id": job.id, "model_version": result.get("model_version")}
        )
        self._observe_end(job, "succeeded")

    def _fail_on(self, job: Job, error: Exception) -> None:
        """Fail the job for `error`: the job's own problem in its words, or an internal one.

        A refusal (a `PrivqError` below 500, or a model over the size cap) is the job
        asking for something the service will not do, and its message says what. Anything
        else — a bug, a broken invariant — is logged with its traceback, and the job's
        error (which a tenant reads) names only the kind of failure and where: an
        exception's text may quote private values.
        """
        if _is_the_jobs_own(error):
            logger.warning("job refused", extra={"job_id": job.id, "error": type(error).__name__})
            if isinstance(error, PrivqError):
                self._fail(job, error.message, code=error.code)
            else:
                self._fail(job, str(error), code="model_too_large")
            return
        stage = str(self._last_progress.get("stage", "starting"))
        logger.exception(
            "job failed on an internal error",
            exc_info=error,
            extra={"job_id": job.id, "stage": stage},
        )
        self._fail(job, internal_error_message(error, stage))

    def _cancelled(self, job: Job) -> None:
        """End the job as cancelled at the safe point it stopped at, refunding the rest."""
        with self.database.unit_of_work() as session:
            row = session.get(Job, job.id)
            if row is None or row.lease_owner != self.worker_id or row.status != "running":
                return
            refunded = jobs.finish_cancelled(session, row)
        logger.info("job cancelled", extra={"job_id": job.id, "refunded_units": refunded})
        self._observe_end(job, "cancelled")

    def _fail(self, job: Job, message: str, *, code: str = "internal_error") -> None:
        with self.database.unit_of_work() as session:
            row = session.get(Job, job.id)
            if row is None or row.lease_owner != self.worker_id or row.status != "running":
                return
            refunded = jobs.fail(session, row, message, code=code)
        logger.warning("job failed", extra={"job_id": job.id, "refunded_units": refunded})
        self._observe_end(job, "failed")

    @staticmethod
    def _observe_end(job: Job, status: str) -> None:
        if job.started_at is not None:
            metrics.observe_job_finished(
                job.kind, status, (utcnow() - job.started_at).total_seconds()
            )

    def _give_back(
        self, job: Job, *, attempt_spent: bool = True, stage: str = REQUEUED_STAGE
    ) -> None:
        progress = None if attempt_spent else {**self._last_progress, "stage": stage}
        try:
            with self.database.unit_of_work() as session:
                jobs.release(
                    session,
                    job_id=job.id,
                    owner=self.worker_id,
                    attempt_spent=attempt_spent,
                    progress=progress,
                )
        except Exception:
            logger.exception(
                "could not give the job back; its lease will expire", extra={"job_id": job.id}
            )
