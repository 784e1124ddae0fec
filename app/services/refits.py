"""Refits: a dataset's estimator, and the job that refits its model from the same measurements.

`set_estimator` (the admin's PATCH) changes `datasets.estimator` under a row lock and,
when it changed and the dataset has measurements, queues a "refit" job in the same
transaction. The job spends nothing: it draws no noise and has no ledger line (its
tenant is nobody); it only runs the fit again over the stored measurements — post-
processing of releases already made — and stores the next model version, which names
its estimator. Fits that ran meanwhile used the estimator of their time; the refit
always produces a version with the current one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import Dataset, Job, new_id
from app.errors import InvalidRequest, NotFound
from app.pgm.estimation import ESTIMATOR_NAMES
from app.services import jobs
from app.services import measurements as measurement_service

JOB_KIND = "refit"


class UnknownEstimator(InvalidRequest):
    """The estimator must be one of app.pgm.estimation.ESTIMATOR_NAMES."""


@dataclass(frozen=True)
class EstimatorChange:
    dataset: Dataset
    job: Job | None  # the queued refit, if the estimator changed and there is data to refit


def set_estimator(session: Session, dataset_id: str, estimator: str) -> EstimatorChange:
    """Set the dataset's estimator; queue a refit if it changed and anything was measured."""
    if estimator not in ESTIMATOR_NAMES:
        raise UnknownEstimator(
            f"estimator must be one of {', '.join(ESTIMATOR_NAMES)}, not {estimator!r}",
            field="estimator",
        )
    dataset = session.scalars(
        select(Dataset)
        .where(Dataset.id == dataset_id, Dataset.deleted_at.is_(None))
        .with_for_update()
    ).one_or_none()
    if dataset is None:
        raise NotFound("dataset not found")
    if dataset.estimator == estimator:
        return EstimatorChange(dataset, None)
    dataset.estimator = estimator
    job = None
    if measurement_service.high_water(session, dataset_id=dataset_id) > 0:
        job = jobs.create(
            session,
            job_id=new_id(),
            dataset_id=dataset_id,
            tenant_id=None,
            kind=JOB_KIND,
            params={"estimator": estimator},
        )
    session.flush()
    return EstimatorChange(dataset, job)


def run_job(worker: jobs.JobRunner, job: Job) -> dict[str, Any]:
    """Fit a new model version over the dataset's measurements with its current estimator.

    Its one safe point is before the fit: a cancelled refit stops there (nothing to refund).
    """
    with worker.database.read_only() as session:
        jobs.stop_if_cancelled(session, job.id)
    domain = worker.domain_of(job.dataset_id)
    worker.progress(job, {"stage": "refitting"})
    return {"model_version": worker.refit(job, domain)}
