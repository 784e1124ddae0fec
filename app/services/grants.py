"""Grants: a tenant's ρ limit on a dataset, capped together by the dataset's rho_total."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db import Dataset, Grant, LedgerEntry, Tenant
from app.errors import AlreadyExists, InvalidRequest, NotFound, RhoTotalExceeded
from app.services.pages import Page, page
from app.services.rho import units_to_decimal_str, units_to_rho


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
    `rho_total_exceeded` if the dataset's grants would then sum past its rho_total.
    """
    if rho_units <= 0:
        raise InvalidRequest("rho must be positive")
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
    if dataset.rho_total_units is not None:
        already_granted = granted_units(session, dataset_id)
        if already_granted + rho_units > dataset.rho_total_units:
            available = dataset.rho_total_units - already_granted
            raise RhoTotalExceeded(
                "the dataset's grants may total at most "
                f"rho={units_to_decimal_str(dataset.rho_total_units)}; "
                f"rho={units_to_decimal_str(already_granted)} is already granted, so at most "
                f"rho={units_to_decimal_str(max(available, 0))} can be added",
                rho_total=units_to_rho(dataset.rho_total_units),
                rho_available=units_to_rho(max(available, 0)),
            )
    grant = Grant(tenant_id=tenant_id, dataset_id=dataset_id, rho_limit_units=rho_units)
    session.add(grant)
    session.flush()
    return grant


def spent_by_grant(session: Session, grant_ids: Iterable[str]) -> dict[str, int]:
    """Net ρ units charged on each grant (charges less refunds); 0 for grants with none."""
    ids = list(grant_ids)
    if not ids:
        return {}
    rows = session.execute(
        select(LedgerEntry.grant_id, func.sum(LedgerEntry.rho_units))
        .where(LedgerEntry.grant_id.in_(ids))
        .group_by(LedgerEntry.grant_id)
    ).all()
    spent = {grant_id: 0 for grant_id in ids}
    spent.update({grant_id: int(total or 0) for grant_id, total in rows})
    return spent


def list_grants(
    session: Session, *, dataset_id: str, limit: int, cursor: str | None = None
) -> Page[Grant]:
    """One page of the dataset's grants, oldest first."""
    return page(
        session,
        select(Grant).where(Grant.dataset_id == dataset_id),
        keys=(Grant.created_at, Grant.id),
        kinds=(datetime, str),
        limit=limit,
        cursor=cursor,
        key_of=lambda grant: (grant.created_at, grant.id),
    )
