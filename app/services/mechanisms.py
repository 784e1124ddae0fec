"""Mechanism jobs: AIM and MWEM+PGM bought up front, run by the worker, resumable round by round.

`submit` validates the workload and options, then charges the whole ρ and creates
the job in one transaction (`measurements.submit`). The worker's `run_job` drives
`app.privacy.mechanisms` with:

- the gate (`app.services.gate`): each round records its exact cost as used, and is
  checked for cancellation and the lease, BEFORE its selection scores true marginals
  and its noise is drawn; nothing is checked between the gate and storing the round,
- the dataset's true marginals, readable only inside the gate (the mechanism never
  sees rows),
- the rounds this job already stored (a resumed job replays them: nothing selected or
  drawn twice), and the cost of rounds that passed the gate but were never stored
  (spent, never redone),
- `on_round`, which stores each round as a measurement row and commits BEFORE the
  mechanism uses it,
- `on_progress`, which records progress and, at a pause point (a round just stored,
  another selection round to come), gives the slot back if another tenant's job waits
  that the fair queue would take first (`yield_if_others_wait`, `app.services.queue`),
- the dataset's other measurements as context (post-processing, free),
- the dataset's sensitivity k, the rows one privacy unit may hold
  (`app.services.unit_accounting`): each round's σ is k times what a dataset whose
  unit is a row gets for the same ρ, its selection's score sensitivity is ×k, and the
  exact cost the gate records is k²/(2σ²) + ε²/8.

The ρ the mechanism may spend is the charge, less a relative 1e-11 so that float
rounding in its bookkeeping can never take the exact cost of its rounds over the
exact charge; `check_spent` verifies that with rational arithmetic after the run.
The job ends with a model version of the dataset (the mechanism's own final model
when nothing else was measured meanwhile, a refit otherwise) and leaves its
Theorem 4 bounds, relative to that version, in the job's result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from fractions import Fraction
from itertools import combinations
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import Dataset, Job, MeasurementRecord
from app.errors import InvalidRequest
from app.ingest import unpack_column
from app.limits import MAX_RHO, format_limit
from app.pgm.domain import Domain
from app.pgm.estimation import DEFAULT_ESTIMATOR
from app.pgm.junction_tree import model_cells
from app.privacy.accounting import BudgetOverspent
from app.privacy.mechanisms import (
    MechanismOptions,
    MechanismResult,
    Progress,
    Round,
    RoundAccess,
    run_aim,
    run_mwem,
)
from app.privacy.mechanisms.aim import PAPER_SCHEDULE
from app.privacy.mechanisms.fitting import final_fit_plan
from app.services import datasets as dataset_service
from app.services import (
    fits,
    gate,
    job_progress,
    jobs,
    ledger,
    quarantine,
    queue,
    unit_accounting,
)
from app.services import measurements as measurement_service
from app.services.jobs import JobRunner
from app.services.rho import MAX_RHO_UNITS, UNITS_PER_RHO, units_to_rho

# Every workload-adaptive mechanism a job may run, by the name its route and job use.
RUNNERS: dict[str, Callable[..., MechanismResult]] = {"aim": run_aim, "mwem": run_mwem}
MECHANISMS = tuple(RUNNERS)
MAX_WORKLOAD = 5000
MAX_MWEM_ROUNDS = 1000
# The mechanism runs on a hair less than the charge: its float bookkeeping allows a
# relative 1e-12 of rounding, and we want the exact cost strictly within the charge.
SAFETY = 1.0 - 1e-11
# A job waiting less than this many idle polls may be about to go to an idle slot: a
# running mechanism does not yield to it yet.
IDLE_SLOT_POLLS = 2


def default_workload(domain: Domain) -> list[tuple[str, ...]]:
    """All 2-way marginals (AIM's and the API's default workload)."""
    return [tuple(pair) for pair in combinations(domain.attributes, 2)]


def check_workload(
    domain: Domain, workload: Sequence[Sequence[str]] | None, *, max_marginal_cells: int
) -> list[tuple[str, ...]]:
    if workload is None:
        return default_workload(domain)
    if len(workload) > MAX_WORKLOAD:
        raise InvalidRequest(f"workload: at most {MAX_WORKLOAD} marginals")
    checked = measurement_service.check_attribute_sets(
        domain, workload, max_cells=max_marginal_cells, field="workload"
    )
    return [domain.canonical(attrs) for attrs in checked]


def plan(
    kind: str,
    domain: Domain,
    *,
    rho_units_total: int,
    workload: Sequence[Sequence[str]] | None,
    max_model_cells: int | None,
    rounds: int | None,
    settings_max_model_cells: int,
    settings_max_marginal_cells: int,
    measured: Sequence[Sequence[str]],
) -> tuple[dict[str, Any], int]:
    """Validate a mechanism request (no database writes); the job's params and its exact ρ."""
    if kind not in MECHANISMS:
        raise InvalidRequest(f"unknown mechanism {kind!r}")
    if not 0 < rho_units_total <= MAX_RHO_UNITS:
        raise InvalidRequest(f"rho must be positive and at most {format_limit(MAX_RHO)}")
    units = rho_units_total
    checked = check_workload(domain, workload, max_marginal_cells=settings_max_marginal_cells)
    cap = settings_max_model_cells if max_model_cells is None else max_model_cells
    if not 1 <= cap <= settings_max_model_cells:
        raise InvalidRequest(
            f"max_model_cells must be between 1 and the service's {settings_max_model_cells}"
        )
    if kind == "mwem":
        if rounds is None:
            rounds = len(domain)
        if not 1 <= rounds <= MAX_MWEM_ROUNDS:
            raise InvalidRequest(f"rounds must be between 1 and {MAX_MWEM_ROUNDS}")
    elif rounds is not None:
        raise InvalidRequest("rounds is an MWEM option; AIM chooses its own")
    # AIM starts from every one-way marginal of the workload's closure; the model that
    # makes (with what the dataset already measured) must fit, or the job could not run.
    oneway = sorted({(a,) for attrs in checked for a in attrs})
    needed = model_cells(domain, [*map(tuple, measured), *oneway])
    if needed > cap:
        raise measurement_service.ModelTooLargeRequest(
            f"the dataset's model with this workload's one-way marginals needs {needed} "
            f"cells; max_model_cells is {cap}",
            model_cells=needed,
            max_model_cells=cap,
        )
    if not any(model_cells(domain, [*map(tuple, measured), r]) <= cap for r in checked):
        raise measurement_service.ModelTooLargeRequest(
            f"no workload marginal fits within max_model_cells = {cap}", max_model_cells=cap
        )
    params = {
        "rho_units": units,
        "workload": [list(a) for a in checked],
        "max_model_cells": cap,
        "rounds": rounds,
        # The schedule the job starts with is the one it resumes with, whatever a later
        # build's defaults: its stored rounds were drawn under it.
        "schedule": current_schedule(),
    }
    return params, units


def current_schedule() -> dict[str, float | bool | None]:
    """This build's AIM schedule, kept in a job's params: MechanismOptions' defaults of
    the fields `PAPER_SCHEDULE` names (the schedule's fields are named once, there)."""
    defaults = MechanismOptions()
    return {name: getattr(defaults, name) for name in PAPER_SCHEDULE}


def stored_schedule(params: dict[str, Any]) -> dict[str, Any]:
    """The schedule a job was submitted with. One stored without a schedule began before
    AIM had one of its own, with the paper's (`PAPER_SCHEDULE`); a key missing from a
    stored schedule takes the paper's value, the default when it was stored (16·d
    rounds without `rounds_per_attribute`, σ halved without `anneal_factor`, a noise
    filter never widened without `wide_filter_share` and narrowed back at once without
    `wide_filter_ramp`, the raw noise term without `fitted_noise`, no coarse forms
    without `coarse_groups`, α = `measure_share` whatever the workload without
    `measure_share_3way`, the paper's weights without `pair_weight_cap`, the one-way
    round in one piece without `precise_oneway_share`)."""
    return {**PAPER_SCHEDULE, **params.get("schedule", PAPER_SCHEDULE)}


def submit(
    session: Session,
    *,
    kind: str,
    tenant_id: str,
    dataset_id: str,
    settings: Any,
    rho_units_total: int,
    workload: Sequence[Sequence[str]] | None,
    max_model_cells: int | None,
    rounds: int | None,
    idempotency_key: str | None,
    body_hash: str,
) -> tuple[Job, ledger.ChargeResult]:
    dataset = dataset_service.get_dataset(session, dataset_id, tenant_id=tenant_id)
    dataset_service.require_records(dataset)
    domain = dataset_service.dataset_schema(dataset).domain()
    params, units = plan(
        kind,
        domain,
        rho_units_total=rho_units_total,
        workload=workload,
        max_model_cells=max_model_cells,
        rounds=rounds,
        settings_max_model_cells=settings.max_model_cells,
        settings_max_marginal_cells=settings.max_marginal_cells,
        measured=measurement_service.measured_attribute_sets(
            session, dataset_id, tenant_id=tenant_id
        ),
    )
    oneway = sorted({(a,) for attrs in params["workload"] for a in attrs})
    return measurement_service.submit(
        session,
        tenant_id=tenant_id,
        dataset_id=dataset_id,
        domain=domain,
        kind=kind,
        params=params,
        rho_units_total=units,
        attribute_sets=oneway,
        max_model_cells=params["max_model_cells"],
        idempotency_key=idempotency_key,
        body_hash=body_hash,
        description=f"{kind.upper()} over {len(params['workload'])} workload marginal(s)",
    )


# -- the worker's side ----------------------------------------------------------------


def check_spent(
    rounds: Sequence[Round], charged_units: int, lost: Sequence[Fraction] = ()
) -> Fraction:
    """Exact total ρ of the rounds (and of those lost after the gate); BudgetOverspent if
    it exceeds the exact charge."""
    spent = sum((r.exact_cost for r in rounds), sum(lost, Fraction(0)))
    charged = Fraction(charged_units, UNITS_PER_RHO)
    if spent > charged:
        raise BudgetOverspent(f"mechanism spent {float(spent)!r} ρ of {float(charged)!r} charged")
    return spent


def stored_rounds(session: Session, job_id: str) -> list[Round]:
    records = session.scalars(
        select(MeasurementRecord)
        .where(MeasurementRecord.job_id == job_id)
        .order_by(MeasurementRecord.position)
    ).all()
    return [
        Round.from_dict({**(r.details or {}), "values": unpack_column(r.values).tolist()})
        for r in records
    ]


def _round_details(round_: Round) -> dict[str, Any]:
    details = round_.to_dict()
    details.pop("values")  # stored once, packed, in the measurement row
    return details


def yield_if_others_wait(worker: JobRunner, job: Job) -> None:
    """JobYielding if another tenant's job waits that the fair queue would take first.

    Called only at a pause point: the round this claim just ran is stored (so every
    claim makes progress: at least one round) and another selection round follows.
    The job then resumes from its stored rounds, nothing drawn or charged again; the
    cost is the resume's (its columns read again, its model refitted from a cold start).
    """
    if not worker.settings.fair_queue:
        return
    grace = IDLE_SLOT_POLLS * worker.settings.worker_poll_seconds
    with worker.database.read_only() as session:
        if queue.another_waits(session, job, grace_seconds=grace):
            raise jobs.JobYielding()


def run_job(worker: JobRunner, job: Job) -> dict[str, Any]:
    """Run (or resume) the job's mechanism, then make the model version that covers it."""
    params = job.params
    domain = worker.domain_of(job.dataset_id)
    records = gate.RecordGate(worker, job, domain)
    workload = [tuple(marginal) for marginal in params["workload"]]

    def true_marginal(attrs: tuple[str, ...]) -> Any:
        # The first read counts the whole workload in one scan (every candidate is a subset
        # of a workload marginal); later rounds sum from those counts. Inside the gate only.
        return records.marginal(attrs, preload=workload)

    def open_gate(access: RoundAccess) -> AbstractContextManager[object]:
        return records.open(purpose="round", exact_rho=access.exact_cost, round_index=access.index)

    with worker.database.read_only() as session:
        sensitivity = unit_accounting.sensitivity_of(session, job.dataset_id)
        completed = stored_rounds(session, job.id)
        lost = [Fraction(a.exact_rho) for a in gate.lost_accesses(session, job.id)]
        other_records = [
            r
            for r in measurement_service.list_for_dataset(session, job.dataset_id, active_only=True)
            if r.job_id != job.id
        ]
        others = [measurement_service.to_pgm(r) for r in other_records]
        # what the mechanism's final model is fitted on besides its own rounds
        other_ids = frozenset(r.id for r in other_records)
    rho = units_to_rho(params["rho_units"]) * SAFETY

    def on_round(round_: Round) -> None:
        # Inside the gate: no cancellation check here, the round is paid for and stored.
        with records.store_fence() as session:
            measurement_service.store(
                session,
                dataset_id=job.dataset_id,
                job_id=job.id,
                position=round_.index,
                attributes=round_.attributes,
                noise_kind="gaussian",
                scale=round_.sigma,
                rho_units_used=math.ceil(round_.exact_cost * UNITS_PER_RHO),
                values=round_.values,
                access_id=records.access_id,
                details=_round_details(round_),
            )

    options = MechanismOptions(
        max_model_cells=params["max_model_cells"],
        rounds=params.get("rounds"),
        **stored_schedule(params),
        final_fit_solver=worker.settings.fit_solver,
        sensitivity=sensitivity,
        # A stop asked for during a fit (the final one included) is honoured there.
        checkpoint=worker.checkpoint,
    )
    # The job's progress: every round, fit iterations at most once a second, and the ETA.
    reports = job_progress.MechanismProgress(
        rho_total=units_to_rho(params["rho_units"]),
        final_fit_solver=options.final_fit_solver,
        # the final fit's cap follows from the model's cells (`final_fit_plan`)
        final_fit_iterations=lambda cells: final_fit_plan(cells, options).max_iterations,
    )

    def on_progress(progress: Progress) -> None:
        update = reports.update(progress)
        if update is not None:
            worker.progress(job, update)
        if progress.pause_point:
            yield_if_others_wait(worker, job)

    try:
        result = RUNNERS[job.kind](
            domain,
            true_marginal,
            rho,
            [tuple(w) for w in params["workload"]],
            options=options,
            completed_rounds=completed,
            on_round=on_round,
            on_progress=on_progress,
            base_measurements=others,
            gate=open_gate,
            lost_rounds=[float(cost) for cost in lost],
        )
    except jobs.JobCancelled:
        # The rounds already stored are releases: they stay charged and go into the model.
        with worker.database.read_only() as session:
            stored = measurement_service.high_water(
                session, dataset_id=job.dataset_id, job_id=job.id
            )
        if stored:
            worker.fit_covering(job, stored, domain)
        raise
    spent = check_spent(result.rounds, params["rho_units"], lost)

    with worker.database.read_only() as session:
        own_ids = {
            i
            for i, owner, _status in measurement_service.id_statuses(session, job.dataset_id)
            if owner == job.id
        }
        estimator = session.scalar(select(Dataset.estimator).where(Dataset.id == job.dataset_id))
    job_high_water = max(own_ids, default=0)
    worker.check_lease()
    version = None
    # The mechanism's own final fit is mle's; a dataset fitted otherwise refits below.
    if estimator == DEFAULT_ESTIMATOR:
        version = fits.save_if_current(
            worker.database,
            job.dataset_id,
            result.model,
            result.fit,
            fitted_ids=other_ids | own_ids,
            owner=worker.worker_id,
            lease_seconds=worker.settings.lease_seconds,
        )
    bounds_version = version
    if version is None:  # something else was measured meanwhile: refit over everything
        version = worker.fit_covering(job, job_high_water, domain)
        quarantine.check_job(worker.database, job.id)
    return {
        "model_version": version,
        "rounds": len(result.rounds),
        "rho_used": float(spent),
        "bounds_model_version": bounds_version,
        "unmeasured_bounds": [b.to_dict() for b in result.unmeasured_bounds.values()]
        if bounds_version is not None
        else [],
    }
