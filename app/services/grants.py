"""Grants: a tenant's ρ limit on a dataset, capped together by the dataset's rho_total."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db import Dataset, Grant, Tenant
from app.errors import AlreadyExists, InvalidRequest, NotFound, RhoTotalExceeded
from app.limits import MAX_RHO, format_limit
from app.services.rho import MAX_RHO_UNITS, units_to_decimal_str, units_to_rho


def granted_units(session: Session, dataset_id: str) -> int:
    """Σ of the limits of every grant on the dataset."""
    total = session.scalar(
        select(func.coalesce(func.sum(Grant.rho_limit_units), 0)).where(
            Grant.dataset_id == dataset_id
        )
    )
    return int(total or 0)


def create_grant(session: Session, *, dataset_id: str, tenant_id: str, rho_units: int) -> Grant:
    """Give the tenant a budget of `rho_units` on the dataset; never commits.

    409 `already_exists` if the tenant already holds a grant on it; 409
    `rho_total_exceeded` if the dataset's grants would then sum past its rho_total,
    or past `MAX_RHO` in all (which keeps every sum of the dataset's ledger within a
    64-bit integer).
    """
    if rho_units <= 0:
        raise InvalidRequest("rho must be positive")
    if rho_units > MAX_RHO_UNITS:
        raise InvalidRequest(f"rho must be at most {format_limit(MAX_RHO)}")
    # Lock the dataset row so concurrent grants cannot both fit under rho_total.
    dataset = session.scalars(
        select(Dataset).where(Dataset.id == dataset_id).with_for_update()
    ).one_or_none()
    if dataset is None:
        raise NotFound("dataset not found")
    if session.get(Tenant, tenant_id) is None:
        raise NotFound("tenant not found")
    existing = session.scalars(
        select(Grant.id).where(Grant.tenant_id == tenant_id, Grant.dataset_id == dataset_id)
    ).first()
    if existing is not None:
        raise AlreadyExists("this tenant already holds a grant on this dataset")
    already_granted = granted_units(session, dataset_id)
    cap = MAX_RHO_UNITS if dataset.rho_total_units is None else dataset.rho_total_units
    if already_granted + rho_units > cap:
        available = cap - already_granted
        raise RhoTotalExceeded(
            "the dataset's grants may total at most "
            f"rho={units_to_decimal_str(cap)}; "
            f"rho={units_to_decimal_str(already_granted)} is already granted, so at most "
            f"rho={units_to_decimal_str(max(available, 0))} can be added",
            rho_total=units_to_rho(cap),
            rho_available=units_to_rho(max(available, 0)),
        )
    grant = Grant(tenant_id=tenant_id, dataset_id=dataset_id, rho_limit_units=rho_units)
    session.add(grant)
    session.flush()
    return grant


def list_grants(session: Session, *, dataset_id: str) -> Sequence[Grant]:
    return session.scalars(
        select(Grant).where(Grant.dataset_id == dataset_id).order_by(Grant.created_at, Grant.id)
    ).all()
