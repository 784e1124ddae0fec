"""Workload-adaptive mechanisms: pay ρ up front, AIM or MWEM+PGM chooses what to measure."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, status
from fastapi.responses import JSONResponse
from pydantic import ConfigDict, Field

from app.api.deps import CurrentTenant, DatabaseDep, SessionDep, SettingsDep
from app.api.routers.measurements import (
    DEFAULT_DELTA,
    DryRunDelta,
    DryRunFlag,
    IdempotencyKey,
    JobAccepted,
    dry_run_response,
)
from app.api.schemas import DryRunOut, ErrorOut, RequestBody
from app.services import dry_run as dry_run_service
from app.services import measurements as measurement_service
from app.services import mechanisms as mechanism_service

router = APIRouter(prefix="/v1/datasets/{dataset_id}/mechanisms", tags=["mechanisms"])

RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": DryRunOut, "description": "`dry_run=true`: cost and expected error."},
    404: {"model": ErrorOut, "description": "No such dataset (or no grant on it)."},
    409: {"model": ErrorOut, "description": "Insufficient budget, or Idempotency-Key reused."},
    422: {"model": ErrorOut, "description": "Invalid workload or options, or model too large."},
}


class AimRequest(RequestBody):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"rho": 0.5, "workload": [["age", "sex"], ["race", "income>50K"]]},
                {"rho": 0.1, "max_model_cells": 100000},
            ]
        },
    )
    rho: float | str = Field(description="Total ρ the mechanism may spend (charged up front).")
    workload: list[list[str]] | None = Field(
        default=None, description="Marginals you will ask about (default: all 2-way)."
    )
    max_model_cells: int | None = Field(
        default=None, description="Cap on the model's size (default: the service's cap)."
    )


class MwemRequest(AimRequest):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"rho": 0.5, "workload": [["age", "sex"], ["race", "sex"]], "rounds": 30}]
        },
    )
    rounds: int | None = Field(default=None, description="T, the number of rounds (default d).")


def _submit(
    kind: str,
    dataset_id: str,
    body: AimRequest,
    session: SessionDep,
    settings: SettingsDep,
    tenant: CurrentTenant,
    idempotency_key: str | None,
) -> JobAccepted:
    job, charge = mechanism_service.submit(
        session,
        kind=kind,
        tenant_id=tenant.id,
        dataset_id=dataset_id,
        settings=settings,
        rho=body.rho,
        workload=body.workload,
        max_model_cells=body.max_model_cells,
        rounds=getattr(body, "rounds", None),
        idempotency_key=idempotency_key,
        body_hash=measurement_service.request_hash({"kind": kind, **body.model_dump()}),
    )
    return JobAccepted.of(job, charge)


def _dry_run(
    kind: str,
    dataset_id: str,
    body: AimRequest,
    database: DatabaseDep,
    settings: SettingsDep,
    tenant: CurrentTenant,
    delta: float,
) -> JSONResponse:
    with database.read_only() as session:
        estimate = dry_run_service.mechanism(
            session,
            kind=kind,
            tenant_id=tenant.id,
            dataset_id=dataset_id,
            settings=settings,
            rho=body.rho,
            workload=body.workload,
            max_model_cells=body.max_model_cells,
            rounds=getattr(body, "rounds", None),
            delta=delta,
        )
    return dry_run_response(estimate)


@router.post(
    "/aim", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted, responses=RESPONSES
)
def run_aim(
    dataset_id: str,
    body: AimRequest,
    session: SessionDep,
    database: DatabaseDep,
    settings: SettingsDep,
    tenant: CurrentTenant,
    idempotency_key: IdempotencyKey = None,
    dry_run: DryRunFlag = False,
    delta: DryRunDelta = DEFAULT_DELTA,
) -> JobAccepted | JSONResponse:
    """AIM (McKenna et al., VLDB 2022): adaptive select-measure rounds within `rho`.

    With `dry_run=true`: nothing is charged; the answer is the cost, AIM's schedule
    (rounds, σ₀, ε₀) and the expected error of each marginal measured at σ₀.
    """
    if dry_run:
        return _dry_run("aim", dataset_id, body, database, settings, tenant, delta)
    return _submit("aim", dataset_id, body, session, settings, tenant, idempotency_key)


@router.post(
    "/mwem", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted, responses=RESPONSES
)
def run_mwem(
    dataset_id: str,
    body: MwemRequest,
    session: SessionDep,
    database: DatabaseDep,
    settings: SettingsDep,
    tenant: CurrentTenant,
    idempotency_key: IdempotencyKey = None,
    dry_run: DryRunFlag = False,
    delta: DryRunDelta = DEFAULT_DELTA,
) -> JobAccepted | JSONResponse:
    """MWEM+PGM: `rounds` rounds of exponential-mechanism selection over the workload.

    With `dry_run=true`: nothing is charged; the answer is the cost, the rounds, σ and
    ε per round, and the expected error of each workload marginal measured at σ.
    """
    if dry_run:
        return _dry_run("mwem", dataset_id, body, database, settings, tenant, delta)
    return _submit("mwem", dataset_id, body, session, settings, tenant, idempotency_key)
