"""Grants: a tenant's ρ limit on a dataset, capped together by the dataset's rho_total."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db import Dataset, Grant, LedgerEntry, Tenant
from app.errors import AlreadyExists, BelowSpent, InvalidRequest, NotFound, RhoTotalExceeded
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


def get_grant(
    session: Session, *, dataset_id: str, grant_id: str, for_update: bool = False
) -> Grant:
    """The grant `grant_id` on `dataset_id`; NotFound if either is missing or they differ."""
    query = select(Grant).where(Grant.id == grant_id, Grant.dataset_id == dataset_id)
    if for_update:
        query = query.with_for_update()
    grant = session.scalars(query).one_or_none()
    if grant is None:
        raise NotFound("grant not found")
    return grant


def set_limit(session: Session, *, dataset_id: str, grant_id: str, rho_units: int) -> Grant:
    """Raise or lower a grant's limit; never commits.

    409 `rho_below_spent` below what the grant has spent (a release cannot be taken
    back); 409 `rho_total_exceeded` if the dataset's grants would then sum past its
    rho_total. The dataset row, then the grant row, are locked, in the same order as
    `create_grant` and `ledger.charge`, so concurrent charges and changes serialise.
    """
    if rho_units <= 0:
        raise InvalidRequest("rho must be positive")
    dataset = session.scalars(
        select(Dataset).where(Dataset.id == dataset_id).with_for_update()
    ).one_or_none()
    if dataset is None:
        raise NotFound("dataset not found")
    grant = get_grant(session, dataset_id=dataset_id, grant_id=grant_id, for_update=True)
    spent = spent_by_grant(session, [grant.id])[grant.id]
    if rho_units < spent:
        raise BelowSpent(
            f"this grant has spent rho={units_to_decimal_str(spent)}; its limit cannot go "
            f"below that (asked rho={units_to_decimal_str(rho_units)})",
            rho_spent=units_to_rho(spent),
            rho_spent_exact=units_to_decimal_str(spent),
        )
    if dataset.rho_total_units is not None and rho_units > grant.rho_limit_units:
        others = granted_units(session, dataset_id) - grant.rho_limit_units
        if others + rho_units > dataset.rho_total_units:
            available = dataset.rho_total_units - others
            raise RhoTotalExceeded(
                "the dataset's grants may total at most "
                f"rho={units_to_decimal_str(dataset.rho_total_units)}; this grant can be "
                f"raised to at most rho={units_to_decimal_str(max(available, 0))}",
                rho_total=units_to_rho(dataset.rho_total_units),
                rho_available=units_to_rho(max(available, 0)),
            )
    grant.rho_limit_units = rho_units
    session.flush()
    return grant
