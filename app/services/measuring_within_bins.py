"""The worker's side of a within-bin means job: check, pass the gate, draw, store.

`run_job` runs once per attempt of a `within_bin_means` job (`app.services.within_bin_means`
says what it releases and why it costs what it does):

1. nothing to do if its releases are stored (a retried job never draws again);
2. `AccessLost` if an earlier attempt passed the gate but stored nothing;
3. before the gate, what needs no records: the attributes still binned attributes of
   the dataset, the charge at least the exact cost at the dataset's k, OpenDP's map
   within it, and, for an upload, its stored fractions there (refused there, the job
   is refunded whole);
4. the gate records the whole charge as used and commits;
5. per attribute, the exact per-bin sums of fractions in one read of the records, and
   OpenDP's exact discrete noise on them at σ·GRID, with no transaction open;
6. one short transaction stores the noisy sums (one `within_bin_means` measurement per
   attribute), before anything uses them;
7. the next model version covers them (a fit over the same marginals, warm-started),
   and its answers use them in place of midpoints (`app.services.answers.bin_values`).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from sqlalchemy.orm import Session

from app.db import Dataset, Job
from app.errors import LedgerInvariantViolated, RecordsPurged
from app.privacy.accounting import exact_rho
from app.schema import parse_schema
from app.schema.within_bins import GRID
from app.services import gate, jobs, unit_accounting
from app.services import measurements as measurement_service
from app.services.measurements import store
from app.services.measuring import draw
from app.services.rho import UNITS_PER_RHO
from app.services.within_bin_means import (
    JOB_KIND,
    KIND,
    WithinBinPlan,
    check_attributes,
    check_opendp_price,
    require_fractions,
)

__all__ = ["JOB_KIND", "run_job"]


def run_job(runner: jobs.JobRunner, job: Job) -> dict[str, Any]:
    """The job handler: draw and store the noisy fraction sums unless already stored, then
    the model version that covers them (its answers use them): the next fit, over the
    same marginals, if the dataset has any; none before its first marginal, whose fit
    will cover them."""
    runner.progress(job, {"stage": "measuring"})
    measure(runner, job)
    runner.progress(job, {"stage": "measured"})
    with runner.database.read_only() as session:
        high_water = measurement_service.high_water(
            session, dataset_id=job.dataset_id, job_id=job.id
        )
        has_marginals = bool(measurement_service.released_attribute_sets(session, job.dataset_id))
    if not has_marginals:
        return {"model_version": None}
    domain = runner.domain_of(job.dataset_id)
    return {"model_version": runner.fit_covering(job, high_water, domain)}


def measure(runner: jobs.JobRunner, job: Job) -> bool:
    """True if the noise was drawn now, False if the releases were stored already."""
    with runner.database.read_only() as session:
        if jobs.noise_drawn(session, job.id):
            return False
        lost = bool(gate.lost_accesses(session, job.id))
        sensitivity = unit_accounting.sensitivity_of(session, job.dataset_id)
        dataset = session.get(Dataset, job.dataset_id)
        if dataset is None:
            raise RecordsPurged()
        schema = parse_schema(dataset.schema_json)
    if lost:
        raise gate.AccessLost(
            "this job's noise was drawn but its worker stopped before storing it; that draw "
            "stays charged (drawing again would be a second release), so the job ends here"
        )
    params = job.params
    attributes = check_attributes(schema, params["within_bin_means"])
    checked = WithinBinPlan(
        attributes, params["noise"], params["scale"], params["rho_units"], sensitivity
    )
    cost = exact_rho(checked.noise, checked.scale, len(attributes), sensitivity)
    if cost > Fraction(checked.rho_units, UNITS_PER_RHO):
        raise LedgerInvariantViolated(
            "the job's charge is below the exact cost of its noise at the dataset's "
            "sensitivity; nothing was drawn"
        )
    check_opendp_price(checked)
    domain = schema.domain()
    per_attribute_units = checked.rho_units // len(attributes)
    records = gate.RecordGate(runner, job, domain)

    def precheck(session: Session) -> None:
        found = session.get(Dataset, job.dataset_id)
        if found is None:
            raise RecordsPurged()
        require_fractions(session, found, attributes)

    with records.open(
        purpose="measure",
        exact_rho=Fraction(checked.rho_units, UNITS_PER_RHO),
        precheck=precheck,
    ):
        # One read of the records sums every attribute's fractions.
        summed = records.fraction_sums(attributes)
        noisy = [draw(checked.noise, summed[name][1], checked.grid_scale) for name in attributes]
        with records.store_fence() as session:
            for position, (name, values) in enumerate(zip(attributes, noisy, strict=True)):
                store(
                    session,
                    dataset_id=job.dataset_id,
                    job_id=job.id,
                    position=position,
                    attributes=(name,),
                    noise_kind=checked.noise,
                    scale=checked.grid_scale,
                    rho_units_used=per_attribute_units,
                    values=values,
                    access_id=records.access_id,
                    details={"grid": GRID, "scale_per_fraction": checked.scale},
                    kind=KIND,
                )
    return True
