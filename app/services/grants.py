"""Grants: a tenant's ρ limit on a dataset, capped together by the dataset's rho_total.

A grant may be raised, lowered (never below what it has spent) and revoked. A revoked
grant keeps its row — the ledger's lines point at it — and the tenant loses the
dataset: from then on it is a 404 to that tenant, exactly like one that never existed.
What a revoked grant spent stays spent, so against `rho_total` it counts with its
spending, not its limit: the dataset's total privacy loss stays within the cap.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db import Dataset, Grant, LedgerEntry, Tenant, utcnow
from app.errors import (
    AlreadyExists,
    BelowSpent,
    GrantRevoked,
    InvalidRequest,
    NotFound,
    RhoTotalExceeded,
)
from app.limits import MAX_RHO, format_limit
from app.services import jobs
from app.services.pages import Page, page
from app.services.rho import MAX_RHO_UNITS, units_to_decimal_str, units_to_rho


def granted_units(session: Session, dataset_id: str) -> int:
    """What the dataset's grants may spend in all: the limits of the grants in force, plus
    what revoked grants spent (their unspent rest is free again)."""
    active = session.scalar(
        select(func.coalesce(func.sum(Grant.rho_limit_units), 0)).where(
            Grant.dataset_id == dataset_id, Grant.revoked_at.is_(None)
        )
    )
    revoked_spent = session.scalar(
        select(func.coalesce(func.sum(LedgerEntry.rho_units), 0))
        .join(Grant, Grant.id == LedgerEntry.grant_id)
        .where(Grant.dataset_id == dataset_id, Grant.revoked_at.is_not(None))
    )
    return int(active or 0) + int(revoked_spent or 0)


def _locked_dataset(session: Session, dataset_id: str) -> Dataset:
    """The dataset row, locked (grants on it change one at a time); NotFound if deleted.

    FOR NO KEY UPDATE: rows that point at the dataset (a charge's ledger line, a job) can
    still be written, so a charge that holds its grant's row while a grant change waits
    for it goes on and commits instead of deadlocking with it."""
    dataset = session.scalars(
        select(Dataset)
        .where(Dataset.id == dataset_id, Dataset.deleted_at.is_(None))
        .with_for_update(key_share=True)
    ).one_or_none()
    if dataset is None:
        raise NotFound("dataset not found")
    return dataset


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
    dataset = _locked_dataset(session, dataset_id)
    if session.get(Tenant, tenant_id) is None:
        raise NotFound("tenant not found")
    existing = session.scalars(
        select(Grant.id).where(
            Grant.tenant_id == tenant_id,
            Grant.dataset_id == dataset_id,
            Grant.revoked_at.is_(None),
        )
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


def grants_of_tenant(session: Session, tenant_id: str) -> Sequence[Grant]:
    """Every grant the tenant holds or held, on datasets not deleted, oldest first."""
    return session.scalars(
        select(Grant)
        .join(Dataset, Dataset.id == Grant.dataset_id)
        .where(Grant.tenant_id == tenant_id, Dataset.deleted_at.is_(None))
        .order_by(Grant.created_at, Grant.id)
    ).all()


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
    if rho_units > MAX_RHO_UNITS:
        raise InvalidRequest(f"rho must be at most {format_limit(MAX_RHO)}")
    dataset = _locked_dataset(session, dataset_id)
    grant = get_grant(session, dataset_id=dataset_id, grant_id=grant_id, for_update=True)
    if grant.revoked_at is not None:
        raise GrantRevoked()
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


def revoke(session: Session, *, dataset_id: str, grant_id: str) -> Grant:
    """Revoke a grant (again: no change); never commits.

    The tenant loses the dataset at once. Its jobs on the dataset that have not
    finished are cancelled as `POST /v1/jobs/{id}/cancel` would: a queued one is
    refunded whole, a running one stops at its next safe point. The ledger keeps
    every line.
    """
    # The tenant's unfinished jobs are locked first: a running job's gate and stores lock
    # its row, then the dataset's, and the same order here keeps the two from deadlocking.
    tenant_id = session.scalar(
        select(Grant.tenant_id).where(Grant.id == grant_id, Grant.dataset_id == dataset_id)
    )
    if tenant_id is not None:
        jobs.unfinished(session, dataset_id=dataset_id, tenant_id=tenant_id)
    _locked_dataset(session, dataset_id)
    grant = get_grant(session, dataset_id=dataset_id, grant_id=grant_id, for_update=True)
    if grant.revoked_at is not None:
        return grant
    grant.revoked_at = utcnow()
    session.flush()
    for job in jobs.unfinished(session, dataset_id=dataset_id, tenant_id=grant.tenant_id):
        jobs.cancel(session, job, reason="its grant was revoked")
    return grant
