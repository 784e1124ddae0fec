"""Fits: one model fit per dataset at a time, coalescing every request that arrives meanwhile.

A job whose measurements are stored needs a model version that covers them (its
`high_water`: the largest measurement id it stored). `ensure_fitted` returns the
first version that does: if one exists already it is done; otherwise it takes the
dataset's fit lock (a leased row in `fit_locks`) and fits Private-PGM over *all* the
dataset's measurements, warm-started from the latest version. Jobs that arrive while
a fit runs wait for the lock; the next fit includes all of their measurements at
once, and the others find themselves covered.

The fit itself runs outside any transaction (it can take seconds); the new version
is written in a short one, only while the lock is still this worker's. A measurement
the fit cannot use is quarantined rather than left to fail every later fit
(`app.services.quarantine`); the last good version keeps answering meanwhile.

Each fit uses the dataset's estimator at the time ("mle", "cgm-em", "stein") and the version
records it; `refit` fits anew even when a version covers everything (the estimator
changed).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db import Database, Dataset, FitLock, utcnow
from app.metrics import observe_fit
from app.pgm.domain import Domain
from app.pgm.estimation import DEFAULT_ESTIMATOR, FitRecord
from app.pgm.model import GraphicalModel
from app.services import measurements as measurement_service
from app.services import models as model_service
from app.services import quarantine

Progress = Callable[[dict[str, object]], None]
# Called between a fit's iterations and while waiting for the lock: raises to abandon the
# fit (a worker stopping, `jobs.WorkerStopping`). A fit spends nothing, so it is redone.
Checkpoint = Callable[[], None]


class FitLockLost(RuntimeError):
    """Another worker took over this dataset's fit lock (ours expired)."""


@dataclass(frozen=True)
class FitOptions:
    solver: str = "auto"
    max_iterations: int = 5000
    tolerance: float = 1e-6
    max_model_cells: int | None = None


def _lock_row(session: Session, dataset_id: str) -> FitLock:
    row = session.scalars(
        select(FitLock).where(FitLock.dataset_id == dataset_id).with_for_update()
    ).one_or_none()
    if row is None:
        row = FitLock(dataset_id=dataset_id)
        session.add(row)
        session.flush()
    return row


def acquire(database: Database, dataset_id: str, *, owner: str, lease_seconds: float) -> bool:
    """Take (or extend) the dataset's fit lock if it is free, expired or already ours."""
    try:
        with database.unit_of_work() as session:
            row = _lock_row(session, dataset_id)
            now = utcnow()
            free = (
                row.owner is None
                or row.owner == owner
                or (row.lease_expires_at is not None and row.lease_expires_at < now)
            )
            if not free:
                return False
            row.owner = owner
            row.lease_expires_at = now + timedelta(seconds=lease_seconds)
            return True
    except IntegrityError:
        # Two workers inserted the row at once; the other one won this round.
        return False


def renew(database: Database, dataset_id: str, *, owner: str, lease_seconds: float) -> bool:
    with database.unit_of_work() as session:
        row = session.get(FitLock, dataset_id)
        if row is None or row.owner != owner:
            return False
        row.lease_expires_at = utcnow() + timedelta(seconds=lease_seconds)
        return True


def release(database: Database, dataset_id: str, *, owner: str) -> None:
    with database.unit_of_work() as session:
        row = session.get(FitLock, dataset_id)
        if row is not None and row.owner == owner:
            row.owner = None
            row.lease_expires_at = None


def covering_version(database: Database, dataset_id: str, high_water: int) -> int | None:
    """The latest version if it covers every active measurement up to `high_water`.

    Quarantined measurements need no covering (no fit includes them); if nothing up to
    `high_water` is active, the latest version (0 before the first) covers it.
    """
    with database.read_only() as session:
        latest = model_service.latest_version_row(session, dataset_id)
        needed = measurement_service.high_water(
            session, dataset_id=dataset_id, up_to=high_water, active_only=True
        )
        if needed == 0:
            return latest.version if latest is not None else 0
        if latest is not None and latest.high_water >= needed:
            return latest.version
    return None


def fit_now(
    database: Database,
    dataset_id: str,
    domain: Domain,
    *,
    owner: str,
    options: FitOptions,
    progress: Progress,
    force: bool = False,
    checkpoint: Checkpoint | None = None,
) -> int | None:
    """Fit over every usable measurement of the dataset and store the next version (lock held).

    Measurements that cannot be fitted are quarantined first; if the fit fails all the
    same, the new measurement that breaks it is found, quarantined, and the fit runs
    again without it (`app.services.quarantine`). A failure no new measurement explains
    is raised, and the last good version keeps answering. Returns the new version, or
    None if quarantining left nothing the latest version lacks (or nothing at all);
    with `force` (a refit), a new version whenever anything is left to fit.
    """
    with database.read_only() as session:
        estimator = session.scalar(select(Dataset.estimator).where(Dataset.id == dataset_id))
        # One read: the high-water mark is the largest id among the records read, never
        # one that committed between two statements (READ COMMITTED on PostgreSQL).
        # Within-bin means are read too: no fit uses them, but the version's high-water
        # mark covers them, and its answers use those it covers.
        everything = measurement_service.list_for_dataset(session, dataset_id, kind=None)
        records = [r for r in everything if r.status == "active" and r.kind == "marginal"]
        # Every measurement up to here is decided: fitted, or quarantined below.
        high_water = max((r.id for r in everything), default=0)
        latest = model_service.latest_version_row(session, dataset_id)
        warm_start = (
            model_service.load_model(session, dataset_id, latest.version) if latest else None
        )
    unusable = {
        r.id: reason
        for r in records
        if (reason := quarantine.unfittable_reason(r, domain)) is not None
    }
    quarantine.quarantine(database, unusable)
    usable = {r.id: measurement_service.to_pgm(r) for r in records if r.id not in unusable}
    fitted_before = latest.high_water if latest is not None else 0
    base = [i for i in usable if i <= fitted_before]
    new = [i for i in usable if i > fitted_before]
    last_report = 0.0
    last: dict[str, object] = {"stage": "fitting", "iteration": 0, "loss": None}

    def on_heartbeat() -> None:
        """After every iteration, and every other step of the fit that may take seconds."""
        nonlocal last_report
        if checkpoint is not None:
            checkpoint()
        now = time.monotonic()
        if now - last_report >= 0.5:
            last_report = now
            progress(dict(last))

    def on_iteration(iteration: int, loss: float) -> None:
        # a loss that is not a finite number (JSON has none) is reported as null
        last.update(iteration=iteration, loss=float(loss) if math.isfinite(loss) else None)
        on_heartbeat()

    def fit_over(ids: list[int]) -> tuple[GraphicalModel, FitRecord]:
        return quarantine.checked_fit(
            domain,
            [usable[i] for i in ids],
            solver=options.solver,
            estimator=estimator or DEFAULT_ESTIMATOR,
            warm_start=warm_start,
            max_iterations=options.max_iterations,
            tolerance=options.tolerance,
            callback=on_iteration,
            heartbeat=on_heartbeat,
            max_model_cells=options.max_model_cells,
        )

    def fails(ids: list[int]) -> bool:
        if not ids:
            return False
        try:
            fit_over(ids)
        except quarantine.FitFailed:
            return True
        return False

    quarantined = set(unusable)
    while True:
        if not base and not new:
            return None
        if quarantined and not new and not force:
            # All the latest version lacked was quarantined: it covers what is left.
            return None
        progress({"stage": "fitting", "iteration": 0, "measurements": len(base) + len(new)})
        try:
            model, record = fit_over(base + new)
            break
        except quarantine.FitFailed as failure:
            culprit = quarantine.find_culprit(fails, base, new)
            if culprit is None:
                raise failure.__cause__ or failure from None
            quarantine.quarantine(database, {culprit: f"the model fit failed with it ({failure})"})
            new.remove(culprit)
            quarantined.add(culprit)
            progress({"quarantined": sorted(quarantined)})
    observe_fit(record.solver, record.seconds, record.iterations)
    with database.unit_of_work() as session:
        lock = session.scalars(
            select(FitLock).where(FitLock.dataset_id == dataset_id).with_for_update()
        ).one_or_none()
        if lock is None or lock.owner != owner:
            raise FitLockLost(f"lost the fit lock of dataset {dataset_id}")
        saved = model_service.save_version(
            session,
            dataset_id=dataset_id,
            model=model,
            record=record,
            high_water=high_water,
            measurement_count=len(base) + len(new),
        )
        version: int = saved.version
    progress(final_progress(record))  # after the version is stored: a stop here loses nothing
    return version


def final_progress(record: FitRecord) -> dict[str, object]:
    """A fit's last progress: the iterations it ran (not the last sample of them), and its
    final loss when it is a number."""
    update: dict[str, object] = {"stage": "fitted", "iteration": record.iterations}
    loss = record.losses[-1] if record.losses else record.final_loss
    if math.isfinite(loss):
        update["loss"] = float(loss)
    return update


def _fit_until(
    database: Database,
    dataset_id: str,
    domain: Domain,
    *,
    covered: Callable[[], int | None],
    force: bool,
    owner: str,
    lease_seconds: float,
    options: FitOptions,
    progress: Progress,
    poll_seconds: float,
    held_locks: set[str] | None,
    checkpoint: Checkpoint | None = None,
) -> int:
    """`covered()` if it names a version, else a version this worker fits under the lock.

    Waits while another worker holds the lock; if our lease runs out mid-fit, whoever
    holds the lock now fits instead, and `covered()` is asked again.
    """
    waiting_reported = False
    while True:
        version = covered()
        if version is not None:
            return version
        if acquire(database, dataset_id, owner=owner, lease_seconds=lease_seconds):
            if held_locks is not None:
                held_locks.add(dataset_id)
            try:
                version = fit_now(
                    database,
                    dataset_id,
                    domain,
                    owner=owner,
                    options=options,
                    progress=progress,
                    force=force,
                    checkpoint=checkpoint,
                )
            except FitLockLost:
                continue  # our lease ran out mid-fit; whoever holds the lock now fits instead
            finally:
                if held_locks is not None:
                    held_locks.discard(dataset_id)
                release(database, dataset_id, owner=owner)
            if version is not None:
                return version
            if force:  # nothing left to fit at all: the latest version stands
                with database.read_only() as session:
                    return model_service.latest_version_number(session, dataset_id) or 0
            continue
        if not waiting_reported:
            progress({"stage": "waiting_for_fit"})
            waiting_reported = True
        if checkpoint is not None:
            checkpoint()
        time.sleep(poll_seconds)


def ensure_fitted(
    database: Database,
    dataset_id: str,
    domain: Domain,
    *,
    high_water: int,
    owner: str,
    lease_seconds: float,
    options: FitOptions,
    progress: Progress,
    poll_seconds: float = 0.25,
    held_locks: set[str] | None = None,
    checkpoint: Checkpoint | None = None,
) -> int:
    """The first model version covering measurements up to `high_water`, fitting if needed.

    `held_locks` (if given) records the datasets whose fit lock this worker holds
    while it fits, so a heartbeat can renew the lease.
    """
    return _fit_until(
        database,
        dataset_id,
        domain,
        covered=lambda: covering_version(database, dataset_id, high_water),
        force=False,
        owner=owner,
        lease_seconds=lease_seconds,
        options=options,
        progress=progress,
        poll_seconds=poll_seconds,
        held_locks=held_locks,
        checkpoint=checkpoint,
    )


def refit(
    database: Database,
    dataset_id: str,
    domain: Domain,
    *,
    owner: str,
    lease_seconds: float,
    options: FitOptions,
    progress: Progress,
    poll_seconds: float = 0.25,
    held_locks: set[str] | None = None,
    checkpoint: Checkpoint | None = None,
) -> int:
    """A new version over every usable measurement, covered or not (the estimator changed)."""
    return _fit_until(
        database,
        dataset_id,
        domain,
        covered=lambda: None,
        force=True,
        owner=owner,
        lease_seconds=lease_seconds,
        options=options,
        progress=progress,
        poll_seconds=poll_seconds,
        held_locks=held_locks,
        checkpoint=checkpoint,
    )


def save_if_current(
    database: Database,
    dataset_id: str,
    model: GraphicalModel,
    record: FitRecord,
    *,
    fitted_ids: Collection[int],
    owner: str,
    lease_seconds: float,
    poll_seconds: float = 0.25,
) -> int | None:
    """Store an already fitted model as the next version if it covers every measurement.

    A mechanism's final model was fitted over the measurements `fitted_ids` (the
    dataset's active ones when it started, and its own rounds); if they are exactly the
    dataset's active measurements now, it is the dataset's model and need not be fitted
    again. Returns the version, or None if the dataset holds measurements it lacks (one
    stored while the mechanism ran) or it holds one no longer active.
    """
    while not acquire(database, dataset_id, owner=owner, lease_seconds=lease_seconds):
        time.sleep(poll_seconds)
    try:
        with database.unit_of_work() as session:
            # One read (READ COMMITTED on PostgreSQL): the ids and their status together.
            everything = measurement_service.id_statuses(session, dataset_id)
            active = {i for i, _job, status in everything if status == "active"}
            if active != set(fitted_ids):
                return None
            return model_service.save_version(
                session,
                dataset_id=dataset_id,
                model=model,
                record=record,
                high_water=max((i for i, _job, _status in everything), default=0),
                measurement_count=len(active),
            ).version
    finally:
        release(database, dataset_id, owner=owner)
