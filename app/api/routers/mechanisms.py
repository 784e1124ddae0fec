"""Workload-adaptive mechanisms: pay ρ up front, AIM or MWEM+PGM chooses what to measure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, status
from fastapi.responses import JSONResponse
from pydantic import BeforeValidator, ConfigDict, Field

from app.api.concurrency import write_endpoint
from app.api.deps import CurrentTenant, DatabaseDep, SettingsDep
from app.api.dry_run_schemas import DryRunOut
from app.api.routers.measurements import (
    DryRunDelta,
    DryRunFlag,
    IdempotencyKey,
    JobAccepted,
    MarginalIn,
    dry_run_response,
)
from app.api.schemas import NO_SUCH_DATASET, PrivacyAmount, error_responses
from app.api.types import NumberRange, ResourceId
from app.config import Settings
from app.db import Database, Tenant
from app.services import dry_run as dry_run_service
from app.services import measurements as measurement_service
from app.services import mechanisms as mechanism_service

router = APIRouter(prefix="/v1/datasets/{dataset_id}/mechanisms", tags=["mechanisms"])

RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": DryRunOut, "description": "`dry_run=true`: cost and expected error."},
    **error_responses(
        {
            404: NO_SUCH_DATASET,
            409: "Insufficient budget, Idempotency-Key reused, or the dataset's records "
            "were purged (`records_purged`).",
            422: "Invalid workload or options, or model too large.",
        }
    ),
}


MODEL_CELLS = NumberRange("max_model_cells", ge=1, le=10**12, whole=True)
ROUNDS = NumberRange("rounds", ge=1, le=mechanism_service.MAX_MWEM_ROUNDS, whole=True)


class AimRequest(PrivacyAmount):
    """`rho` (charged up front, rounded UP to the ledger's unit of 1e-12), or `epsilon`
    with `delta` (converted to ρ, rounded down); the workload; an optional model cap."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"rho": 0.5, "workload": [["age", "sex"], ["race", "income>50K"]]},
                {"rho": 0.1, "max_model_cells": 100000},
                {"epsilon": 1.0, "delta": 1e-9},
            ]
        },
    )
    workload: list[MarginalIn] | None = Field(
        default=None,
        min_length=1,
        max_length=mechanism_service.MAX_WORKLOAD,
        description="Marginals you will ask about (default: all 2-way).",
    )
    max_model_cells: Annotated[
        int | None,
        MODEL_CELLS.field("Cap on the model's size (default and at most: the service's cap)."),
        BeforeValidator(lambda value: value if value is None else MODEL_CELLS.check(value)),
    ] = None


class MwemRequest(AimRequest):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"rho": 0.5, "workload": [["age", "sex"], ["race", "sex"]], "rounds": 30}]
        },
    )
    rounds: Annotated[
        int | None,
        ROUNDS.field("T, the number of rounds (default: the number of attributes)."),
        BeforeValidator(lambda value: value if value is None else ROUNDS.check(value)),
    ] = None


@dataclass(frozen=True)
class Submission:
    """What every mechanism route takes besides its body: the unit of work, the
    settings, the paying tenant, the request's idempotency key, and whether it is a
    dry run (then only a read-only session of `database` is used)."""

    database: Database
    settings: Settings
    tenant: Tenant
    idempotency_key: str | None
    dry_run: bool
    delta: float

    def submit(self, kind: str, dataset_id: str, body: AimRequest) -> JobAccepted | JSONResponse:
        max_delta = self.settings.max_delta
        rho_units_total = body.required_units(rounding="up", max_delta=max_delta)  # before writing
        if self.dry_run:
            with self.database.read_only() as read_session:
                estimate = dry_run_service.mechanism(
                    read_session,
                    kind=kind,
                    tenant_id=self.tenant.id,
                    dataset_id=dataset_id,
                    settings=self.settings,
                    rho_units_total=rho_units_total,
                    workload=body.workload,
                    max_model_cells=body.max_model_cells,
                    rounds=getattr(body, "rounds", None),
                    delta=self.delta,
                )
            return dry_run_response(estimate)
        with self.database.unit_of_work() as session:
            job, charge = mechanism_service.submit(
                session,
                kind=kind,
                tenant_id=self.tenant.id,
                dataset_id=dataset_id,
                settings=self.settings,
                rho_units_total=rho_units_total,
                workload=body.workload,
                max_model_cells=body.max_model_cells,
                rounds=getattr(body, "rounds", None),
                idempotency_key=self.idempotency_key,
                body_hash=measurement_service.request_hash({"kind": kind, **body.model_dump()}),
            )
            return JobAccepted.of(job, charge)


async def _submission(
    database: DatabaseDep,
    settings: SettingsDep,
    tenant: CurrentTenant,
    delta: DryRunDelta,
    dry_run: DryRunFlag,
    idempotency_key: IdempotencyKey = None,
) -> Submission:
    return Submission(database, settings, tenant, idempotency_key, dry_run, delta)


SubmissionDep = Annotated[Submission, Depends(_submission)]


@router.post(
    "/aim", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted, responses=RESPONSES
)
@write_endpoint
def run_aim(
    dataset_id: ResourceId, body: AimRequest, submission: SubmissionDep
) -> JobAccepted | JSONResponse:
    """AIM (McKenna et al., VLDB 2022): adaptive select-measure rounds within `rho`.

    With `dry_run=true`: nothing is charged; the answer is the cost, AIM's schedule
    (rounds, σ₀, ε₀) and the expected error of each marginal measured at σ₀.
    """
    return submission.submit("aim", dataset_id, body)


@router.post(
    "/mwem", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted, responses=RESPONSES
)
@write_endpoint
def run_mwem(
    dataset_id: ResourceId, body: MwemRequest, submission: SubmissionDep
) -> JobAccepted | JSONResponse:
    """MWEM+PGM: `rounds` rounds of exponential-mechanism selection over the workload.

    With `dry_run=true`: nothing is charged; the answer is the cost, the rounds, σ and
    ε per round, and the expected error of each workload marginal measured at σ.
    """
    return submission.submit("mwem", dataset_id, body)
