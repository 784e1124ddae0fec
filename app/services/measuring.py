"""The worker's side of a measurement job: check, pass the gate, draw the noise, store it.

`measure_job` runs once per attempt of a `measure` job:

1. nothing to do if the job's measurements are stored (a retried job never draws again);
2. `AccessLost` if an earlier attempt passed the gate but stored nothing: that draw
   stays charged, and drawing again would be a second release;
3. the gate (`app.services.gate`), whose transaction first checks, with the dataset's
   row locked so that concurrent jobs of the dataset take turns, the model cap:
   - the dataset's releases and this job's marginals above `max_model_cells`: refused
     (`model_too_large`, counting only releases, which every grantee sees); nothing is
     recorded, so the job is refunded whole;
   - within it, but above it with the jobs drawing now (past their gate, not stored
     yet): the job waits, unrecorded, until they have stored or ended, and checks
     again. Waiting, not refusing, so that no refusal tells a tenant what another is
     drawing;
   then records the whole charge as used and commits;
4. the true marginals and OpenDP's exact discrete noise, with no transaction open;
5. one short transaction that stores the noisy counts, before anything uses them.

Before the gate the job's charge is checked once more against the exact cost of its
noise at the dataset's sensitivity k (the rows one privacy unit may hold,
`app.services.unit_accounting`): a charge short of it is a bug, refused unrecorded.

The request-time check (`measurements.check_model_size`) counts only the caller's own
queued jobs, so that no refusal reveals what another tenant asked for; step 3 is what
keeps two tenants' jobs from making together a model no fit may build.
"""

from __future__ import annotations

import json
import time
from fractions import Fraction
from typing import Any

import numpy as np
from sqlalchemy import Text, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.orm import Session

from app.db import Dataset, Job, MeasurementRecord, RecordAccess, utcnow
from app.errors import InvalidRequest, LedgerInvariantViolated
from app.pgm.domain import Domain
from app.pgm.junction_tree import model_cells
from app.privacy import noise
from app.privacy.accounting import exact_rho
from app.services import gate, jobs, unit_accounting
from app.services.measurements import ModelTooLargeRequest, released_attribute_sets, store
from app.services.rho import UNITS_PER_RHO


def draw(kind: str, counts: np.ndarray, scale: float) -> np.ndarray:
    """Released noise: OpenDP's exact discrete Gaussian / discrete Laplace on integer counts."""
    if kind == "gaussian":
        return noise.discrete_gaussian(counts, scale)
    return noise.discrete_laplace(counts, scale)


def drawing_attribute_sets(
    session: Session, dataset_id: str, *, besides: str
) -> list[tuple[str, ...]]:
    """Attribute sets of the dataset's other measurement jobs that passed the gate and have
    not stored their noise yet (drawing now): they will join the model. A job whose lease
    ran out is not drawing any more (its worker died; its draw is lost, never stored)."""
    passed = (
        select(RecordAccess.job_id)
        .where(RecordAccess.dataset_id == dataset_id, RecordAccess.purpose == "measure")
        .scalar_subquery()
    )
    stored = select(MeasurementRecord.job_id).where(MeasurementRecord.dataset_id == dataset_id)
    texts = session.scalars(
        select(sql_cast(Job.params["marginals"], Text)).where(
            Job.dataset_id == dataset_id,
            Job.kind == "measure",
            Job.status == "running",
            Job.lease_expires_at > utcnow(),
            Job.id != besides,
            Job.id.in_(passed),
            Job.id.not_in(stored.scalar_subquery()),
        )
    ).all()
    return sorted({tuple(attrs) for text in texts if text for attrs in json.loads(text)})


class OthersDrawing(Exception):
    """Jobs of the dataset drawing now would, with this one, make a model above the cap:
    wait until they have stored (or ended), then check again."""


# How often a job waiting on others' draws looks again (their draws last seconds).
WAIT_POLL_SECONDS = 0.25


def check_model_at_the_gate(
    session: Session,
    job: Job,
    domain: Domain,
    marginals: list[tuple[str, ...]],
    *,
    max_model_cells: int,
) -> None:
    """ModelTooLargeRequest if the dataset's releases and this job's marginals make a model
    above the cap; OthersDrawing if the jobs drawing now push it above. The dataset's row
    stays locked until the gate commits, so the next job's check sees this one."""
    session.scalars(select(Dataset.id).where(Dataset.id == job.dataset_id).with_for_update()).one()
    released = released_attribute_sets(session, job.dataset_id)
    cells = model_cells(domain, [*released, *marginals])
    if cells > max_model_cells:
        raise ModelTooLargeRequest(
            f"the dataset's model with this measurement would need {cells} cells (measurements "
            f"were released since it was accepted); the service allows {max_model_cells}. "
            "Nothing was drawn and the whole charge is refunded",
            model_cells=cells,
            max_model_cells=max_model_cells,
        )
    drawing = drawing_attribute_sets(session, job.dataset_id, besides=job.id)
    if drawing and model_cells(domain, [*released, *drawing, *marginals]) > max_model_cells:
        raise OthersDrawing()


def measure_job(runner: jobs.JobRunner, job: Job, domain: Domain) -> bool:
    """Draw and store the job's noisy marginals unless already stored.

    Returns True if noise was drawn now, False if the measurements were already there.
    """
    with runner.database.read_only() as session:
        if jobs.noise_drawn(session, job.id):
            return False
        lost = bool(gate.lost_accesses(session, job.id))
        sensitivity = unit_accounting.sensitivity_of(session, job.dataset_id)
    if lost:
        raise gate.AccessLost(
            "this job's noise was drawn but its worker stopped before storing it; that draw "
            "stays charged (drawing again would be a second release), so the job ends here"
        )
    params = job.params
    marginals = [tuple(m) for m in params["marginals"]]
    # Everything that needs no records is checked before the gate records the access:
    # refused there, the job is refunded whole.
    unknown = sorted({a for attrs in marginals for a in attrs if a not in domain})
    if unknown:
        raise InvalidRequest(f"the dataset has no attribute(s) {unknown}")
    check_price(params, len(marginals), sensitivity)
    while True:
        try:
            return _draw_and_store(runner, job, domain, marginals)
        except OthersDrawing:
            time.sleep(WAIT_POLL_SECONDS)  # nothing recorded; the heartbeat keeps the lease


def check_price(params: dict[str, Any], count: int, sensitivity: int) -> None:
    """LedgerInvariantViolated unless the job's charge covers the exact cost of its noise
    at the dataset's sensitivity k (rows per privacy unit), checked before the gate."""
    cost = exact_rho(params["noise"], params["scale"], count, sensitivity)
    if cost > Fraction(params["rho_units"], UNITS_PER_RHO):
        raise LedgerInvariantViolated(
            "the job's charge is below the exact cost of its noise at the dataset's "
            "sensitivity; nothing was drawn"
        )


def _draw_and_store(
    runner: jobs.JobRunner, job: Job, domain: Domain, marginals: list[tuple[str, ...]]
) -> bool:
    params = job.params
    per_marginal_units = params["rho_units"] // len(marginals)
    records = gate.RecordGate(runner, job, domain)
    with records.open(
        purpose="measure",
        exact_rho=Fraction(params["rho_units"], UNITS_PER_RHO),
        precheck=lambda session: check_model_at_the_gate(
            session, job, domain, marginals, max_model_cells=runner.settings.max_model_cells
        ),
    ):
        # One scan counts every marginal of the job (the largest; the others summed).
        counts = records.marginals(marginals)
        noisy = [draw(params["noise"], counts[attrs], params["scale"]) for attrs in marginals]
        with records.store_fence() as session:
            for position, (attrs, values) in enumerate(zip(marginals, noisy, strict=True)):
                store(
                    session,
                    dataset_id=job.dataset_id,
                    job_id=job.id,
                    position=position,
                    attributes=attrs,
                    noise_kind=params["noise"],
                    scale=params["scale"],
                    rho_units_used=per_marginal_units,
                    values=values,
                    access_id=records.access_id,
                )
    return True
