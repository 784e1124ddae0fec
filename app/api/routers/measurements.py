"""Measurements and jobs: buy noisy marginals (202 + a job), watch the job, read the releases."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, status
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import CurrentTenant, DatabaseDep, PrincipalDep, SessionDep, SettingsDep
from app.api.schemas import NO_SUCH_DATASET, PrivacyAmount, error_responses
from app.api.types import AttributeName, IdempotencyKeyText, LaplaceScale, ResourceId, Sigma
from app.db import Job
from app.errors import InvalidRequest
from app.services import datasets as dataset_service
from app.services import jobs as job_service
from app.services import measurements as measurement_service
from app.services.ledger import ChargeResult
from app.services.rho import units_to_decimal_str, units_to_rho

router = APIRouter(tags=["measurements"])


# One marginal: its attributes (as many as a dataset may have).
MarginalIn = Annotated[list[AttributeName], Field(min_length=1, max_length=1000)]


class MeasurementRequest(PrivacyAmount):
    """What to measure and how much noise: give exactly one of `rho` (the total, split
    equally over the marginals; charged rounded UP to the ledger's unit of 1e-12),
    `epsilon` with `delta` (converted to ρ, rounded down), or the noise itself (`sigma`
    for Gaussian, `scale` for Laplace; charged its exact cost rounded up)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"marginals": [["age"], ["sex"], ["age", "sex"]], "noise": "gaussian", "rho": 0.1},
                {"marginals": [["race", "sex"]], "noise": "laplace", "scale": 20},
                {"marginals": [["age", "sex"]], "epsilon": 1.0, "delta": 1e-6},
            ]
        },
    )
    marginals: list[MarginalIn] = Field(
        min_length=1,
        max_length=measurement_service.MAX_MARGINALS_PER_REQUEST,
        description="Attribute sets to measure; each one a marginal of counts.",
    )
    noise: Literal["gaussian", "laplace"] = "gaussian"
    sigma: Sigma | None = None
    scale: LaplaceScale | None = None


class JobAccepted(BaseModel):
    job_id: str
    status: str
    rho_charged: float
    rho_charged_exact: str
    rho_remaining: float
    noise: str
    sigma: float | None = None
    scale: float | None = None
    marginals: list[list[str]] | None = Field(default=None, description="What will be measured.")
    workload: list[list[str]] | None = Field(
        default=None, description="A mechanism's workload (it chooses what to measure)."
    )
    replayed: bool = Field(description="True if the Idempotency-Key matched an earlier request.")

    @classmethod
    def of(cls, job: Job, charge: ChargeResult) -> JobAccepted:
        params = job.params
        noise = params.get("noise", "gaussian")  # mechanisms measure with Gaussian noise
        return cls(
            job_id=job.id,
            status=job.status,
            rho_charged=units_to_rho(charge.rho_units),
            rho_charged_exact=units_to_decimal_str(charge.rho_units),
            rho_remaining=units_to_rho(charge.rho_remaining_units),
            noise=noise,
            sigma=params["scale"] if "scale" in params and noise == "gaussian" else None,
            scale=params["scale"] if noise == "laplace" else None,
            marginals=params.get("marginals"),
            workload=params.get("workload"),
            replayed=charge.replayed,
        )


class JobOut(BaseModel):
    id: str
    dataset_id: str
    kind: str
    status: str
    progress: dict[str, Any] | None
    error: str | None
    model_version: int | None
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, job: Job) -> JobOut:
        return cls(
            id=job.id,
            dataset_id=job.dataset_id,
            kind=job.kind,
            status=job.status,
            progress=job.progress,
            error=job.error,
            model_version=job.model_version,
            attempts=job.attempts,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
        )


class MeasurementOut(BaseModel):
    id: int
    job_id: str
    attributes: list[str]
    noise: str
    sigma: float | None = None
    scale: float | None = None
    rho: float
    values: list[int] = Field(description="Noisy counts, row-major over the attributes' codes.")
    details: dict[str, Any] | None = None
    created_at: datetime
    status: Literal["active", "quarantined"] = Field(
        description="quarantined: a model fit could not use it; it stays a release (and "
        "charged) but no fit includes it."
    )
    quarantine_reason: str | None = None


IdempotencyKey = Annotated[
    IdempotencyKeyText | None,
    Header(
        alias="Idempotency-Key",
        description="Retry safely: the same key and body return the first job, charged once.",
    ),
]


@router.post(
    "/v1/datasets/{dataset_id}/measurements",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobAccepted,
    responses=error_responses(
        {
            404: NO_SUCH_DATASET,
            409: "Insufficient budget, or Idempotency-Key reused.",
            422: "Invalid marginals, noise, or model too large.",
        }
    ),
)
def create_measurement(
    dataset_id: ResourceId,
    body: MeasurementRequest,
    session: SessionDep,
    settings: SettingsDep,
    tenant: CurrentTenant,
    idempotency_key: IdempotencyKey = None,
) -> JobAccepted:
    """Charge ρ and queue a job that measures the marginals with exact discrete noise."""
    dataset = dataset_service.get_dataset(session, dataset_id, tenant_id=tenant.id)
    domain = dataset_service.dataset_schema(dataset).domain()
    given_scale = body.sigma if body.noise == "gaussian" else body.scale
    wrong_scale = body.scale if body.noise == "gaussian" else body.sigma
    if wrong_scale is not None:
        right, wrong = ("sigma", "scale") if body.noise == "gaussian" else ("scale", "sigma")
        raise InvalidRequest(f"{body.noise} noise takes {right!r}, not {wrong!r}")
    if body.gives_amount == (given_scale is not None):
        scale_name = "sigma" if body.noise == "gaussian" else "scale"
        raise InvalidRequest(f"give exactly one of rho, epsilon with delta, or {scale_name}")
    plan = measurement_service.plan(
        domain,
        body.marginals,
        noise_kind=body.noise,
        rho_units_total=body.amount_units(rounding="up"),
        scale=given_scale,
        max_marginal_cells=settings.max_marginal_cells,
    )
    job, charge = measurement_service.submit(
        session,
        tenant_id=tenant.id,
        dataset_id=dataset_id,
        domain=domain,
        kind="measure",
        params=plan.params(),
        rho_units_total=plan.rho_units,
        attribute_sets=plan.marginals,
        max_model_cells=settings.max_model_cells,
        idempotency_key=idempotency_key,
        body_hash=measurement_service.request_hash(body.model_dump()),
        description=f"measure {len(plan.marginals)} marginal(s), {plan.noise} noise",
    )
    return JobAccepted.of(job, charge)


@router.get(
    "/v1/jobs/{job_id}",
    response_model=JobOut,
    responses=error_responses({404: "No such job (or not yours)."}),
)
def read_job(job_id: ResourceId, database: DatabaseDep, principal: PrincipalDep) -> JobOut:
    """A job's status, progress (stage, iteration, loss, round …), error and model version."""
    tenant_id = principal.tenant_id
    with database.read_only() as session:
        return JobOut.of(job_service.get(session, job_id, tenant_id=tenant_id))


@router.get(
    "/v1/datasets/{dataset_id}/measurements",
    response_model=list[MeasurementOut],
    responses=error_responses({404: NO_SUCH_DATASET}),
)
def list_measurements(
    dataset_id: ResourceId, database: DatabaseDep, principal: PrincipalDep
) -> list[MeasurementOut]:
    """Every noisy measurement of the dataset: they are differentially private releases."""
    tenant_id = principal.tenant_id
    with database.read_only() as session:
        dataset_service.get_dataset(session, dataset_id, tenant_id=tenant_id)
        return [
            MeasurementOut(
                id=record.id,
                job_id=record.job_id,
                attributes=list(record.attributes),
                noise=record.noise,
                sigma=record.scale if record.noise == "gaussian" else None,
                scale=record.scale if record.noise == "laplace" else None,
                rho=units_to_rho(record.rho_units),
                values=measurement_service.decoded_values(record),
                details=record.details,
                created_at=record.created_at,
                status=record.status,  # type: ignore[arg-type]
                quarantine_reason=record.quarantine_reason,
            )
            for record in measurement_service.list_for_dataset(session, dataset_id)
        ]
