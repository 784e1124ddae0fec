"""`POST /measurements` with `within_bin_means`: plan, price, dry run and submit.

The route (`app.api.routers.measurements`) checks the body's shape; this module does
what a marginal request's route does, for within-bin means
(`app.services.within_bin_means`): the dataset visible to the tenant and its records
there, the attributes binned, the exact price at the dataset's k, the upload's stored
fractions present — all before the write transaction — then the charge and the job in
one transaction (`measurements.submit`), or with a dry run nothing written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.config import Settings
from app.database import Database
from app.db import Dataset, Job
from app.services import datasets as dataset_service
from app.services import dry_run as dry_run_service
from app.services import measurements as measurement_service
from app.services import unit_accounting
from app.services import within_bin_means as within_bin_service
from app.services.ledger import ChargeResult


@dataclass(frozen=True)
class WithinBinRequest:
    """What the body asks: the attributes, the noise, and ρ (in ledger units) or a scale."""

    dataset_id: str
    tenant_id: str
    names: Sequence[str]
    noise: str
    rho_units: int | None
    scale: float | None


def plan(
    session: Session, request: WithinBinRequest
) -> tuple[Dataset, within_bin_service.WithinBinPlan]:
    """The visible dataset and the validated, priced request (no writes)."""
    dataset = dataset_service.get_dataset(session, request.dataset_id, tenant_id=request.tenant_id)
    dataset_service.require_records(dataset)
    checked = within_bin_service.plan(
        dataset_service.dataset_schema(dataset),
        request.names,
        noise_kind=request.noise,
        rho_units_total=request.rho_units,
        scale=request.scale,
        sensitivity=unit_accounting.sensitivity(dataset),
    )
    within_bin_service.require_fractions(session, dataset, checked.attributes)
    return dataset, checked


def dry_run(database: Database, request: WithinBinRequest, *, delta: float) -> dict[str, Any]:
    """The dry run's answer: nothing charged, no job made."""
    with database.read_only() as session:
        dataset, checked = plan(session, request)
        return dry_run_service.within_bin_means(
            session,
            tenant_id=request.tenant_id,
            dataset_id=request.dataset_id,
            schema=dataset_service.dataset_schema(dataset),
            plan=checked,
            delta=delta,
        )


def submit(
    database: Database,
    request: WithinBinRequest,
    *,
    settings: Settings,
    idempotency_key: str | None,
    body_hash: str,
) -> tuple[Job, ChargeResult]:
    """Charge and queue the job, in one transaction (validated and priced before it)."""
    with database.read_only() as session:
        dataset, checked = plan(session, request)
    domain = dataset_service.dataset_schema(dataset).domain()
    with database.unit_of_work() as session:
        return measurement_service.submit(
            session,
            tenant_id=request.tenant_id,
            dataset_id=request.dataset_id,
            domain=domain,
            kind=within_bin_service.JOB_KIND,
            params=checked.params(),
            rho_units_total=checked.rho_units,
            attribute_sets=[],  # no marginal: the model does not grow
            max_model_cells=settings.max_model_cells,
            idempotency_key=idempotency_key,
            body_hash=body_hash,
            description=f"measure within-bin means of {len(checked.attributes)} "
            f"attribute(s), {checked.noise} noise",
            check_model=False,
        )
