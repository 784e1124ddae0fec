"""API schemas: the JSON bodies the HTTP API accepts and returns (pydantic v2).

Request bodies forbid unknown fields (422) and carry an OpenAPI example each. These
are not the tables: `app.db` models are converted here explicitly.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from app.api.types import Delta, Epsilon, Name, ResourceId, Rho
from app.db import Dataset, Grant, LedgerEntry, Tenant
from app.errors import InvalidRequest
from app.services.rho import (
    Rounding,
    rho_units,
    rho_units_from_epsilon,
    units_to_decimal_str,
    units_to_rho,
)


class RequestBody(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PrivacyAmount(RequestBody):
    """An amount of privacy loss: `rho`, or `epsilon` with `delta` instead.

    (ε, δ) is converted with the tight Canonne–Kamath–Steinke bound that GET /budget
    reports: the largest ρ whose ε at that δ does not exceed the given ε.
    """

    rho: Rho | None = None
    epsilon: Epsilon | None = Field(
        default=None, description="Instead of rho: ε at `delta`, converted to ρ (rounded down)."
    )
    delta: Delta | None = Field(default=None, description="The δ of `epsilon`.")

    @model_validator(mode="after")
    def _one_form(self) -> PrivacyAmount:
        if (self.epsilon is None) != (self.delta is None):
            raise PydanticCustomError(
                "privacy_amount", "epsilon and delta are given together (or not at all)"
            )
        if self.rho is not None and self.epsilon is not None:
            raise PydanticCustomError("privacy_amount", "give rho or epsilon with delta, not both")
        return self

    @property
    def gives_amount(self) -> bool:
        return self.rho is not None or self.epsilon is not None

    def amount_units(self, *, rounding: Rounding) -> int | None:
        """The amount in ledger units (None if neither form was given)."""
        if self.rho is not None:
            return rho_units(self.rho, rounding=rounding)
        if self.epsilon is not None and self.delta is not None:
            return rho_units_from_epsilon(self.epsilon, self.delta)
        return None

    def required_units(self, *, rounding: Rounding) -> int:
        units = self.amount_units(rounding=rounding)
        if units is None:
            raise InvalidRequest("give rho, or epsilon with delta", field="rho")
        return units


class TenantCreate(RequestBody):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"name": "census-analysts"}]}
    )
    name: Name = Field(description="Unique tenant name.")


class TenantOut(BaseModel):
    id: str
    name: str
    key_prefix: str = Field(description="First characters of the API key, to recognise it.")
    created_at: datetime

    @classmethod
    def of(cls, tenant: Tenant) -> TenantOut:
        return cls(
            id=tenant.id,
            name=tenant.name,
            key_prefix=tenant.key_prefix,
            created_at=tenant.created_at,
        )


class TenantCreated(TenantOut):
    api_key: str = Field(description="The tenant's bearer key. Shown only in this response.")


class GrantCreate(PrivacyAmount):
    """The tenant's limit on this dataset: `rho` (rounded down to the ledger's unit of
    1e-12), or `epsilon` and `delta` converted to ρ."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"tenant_id": "6f1c2b3a-0d4e-4f5a-9b8c-7d6e5f4a3b2c", "rho": 0.5},
                {
                    "tenant_id": "6f1c2b3a-0d4e-4f5a-9b8c-7d6e5f4a3b2c",
                    "epsilon": 1.0,
                    "delta": 1e-6,
                },
            ]
        },
    )
    tenant_id: ResourceId


class GrantOut(BaseModel):
    id: str
    tenant_id: str
    dataset_id: str
    rho_limit: float
    rho_limit_exact: str
    created_at: datetime

    @classmethod
    def of(cls, grant: Grant) -> GrantOut:
        return cls(
            id=grant.id,
            tenant_id=grant.tenant_id,
            dataset_id=grant.dataset_id,
            rho_limit=units_to_rho(grant.rho_limit_units),
            rho_limit_exact=units_to_decimal_str(grant.rho_limit_units),
            created_at=grant.created_at,
        )


class DatasetOut(BaseModel):
    id: str
    name: str
    attributes: list[dict[str, Any]] = Field(description="The public schema, in column order.")
    rows: int | None = Field(
        default=None, description="Exact row count: shown to the admin (curator) only."
    )
    rho_total: float | None = Field(
        default=None, description="Curator's cap on all grants together (admin view only)."
    )
    created_at: datetime

    @classmethod
    def of(cls, dataset: Dataset, *, for_admin: bool) -> DatasetOut:
        return cls(
            id=dataset.id,
            name=dataset.name,
            attributes=list(dataset.schema_json.get("attributes", [])),
            rows=dataset.rows if for_admin else None,
            rho_total=(
                units_to_rho(dataset.rho_total_units)
                if for_admin and dataset.rho_total_units is not None
                else None
            ),
            created_at=dataset.created_at,
        )


class BudgetOut(BaseModel):
    dataset_id: str
    tenant_id: str
    rho_limit: float
    rho_spent: float
    rho_remaining: float
    epsilon: float = Field(description="(ε, δ)-DP of the ρ spent so far, tight CKS conversion.")
    epsilon_limit: float = Field(description="ε of the whole limit, at the same δ.")
    delta: float
    rho_limit_exact: str
    rho_spent_exact: str
    rho_remaining_exact: str


class LedgerEntryOut(BaseModel):
    id: int
    tenant_id: str
    kind: Literal["charge", "refund"]
    rho: float = Field(description="Positive for a charge, negative for a refund.")
    rho_exact: str
    job_id: str | None
    description: str
    created_at: datetime

    @classmethod
    def of(cls, entry: LedgerEntry) -> LedgerEntryOut:
        return cls(
            id=entry.id,
            tenant_id=entry.tenant_id,
            kind=entry.kind,  # type: ignore[arg-type]
            rho=units_to_rho(entry.rho_units),
            rho_exact=units_to_decimal_str(entry.rho_units),
            job_id=entry.job_id,
            description=entry.description,
            created_at=entry.created_at,
        )


class HealthOut(BaseModel):
    """Liveness: the process answers (it says nothing about the database)."""

    status: Literal["ok"]


class ReadyOut(BaseModel):
    """Readiness: the database answers and its schema is the one this process needs."""

    status: Literal["ready"]
    database: Literal["ok"]
    schema_revision: str


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")
    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorDetail


# OpenAPI documentation of a route's other responses, as FastAPI's `responses=` takes it.
Responses = dict[int | str, dict[str, Any]]

NO_SUCH_DATASET = "No such dataset (or no grant on it)."


def error_responses(descriptions: dict[int, str]) -> Responses:
    """The error responses of a route: each status with its `ErrorOut` body and why."""
    return {status: {"model": ErrorOut, "description": why} for status, why in descriptions.items()}
