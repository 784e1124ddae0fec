"""The whole ledger (admin): every charge and refund, across datasets and tenants.

The ledger only ever appends: a refund is a line of its own, nothing is edited or
deleted — not when a job is cancelled, a grant revoked or a dataset deleted.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from sqlalchemy.orm import Session

from app.api.concurrency import read_endpoint
from app.api.deps import AdminAuth
from app.api.pagination import LINK_HEADER_DOC, PageDep, link_next
from app.api.schemas import LedgerEntryOut
from app.services import ledger

router = APIRouter(prefix="/v1/ledger", tags=["budget"])


@router.get(
    "",
    response_model=list[LedgerEntryOut],
    summary="Every charge and refund, oldest first (admin)",
    responses={200: {"headers": LINK_HEADER_DOC}},
)
@read_endpoint(on_loop=False)
def read_ledger(
    request: Request,
    response: Response,
    session: Session,
    _admin: AdminAuth,
    page_request: PageDep,
    dataset_id: Annotated[
        str | None, Query(max_length=36, description="Only this dataset's lines.")
    ] = None,
    tenant_id: Annotated[
        str | None, Query(max_length=36, description="Only this tenant's lines.")
    ] = None,
) -> list[LedgerEntryOut]:
    """Charges (positive ρ) and refunds (negative ρ, lines of their own), oldest first,
    filtered by dataset and tenant; lines of deleted datasets and revoked grants stay."""
    found = ledger.entries(
        session,
        dataset_id=dataset_id,
        tenant_id=tenant_id,
        limit=page_request.limit,
        cursor=page_request.cursor,
    )
    link_next(request, response, found.next_cursor)
    return [LedgerEntryOut.of(entry) for entry in found.items]
