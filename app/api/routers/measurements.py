"""Measurements and jobs: buy noisy marginals (202 + a job), watch the job, read the releases."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from sqlalchemy.orm import Session

from app.api import within_bin_requests
from app.api.concurrency import read_endpoint, write_endpoint
from app.api.deps import CurrentTenant, DatabaseDep, PrincipalDep, SettingsDep
from app.api.dry_run_schemas import DryRunOut
from app.api.pagination import PAGED, PageDep
from app.api.responses import SafeJSONResponse
from app.api.schemas import NO_SUCH_DATASET, PrivacyAmount, error_responses
from app.api.types import (
    DELTA,
    MAX_DELTA_NOTE,
    AttributeName,
    IdempotencyKeyText,
    LaplaceScale,
    ResourceId,
    Sigma,
)
from app.config import Settings
from app.db import Dataset, Job, utcnow
from app.errors import InvalidRequest
from app.services import datasets as dataset_service
from app.services import dry_run as dry_run_service
from app.services import job_progress, measurement_views, unit_accounting
from app.services import jobs as job_service
from app.services import measurements as measurement_service
from app.services import queue as queue_service
from app.services import releases as release_service
from app.services import within_bin_means as within_bin_service
from app.services.ledger import ChargeResult
from app.services.rho import check_delta, units_to_decimal_str, units_to_rho

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
                {"within_bin_means": ["hours"], "rho": 0.5},
            ]
        },
    )
    marginals: list[MarginalIn] | None = Field(
        default=None,
        min_length=1,
        max_length=measurement_service.MAX_MARGINALS_PER_REQUEST,
        description="Attribute sets to measure; each one a marginal of counts. Give this or "
        "`within_bin_means`.",
    )
    within_bin_means: list[AttributeName] | None = Field(
        default=None,
        min_length=1,
        max_length=within_bin_service.MAX_ATTRIBUTES_PER_REQUEST,
        description="Binned attributes (numeric, or integer with bins) whose within-bin "
        "means to measure: each bin's noisy sum of its rows' places within it, at the "
        "sensitivity of a one-way marginal (k); later answers use them instead of "
        "midpoints. Give this or `marginals`; `rho` is split equally over them.",
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
    within_bin_means: list[str] | None = Field(
        default=None, description="The attributes whose within-bin means will be measured."
    )
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
            within_bin_means=params.get("within_bin_means"),
            workload=params.get("workload"),
            replayed=charge.replayed,
        )


class JobOut(BaseModel):
    id: str
    dataset_id: str
    tenant_id: str | None
    kind: str
    status: str
    progress: dict[str, Any] | None
    error: str | None
    error_code: str | None = Field(
        default=None,
        description="Why a failed job failed, as an error code (`source_changed`, "
        "`records_purged`, `internal_error`, ...); null unless failed.",
    )
    model_version: int | None
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None = Field(
        default=None, description="Set: the job stops at its next safe point (running)."
    )
    queue_position: int | None = Field(
        default=None,
        description="While queued: its place (1 = next) in the order the workers would "
        "take the queued jobs now, tenants in turn; null otherwise.",
    )
    eta_seconds: float | None = Field(
        default=None,
        description="While a mechanism job runs: the seconds it is expected to take still, "
        "from its own rounds and fits so far (display only); null where it cannot be "
        "estimated yet, and once it is not running.",
    )

    @classmethod
    def of(cls, job: Job, queue_position: int | None = None) -> JobOut:
        return cls(
            id=job.id,
            dataset_id=job.dataset_id,
            tenant_id=job.tenant_id,
            kind=job.kind,
            status=job.status,
            progress=job.progress,
            error=job.error,
            error_code=(job.progress or {}).get("error_code") if job.status == "failed" else None,
            model_version=job.model_version,
            attempts=job.attempts,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            cancel_requested_at=job.cancel_requested_at,
            queue_position=queue_position,
            eta_seconds=job_progress.eta_now(job.status, job.progress, utcnow()),
        )


class MeasurementOut(BaseModel):
    id: int = Field(
        description="The measurement's number in its dataset (1, 2, …): nothing of other "
        "datasets' activity shows in it."
    )
    job_id: str | None = Field(
        description="The job that measured it; null for another tenant's job (a release is "
        "public to every grantee, who bought it is not)."
    )
    kind: Literal["marginal", "within_bin_means"] = Field(
        description="marginal: noisy counts. within_bin_means: one binned attribute's noisy "
        "per-bin sums of its rows' places within their bins, in steps of 1/`details.grid` "
        "(`sigma`/`scale` in those steps too)."
    )
    attributes: list[str]
    noise: str
    sigma: float | None = None
    scale: float | None = None
    rho: float
    values: list[int] = Field(
        description="Noisy counts, row-major over the attributes' codes (over their groups "
        "when `groups` is set); within-bin means: each code's noisy sum of fractions."
    )
    groups: list[list[list[int]]] | None = Field(
        default=None,
        description="A coarse measurement (an AIM round over groups of consecutive values): "
        "per attribute, each group's first and last code; null when every value is its own.",
    )
    details: dict[str, Any] | None = Field(
        default=None,
        description="A mechanism round's details (σ, ε, selection statistics); null for "
        "another tenant's job.",
    )
    created_at: datetime
    status: Literal["active", "quarantined"] = Field(
        description="quarantined: a model fit could not use it; it stays a release (and "
        "charged) but no fit includes it."
    )
    quarantine_reason: str | None = None

    @classmethod
    def of(cls, release: release_service.Release) -> MeasurementOut:
        record = release.record
        return cls(
            id=record.number,
            job_id=release.job_id,
            kind=record.kind,  # type: ignore[arg-type]
            attributes=list(record.attributes),
            noise=record.noise,
            sigma=record.scale if record.noise == "gaussian" else None,
            scale=record.scale if record.noise == "laplace" else None,
            rho=units_to_rho(record.rho_units),
            values=measurement_views.decoded_values(record),
            groups=measurement_views.group_ranges(record),
            # A within-bin release's details (its grid) are public: its values need them.
            details=record.details if record.kind == "within_bin_means" else release.details,
            created_at=record.created_at,
            status=record.status,  # type: ignore[arg-type]
            quarantine_reason=record.quarantine_reason,
        )


IdempotencyKey = Annotated[
    IdempotencyKeyText | None,
    Header(
        alias="Idempotency-Key",
        description="Retry safely: the same key and body return the first job, charged once.",
    ),
]


async def _dry_run_flag(
    request: Request,
    dry_run: Annotated[
        bool,
        Query(
            description="Only say what the request would cost and how accurate it would be: "
            "nothing is charged, no job is made (200 instead of 202). Give it at most once.",
            examples=[True],
        ),
    ] = False,
) -> bool:
    """`dry_run`, given at most once. A repeated flag (`?dry_run=true&dry_run=false`) is a
    422 naming it, never read as its last value: whether a request spends budget must not
    hang on which of two answers a proxy or a framework keeps."""
    given = request.query_params.getlist("dry_run")
    if len(given) > 1:
        raise InvalidRequest(
            f"dry_run is given {len(given)} times: give it at most once", field="dry_run"
        )
    return dry_run


DryRunFlag = Annotated[bool, Depends(_dry_run_flag)]
DryRunDeltaQuery = Annotated[
    float,
    DELTA.field(f"δ for the dry run's ε (tight CKS conversion). {MAX_DELTA_NOTE}"),
    BeforeValidator(DELTA.check_text),
    Query(examples=[1e-6]),
]
DEFAULT_DELTA = 1e-6


async def _dry_run_delta(settings: SettingsDep, delta: DryRunDeltaQuery = DEFAULT_DELTA) -> float:
    """The `delta` query parameter, within the service's maximum δ (422 naming it if not)."""
    return check_delta(delta, max_delta=settings.max_delta)


DryRunDelta = Annotated[float, Depends(_dry_run_delta)]


def dry_run_response(estimate: dict[str, Any]) -> JSONResponse:
    return SafeJSONResponse(DryRunOut(**estimate).model_dump(mode="json", exclude_none=True))


def _plan(
    session: Session,
    dataset_id: str,
    body: MeasurementRequest,
    settings: Settings,
    tenant_id: str,
) -> tuple[Dataset, measurement_service.MeasurementPlan]:
    """The visible dataset and the validated, priced request (no writes)."""
    dataset = dataset_service.get_dataset(session, dataset_id, tenant_id=tenant_id)
    dataset_service.require_records(dataset)
    domain = dataset_service.dataset_schema(dataset).domain()
    given_scale = _checked_scale(body)
    if body.marginals is None:
        raise InvalidRequest("give marginals or within_bin_means", field="marginals")
    plan = measurement_service.plan(
        domain,
        body.marginals,
        noise_kind=body.noise,
        rho_units_total=body.amount_units(rounding="up", max_delta=settings.max_delta),
        scale=given_scale,
        max_marginal_cells=settings.max_marginal_cells,
        max_request_cells=settings.max_request_cells,
        sensitivity=unit_accounting.sensitivity(dataset),
    )
    return dataset, plan


def _body_hash(body: MeasurementRequest) -> str:
    """The request's hash for its Idempotency-Key: the kind it does not give left out, so
    that a marginal request hashes as it did before `within_bin_means` existed."""
    dumped = body.model_dump()
    for key in ("marginals", "within_bin_means"):
        if dumped[key] is None:
            del dumped[key]
    return measurement_service.request_hash(dumped)


def _checked_scale(body: MeasurementRequest) -> float | None:
    """The noise scale the request gives (None: it gives an amount of ρ); 422 if it gives
    the wrong one, or both or neither of an amount and a scale."""
    given_scale = body.sigma if body.noise == "gaussian" else body.scale
    wrong_scale = body.scale if body.noise == "gaussian" else body.sigma
    if wrong_scale is not None:
        right, wrong = ("sigma", "scale") if body.noise == "gaussian" else ("scale", "sigma")
        raise InvalidRequest(f"{body.noise} noise takes {right!r}, not {wrong!r}")
    if body.gives_amount == (given_scale is not None):
        scale_name = "sigma" if body.noise == "gaussian" else "scale"
        raise InvalidRequest(f"give exactly one of rho, epsilon with delta, or {scale_name}")
    return given_scale


@router.post(
    "/v1/datasets/{dataset_id}/measurements",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobAccepted,
    responses={
        200: {"model": DryRunOut, "description": "`dry_run=true`: cost and expected error."},
        **error_responses(
            {
                404: NO_SUCH_DATASET,
                409: "Insufficient budget, Idempotency-Key reused, or the dataset's "
                "records were purged (`records_purged`).",
                422: "Invalid marginals, noise, or model too large.",
            }
        ),
    },
)
@write_endpoint
def create_measurement(
    dataset_id: ResourceId,
    body: MeasurementRequest,
    database: DatabaseDep,
    settings: SettingsDep,
    tenant: CurrentTenant,
    delta: DryRunDelta,
    dry_run: DryRunFlag,
    idempotency_key: IdempotencyKey = None,
) -> JobAccepted | JSONResponse:
    """Charge ρ and queue a job that measures the marginals with exact discrete noise.

    With `dry_run=true`: nothing is charged and no job is made; the answer (200) is the
    cost in ρ and in ε at `delta`, the noise scale, each marginal's expected error in
    counts, and the ρ that would remain.

    With `within_bin_means` instead of `marginals`: the same for noisy per-bin sums of
    where values lie within their bins (docs/api.md, docs/privacy.md).
    """
    if (body.marginals is None) == (body.within_bin_means is None):
        raise InvalidRequest(
            "give exactly one of marginals or within_bin_means", field="within_bin_means"
        )
    if body.within_bin_means is not None:
        request = within_bin_requests.WithinBinRequest(
            dataset_id=dataset_id,
            tenant_id=tenant.id,
            names=body.within_bin_means,
            noise=body.noise,
            rho_units=body.amount_units(rounding="up", max_delta=settings.max_delta),
            scale=_checked_scale(body),
        )
        if dry_run:
            return dry_run_response(within_bin_requests.dry_run(database, request, delta=delta))
        job, charge = within_bin_requests.submit(
            database,
            request,
            settings=settings,
            idempotency_key=idempotency_key,
            body_hash=_body_hash(body),
        )
        return JobAccepted.of(job, charge)
    if dry_run:
        with database.read_only() as read_session:
            dataset, plan = _plan(read_session, dataset_id, body, settings, tenant.id)
            estimate = dry_run_service.measurement(
                read_session,
                tenant_id=tenant.id,
                dataset_id=dataset_id,
                domain=dataset_service.dataset_schema(dataset).domain(),
                plan=plan,
                delta=delta,
                max_model_cells=settings.max_model_cells,
            )
        return dry_run_response(estimate)
    # Validated and priced before the write transaction (on SQLite: the write lock).
    with database.read_only() as read_session:
        dataset, plan = _plan(read_session, dataset_id, body, settings, tenant.id)
        grows_model = measurement_service.adds_attribute_sets(
            read_session, dataset_id, plan.marginals
        )
    domain = dataset_service.dataset_schema(dataset).domain()
    with database.unit_of_work() as session:
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
            body_hash=_body_hash(body),
            description=f"measure {len(plan.marginals)} marginal(s), {plan.noise} noise",
            check_model=grows_model,
        )
        return JobAccepted.of(job, charge)


@router.get(
    "/v1/jobs/{job_id}",
    response_model=JobOut,
    responses=error_responses({404: "No such job (or not yours)."}),
)
@read_endpoint
def read_job(job_id: ResourceId, session: Session, principal: PrincipalDep) -> JobOut:
    """A job's status, progress (stage, iteration, loss, round …), error and model version;
    while it is queued, its place in the queue."""
    job = job_service.get(session, job_id, tenant_id=principal.tenant_id)
    return JobOut.of(job, queue_service.positions(session, [job]).get(job.id))


@router.get(
    "/v1/datasets/{dataset_id}/measurements",
    response_model=list[MeasurementOut],
    responses={**PAGED, **error_responses({404: NO_SUCH_DATASET})},
)
def list_measurements(
    dataset_id: ResourceId,
    database: DatabaseDep,
    principal: PrincipalDep,
    page: PageDep,
) -> list[MeasurementOut]:
    """Every noisy measurement of the dataset: they are differentially private releases.

    Everyone who may see the dataset sees every release's values; a tenant sees the
    `job_id` and `details` only of its own jobs' measurements (the admin: of all).
    """
    tenant_id = principal.tenant_id
    with database.read_only() as session:
        dataset_service.get_dataset(session, dataset_id, tenant_id=tenant_id)
        found = release_service.page_for(
            session, dataset_id, tenant_id=tenant_id, limit=page.limit, cursor=page.cursor
        )
    page.link_next(found.next_cursor)
    # Decoded with the connection back in the pool: a page holds up to 1000 releases.
    return [MeasurementOut.of(release) for release in found.items]
