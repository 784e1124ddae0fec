"""API schemas: the JSON bodies the HTTP API accepts and returns (pydantic v2).

Request bodies forbid unknown fields (422) and carry an OpenAPI example each. These
are not the tables: `app.db` models are converted here explicitly.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from app.api.types import MAX_DELTA_NOTE, Delta, Epsilon, Name, ResourceId, Rho
from app.db import ApiKey, Dataset, Grant, LedgerEntry, Tenant
from app.errors import InvalidRequest
from app.services import unit_accounting
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
    delta: Delta | None = Field(default=None, description=f"The δ of `epsilon`. {MAX_DELTA_NOTE}")

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

    def amount_units(self, *, rounding: Rounding, max_delta: float) -> int | None:
        """The amount in ledger units (None if neither form was given); a `delta` above
        `max_delta` (the service's `Settings.max_delta`) is a 422 naming the field."""
        if self.rho is not None:
            return rho_units(self.rho, rounding=rounding)
        if self.epsilon is not None and self.delta is not None:
            return rho_units_from_epsilon(self.epsilon, self.delta, max_delta=max_delta)
        return None

    def required_units(self, *, rounding: Rounding, max_delta: float) -> int:
        units = self.amount_units(rounding=rounding, max_delta=max_delta)
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
    created_at: datetime
    disabled: bool = Field(description="True: every key of the tenant gets 401 tenant_disabled.")
    disabled_at: datetime | None = None

    @classmethod
    def of(cls, tenant: Tenant) -> TenantOut:
        return cls(
            id=tenant.id,
            name=tenant.name,
            created_at=tenant.created_at,
            disabled=tenant.disabled_at is not None,
            disabled_at=tenant.disabled_at,
        )


class ApiKeyOut(BaseModel):
    """One of a tenant's keys, as the curator sees it: never the key itself."""

    id: str
    key_prefix: str = Field(description="First characters of the key, to recognise it.")
    created_at: datetime
    last_used_at: datetime | None = Field(
        description="When the key last authenticated (to the minute); null if never."
    )
    revoked_at: datetime | None = None
    active: bool

    @classmethod
    def of(cls, key: ApiKey) -> ApiKeyOut:
        return cls(
            id=key.id,
            key_prefix=key.key_prefix,
            created_at=key.created_at,
            last_used_at=key.last_used_at,
            revoked_at=key.revoked_at,
            active=key.revoked_at is None,
        )


class ApiKeyCreated(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "0b7a4f0e-6c1d-4e8a-9a55-2f9e1c3d4b5a",
                    "key_prefix": "pq_3kQ9xZ",
                    "api_key": "pq_3kQ9xZ…",
                    "created_at": "2026-11-23T12:00:00Z",
                }
            ]
        }
    )
    id: str
    key_prefix: str
    api_key: str = Field(description="The new bearer key. Shown only in this response.")
    created_at: datetime


class TenantCreated(TenantOut):
    api_key: str = Field(description="The tenant's bearer key. Shown only in this response.")
    key_id: str = Field(description="The key's id, to revoke it later.")
    key_prefix: str = Field(description="First characters of the API key, to recognise it.")


class TenantUpdate(RequestBody):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"disabled": True}]})
    disabled: bool = Field(description="True: refuse every key of the tenant; false: accept again.")


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


class GrantUpdate(PrivacyAmount):
    """The grant's new limit: `rho` (rounded down to the ledger's unit of 1e-12), or
    `epsilon` and `delta` converted to ρ. Not below what the grant has spent, and within
    the dataset's rho_total together with the other grants."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"rho": 1.5}, {"epsilon": 2.0, "delta": 1e-6}]},
    )


class GrantOut(BaseModel):
    id: str
    tenant_id: str
    dataset_id: str
    rho_limit: float
    rho_limit_exact: str
    rho_spent: float = Field(description="Net ρ charged on the grant (charges less refunds).")
    rho_spent_exact: str
    rho_remaining: float
    rho_remaining_exact: str
    created_at: datetime
    revoked_at: datetime | None = Field(
        default=None, description="Set: the tenant lost the dataset; the ledger keeps its lines."
    )

    @classmethod
    def of(cls, grant: Grant, *, spent_units: int = 0) -> GrantOut:
        remaining = grant.rho_limit_units - spent_units
        return cls(
            id=grant.id,
            tenant_id=grant.tenant_id,
            dataset_id=grant.dataset_id,
            rho_limit=units_to_rho(grant.rho_limit_units),
            rho_limit_exact=units_to_decimal_str(grant.rho_limit_units),
            rho_spent=units_to_rho(spent_units),
            rho_spent_exact=units_to_decimal_str(spent_units),
            rho_remaining=units_to_rho(remaining),
            rho_remaining_exact=units_to_decimal_str(remaining),
            created_at=grant.created_at,
            revoked_at=grant.revoked_at,
        )


class PrivacyUnitOut(BaseModel):
    """A dataset's privacy unit: what its guarantee and every budget on it protect."""

    column: str | None = Field(
        description="The column whose value names a unit (its values are never stored)."
    )
    max_rows: int = Field(
        description="k: at most this many rows of a unit were kept at upload. Every marginal "
        "has sensitivity k: Gaussian σ costs k²/(2σ²), Laplace scale b costs (k/b)²/2."
    )

    @classmethod
    def of(cls, described: dict[str, Any] | None) -> PrivacyUnitOut | None:
        """From `unit_accounting.described`: None when a unit is one row."""
        return None if described is None else cls(**described)


class PrivateBinsOut(BaseModel):
    """What the schema's draft spent on private bin edges, charged to the dataset."""

    rho: float = Field(
        description="ρ (zCDP) the draft spent on the curator's table, written at upload as "
        "the curator's ledger line and counted in rho_total."
    )
    attributes: list[str] = Field(
        description="The attributes whose edges a private quantile mechanism released."
    )

    @classmethod
    def of(cls, schema_json: dict[str, Any]) -> PrivateBinsOut | None:
        recorded = schema_json.get("private_bins")
        return None if not isinstance(recorded, dict) else cls(**recorded)


class SourceOut(BaseModel):
    """Where a dataset registered by reference lives (the admin's view only)."""

    format: str = Field(description='The files\' format: "parquet".')
    uri: str = Field(description="The source's location, normalised: file:///… or s3://….")


class DatasetOut(BaseModel):
    id: str
    name: str
    status: Literal["ready", "registering", "rejected"] = Field(
        default="ready",
        description="An uploaded dataset is ready at once; one registered by reference is "
        "registering until its job has scanned the source, then ready or rejected. Only a "
        "ready dataset can be measured (409 dataset_not_ready otherwise).",
    )
    source: SourceOut | None = Field(
        default=None,
        description="A dataset registered by reference: its format and location (admin view "
        "only; forgotten when its records are purged or it is deleted).",
    )
    error: str | None = Field(
        default=None,
        description="Why the registration was rejected (admin view only: it may quote "
        "values of the source).",
    )
    attributes: list[dict[str, Any]] = Field(description="The public schema, in column order.")
    rows: int | None = Field(
        default=None, description="Exact row count: shown to the admin (curator) only."
    )
    rho_total: float | None = Field(
        default=None, description="Curator's cap on all grants together (admin view only)."
    )
    estimator: str = Field(
        default="mle",
        description='How the model is fitted from the measurements: "mle", "cgm-em" or "stein".',
    )
    privacy_unit: PrivacyUnitOut | None = Field(
        default=None,
        description="Whose privacy budgets on this dataset protect: all rows of one unit "
        "(at most `max_rows`). null: a unit is one row (k = 1).",
    )
    private_bins: PrivateBinsOut | None = Field(
        default=None,
        description="Set: the schema's bin edges were drafted privately, at this cost.",
    )
    created_at: datetime
    records_purged_at: datetime | None = Field(
        default=None,
        description="Set: the raw records were destroyed; answers still come from the model, "
        "measuring is refused (409 records_purged).",
    )
    refit_job_id: str | None = Field(
        default=None,
        description="PATCH only: the job refitting the model with the new estimator (none "
        "if the estimator did not change or nothing is measured yet). It spends no budget.",
    )

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
            estimator=dataset.estimator or "mle",
            privacy_unit=PrivacyUnitOut.of(unit_accounting.described(dataset)),
            private_bins=PrivateBinsOut.of(dataset.schema_json),
            created_at=dataset.created_at,
            records_purged_at=dataset.records_purged_at,
            status=dataset.status or "ready",  # type: ignore[arg-type]
            source=(
                SourceOut(format=dataset.source_format or "parquet", uri=dataset.source_uri)
                if for_admin and dataset.source_uri is not None
                else None
            ),
            error=dataset.source_error if for_admin else None,
        )


class DatasetPatch(RequestBody):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"estimator": "cgm-em"}]}
    )
    estimator: Literal["mle", "cgm-em", "stein"] = Field(
        description='"mle": Private-PGM\'s maximum likelihood (L2 for Gaussian, L1 for Laplace '
        'noise); "cgm-em": the true marginals latent, EM (Bernstein et al., 2017); "stein": '
        "mle after each attribute's one-way measurements are pooled and shrunk toward the "
        "uniform marginal (James–Stein), for tables with few rows for their budget. Changing "
        "it refits the model from the same measurements, as a job that spends nothing."
    )


class TenantDetail(TenantOut):
    keys: list[ApiKeyOut] = Field(description="Every key, revoked ones too, oldest first.")
    grants: list[GrantOut] = Field(description="Every grant, revoked ones too, oldest first.")


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
    privacy_unit: PrivacyUnitOut | None = Field(
        default=None,
        description="What ρ and ε protect: one unit of the dataset (null: one row).",
    )


class LedgerEntryOut(BaseModel):
    id: int = Field(
        description="The line's number on its grant (1, 2, …; with `grant_id` it names the "
        "line): nothing of other tenants' or datasets' activity shows in it."
    )
    tenant_id: str
    dataset_id: str
    grant_id: str
    kind: Literal["charge", "refund"]
    rho: float = Field(description="Positive for a charge, negative for a refund.")
    rho_exact: str
    job_id: str | None
    description: str
    created_at: datetime

    @classmethod
    def of(cls, entry: LedgerEntry) -> LedgerEntryOut:
        return cls(
            id=entry.number,
            tenant_id=entry.tenant_id,
            dataset_id=entry.dataset_id,
            grant_id=entry.grant_id,
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
