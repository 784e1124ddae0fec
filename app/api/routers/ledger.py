"""The whole ledger (admin): every charge and refund, across datasets and tenants.

The ledger only ever appends: a refund is a line of its own, nothing is edited or
deleted — not when a job is cancelled, a grant revoked or a dataset deleted.
"""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.orm import Session

from app.api.deps import AdminAuth
from app.api.pagination import DatasetFilter, PageDep, TenantFilter, paged_list
from app.api.schemas import LedgerEntryOut
from app.services import ledger

router = APIRouter(prefix="/v1/ledger", tags=["budget"])


@paged_list(router, LedgerEntryOut, summary="Every charge and refund, oldest first (admin)")
def read_ledger(
    session: Session,
    _admin: AdminAuth,
    page: PageDep,
    dataset_id: DatasetFilter = None,
    tenant_id: TenantFilter = None,
) -> list[LedgerEntryOut]:
    """Charges (positive ρ) and refunds (negative ρ, lines of their own), oldest first,
    filtered by dataset and tenant; lines of deleted datasets and revoked grants stay."""
    found = ledger.entries(
        session,
        dataset_id=dataset_id,
        tenant_id=tenant_id,
        limit=page.limit,
        cursor=page.cursor,
    )
    page.link_next(found.next_cursor)
    return [LedgerEntryOut.of(entry) for entry in found.items]
