"""The ρ ledger: append-only charges and refunds against grants, checked atomically.

spent = Σ entries of a grant (exact integer SUM of pico-ρ units, refunds negative);
remaining = limit − spent. `charge` reads, checks and appends under a lock on the
grant — `SELECT … FOR UPDATE` on PostgreSQL; on SQLite the session's transaction
began IMMEDIATE and so already holds the database's write lock — and never commits:
the caller's unit of work commits it together with whatever else the request wrote
(e.g. the job the charge pays for), or rolls both back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db import SQLITE_BEGIN_OPTION, Grant, LedgerEntry
from app.errors import IdempotencyConflict, InsufficientBudget, InvalidRequest, NotFound
from app.metrics import record_pending_ledger_entry
from app.services.pages import Page, page
from app.services.rho import units_to_decimal_str, units_to_rho

MAX_IDEMPOTENCY_KEY_LENGTH = 200


@dataclass(frozen=True)
class ChargeResult:
    """A charge written (or found again by its idempotency key)."""

    entry_id: int
    grant_id: str
    rho_units: int
    rho_remaining_units: int
    job_id: str | None
    replayed: bool  # True: the idempotency key matched an earlier charge; nothing new written

    @property
    def rho(self) -> float:
        return units_to_rho(self.rho_units)


@dataclass(frozen=True)
class Budget:
    """A grant's limit and what has been spent of it, in units."""

    grant_id: str
    tenant_id: str
    dataset_id: str
    limit_units: int
    spent_units: int

    @property
    def remaining_units(self) -> int:
        return self.limit_units - self.spent_units


def _require_write_transaction(session: Session) -> None:
    bind = session.get_bind()
    if bind.get_execution_options().get(SQLITE_BEGIN_OPTION) == "DEFERRED":
        # A deferred SQLite transaction does not hold the write lock while it checks.
        raise RuntimeError("ledger writes need a read-write session, not Database.read_only()")


def get_grant(
    session: Session, *, tenant_id: str, dataset_id: str, for_update: bool = False
) -> Grant:
    """The tenant's grant on the dataset; NotFound (as for a missing dataset) if none."""
    query = select(Grant).where(
        Grant.tenant_id == tenant_id, Grant.dataset_id == dataset_id, Grant.revoked_at.is_(None)
    )
    if for_update:
        query = query.with_for_update()
    grant = session.scalars(query).one_or_none()
    if grant is None:
        raise NotFound("dataset not found")
    return grant


def grant_spent_units(session: Session, grant_id: str) -> int:
    total = session.scalar(
        select(func.coalesce(func.sum(LedgerEntry.rho_units), 0)).where(
            LedgerEntry.grant_id == grant_id
        )
    )
    return int(total or 0)


def dataset_spent_units(session: Session, dataset_id: str) -> int:
    """Net ρ charged on a dataset over all grants: its total privacy loss so far."""
    total = session.scalar(
        select(func.coalesce(func.sum(LedgerEntry.rho_units), 0)).where(
            LedgerEntry.dataset_id == dataset_id
        )
    )
    return int(total or 0)


def budget(session: Session, *, tenant_id: str, dataset_id: str) -> Budget:
    grant = get_grant(session, tenant_id=tenant_id, dataset_id=dataset_id)
    return Budget(
        grant_id=grant.id,
        tenant_id=tenant_id,
        dataset_id=dataset_id,
        limit_units=grant.rho_limit_units,
        spent_units=grant_spent_units(session, grant.id),
    )


def charge(
    session: Session,
    *,
    tenant_id: str,
    dataset_id: str,
    rho_units: int,
    idempotency_key: str | None = None,
    request_hash: str | None = None,
    job_id: str | None = None,
    description: str = "",
) -> ChargeResult:
    """Append a charge of `rho_units` to the tenant's grant, or refuse it; never commits.

    - No grant: NotFound. `rho_units` ≤ 0: InvalidRequest.
    - Same `idempotency_key` on this grant: the first charge is returned
      (`replayed=True`) and nothing is written; if both charges carry a
      `request_hash` and they differ: IdempotencyConflict (409).
    - More than remains: InsufficientBudget (409, `rho_remaining`), nothing written.
    """
    if not isinstance(rho_units, int) or isinstance(rho_units, bool) or rho_units <= 0:
        raise InvalidRequest("rho must be positive")
    if idempotency_key is not None and not 0 < len(idempotency_key) <= MAX_IDEMPOTENCY_KEY_LENGTH:
        raise InvalidRequest(
            f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters"
        )
    _require_write_transaction(session)
    grant = get_grant(session, tenant_id=tenant_id, dataset_id=dataset_id, for_update=True)

    if idempotency_key is not None:
        earlier = session.scalars(
            select(LedgerEntry).where(
                LedgerEntry.grant_id == grant.id,
                LedgerEntry.idempotency_key == idempotency_key,
            )
        ).one_or_none()
        if earlier is not None:
            if (
                request_hash is not None
                and earlier.request_hash is not None
                and request_hash != earlier.request_hash
            ):
                raise IdempotencyConflict()
            return ChargeResult(
                entry_id=earlier.id,
                grant_id=grant.id,
                rho_units=earlier.rho_units,
                rho_remaining_units=grant.rho_limit_units - grant_spent_units(session, grant.id),
                job_id=earlier.job_id,
                replayed=True,
            )

    remaining_units = grant.rho_limit_units - grant_spent_units(session, grant.id)
    if rho_units > remaining_units:
        raise InsufficientBudget(
            f"this charge needs rho={units_to_decimal_str(rho_units)} but only "
            f"rho={units_to_decimal_str(max(remaining_units, 0))} remains; nothing was charged",
            rho_remaining=units_to_rho(max(remaining_units, 0)),
            rho_requested=units_to_rho(rho_units),
        )

    entry = LedgerEntry(
        number=_next_number(session, grant.id),
        grant_id=grant.id,
        tenant_id=tenant_id,
        dataset_id=dataset_id,
        rho_units=rho_units,
        kind="charge",
        job_id=job_id,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        description=description,
    )
    session.add(entry)
    session.flush()
    record_pending_ledger_entry(session, "charge", units_to_rho(rho_units), dataset_id)
    return ChargeResult(
        entry_id=entry.id,
        grant_id=grant.id,
        rho_units=rho_units,
        rho_remaining_units=remaining_units - rho_units,
        job_id=job_id,
        replayed=False,
    )


def _next_number(session: Session, grant_id: str) -> int:
    """The grant's next line number (the line's API id); the caller holds the grant's row
    lock, which serialises every line of the grant."""
    number = session.scalar(
        select(func.coalesce(func.max(LedgerEntry.number), 0)).where(
            LedgerEntry.grant_id == grant_id
        )
    )
    return int(number or 0) + 1


def refund(
    session: Session, *, job_id: str, rho_units: int | None = None, description: str = "refund"
) -> int:
    """Give back what was charged for `job_id` (all of it, or `rho_units` of it); never commits.

    Returns the units refunded: 0 if nothing charged for the job remains to refund,
    so calling it twice is harmless. Only for ρ that was never spent on a release —
    a job that failed before drawing noise.
    """
    _require_write_transaction(session)
    first_charge = session.scalars(
        select(LedgerEntry)
        .where(LedgerEntry.job_id == job_id, LedgerEntry.kind == "charge")
        .order_by(LedgerEntry.id)
        .limit(1)
    ).one_or_none()
    if first_charge is None:
        return 0
    # Serialise with charges and other refunds on the same grant.
    session.scalars(select(Grant).where(Grant.id == first_charge.grant_id).with_for_update()).one()
    net_units = int(
        session.scalar(
            select(func.coalesce(func.sum(LedgerEntry.rho_units), 0)).where(
                LedgerEntry.job_id == job_id
            )
        )
        or 0
    )
    amount = net_units if rho_units is None else min(rho_units, net_units)
    if amount <= 0:
        return 0
    session.add(
        LedgerEntry(
            number=_next_number(session, first_charge.grant_id),
            grant_id=first_charge.grant_id,
            tenant_id=first_charge.tenant_id,
            dataset_id=first_charge.dataset_id,
            rho_units=-amount,
            kind="refund",
            job_id=job_id,
            description=description,
        )
    )
    session.flush()
    record_pending_ledger_entry(session, "refund", -units_to_rho(amount), first_charge.dataset_id)
    return amount


def entries(
    session: Session,
    *,
    dataset_id: str | None = None,
    tenant_id: str | None = None,
    limit: int,
    cursor: str | None = None,
) -> Page[LedgerEntry]:
    """One page of entries, oldest first: all, or of a dataset, or of a tenant, or both.

    Ordered by time, then grant and number: what the lines show, so that a tenant's
    cursor, like its line ids, carries nothing of other tenants' or datasets' lines."""
    query = select(LedgerEntry)
    if dataset_id is not None:
        query = query.where(LedgerEntry.dataset_id == dataset_id)
    if tenant_id is not None:
        query = query.where(LedgerEntry.tenant_id == tenant_id)
    return page(
        session,
        query,
        keys=(LedgerEntry.created_at, LedgerEntry.grant_id, LedgerEntry.number),
        kinds=(datetime, str, int),
        limit=limit,
        cursor=cursor,
        key_of=lambda entry: (entry.created_at, entry.grant_id, entry.number),
    )
