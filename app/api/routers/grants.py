"""Grants (admin only): give a tenant a ρ limit on a dataset; list a dataset's grants."""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from sqlalchemy.orm import Session

from app.api.concurrency import read_endpoint, write_endpoint
from app.api.deps import AdminAuth, SettingsDep
from app.api.openapi import refusals
from app.api.pagination import PAGED, PageDep
from app.api.schemas import GrantCreate, GrantOut, GrantUpdate, error_responses
from app.api.types import ResourceId
from app.errors import BelowSpent, GrantRevoked, NotFound, RhoTotalExceeded
from app.services import datasets as dataset_service
from app.services import grants as grant_service

router = APIRouter(prefix="/v1/datasets/{dataset_id}/grants", tags=["grants (admin)"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=GrantOut,
    responses=error_responses(
        {
            404: "No such dataset or tenant.",
            409: "Grant exists, or rho_total would be exceeded.",
        }
    ),
)
@write_endpoint
def create_grant(
    dataset_id: ResourceId,
    body: GrantCreate,
    session: Session,
    _admin: AdminAuth,
    settings: SettingsDep,
) -> GrantOut:
    """Grant a tenant a ρ budget on this dataset (grants together stay within rho_total).

    Give `rho` with any number of digits (the limit is rounded down to the ledger's unit
    of 1e-12; `rho_limit_exact` shows it), or `epsilon` and `delta`."""
    grant = grant_service.create_grant(
        session,
        dataset_id=dataset_id,
        tenant_id=body.tenant_id,
        rho_units=body.required_units(rounding="down", max_delta=settings.max_delta),
    )
    return GrantOut.of(grant)


@router.get(
    "",
    response_model=list[GrantOut],
    responses={
        **PAGED,
        **refusals(NotFound, not_found="No such dataset."),
    },
)
@read_endpoint(on_loop=False)
def list_grants(
    dataset_id: ResourceId,
    session: Session,
    _admin: AdminAuth,
    page: PageDep,
) -> list[GrantOut]:
    """Every grant on this dataset with its limit, spent and remaining ρ, oldest first."""
    dataset_service.get_dataset(session, dataset_id)
    found = grant_service.list_grants(
        session, dataset_id=dataset_id, limit=page.limit, cursor=page.cursor
    )
    spent = grant_service.spent_by_grant(session, (grant.id for grant in found.items))
    page.link_next(found.next_cursor)
    return [GrantOut.of(grant, spent_units=spent[grant.id]) for grant in found.items]


@router.patch(
    "/{grant_id}",
    response_model=GrantOut,
    summary="Raise or lower a grant's ρ limit (admin)",
    responses=refusals(
        NotFound,
        BelowSpent,
        RhoTotalExceeded,
        GrantRevoked,
        not_found="No such dataset, or no such grant on it.",
    ),
)
@write_endpoint
def update_grant(
    dataset_id: ResourceId,
    grant_id: ResourceId,
    body: GrantUpdate,
    session: Session,
    _admin: AdminAuth,
    settings: SettingsDep,
) -> GrantOut:
    """Top up or lower a tenant's limit. Never below what the grant has spent (409
    `rho_below_spent`), never past the dataset's rho_total (409 `rho_total_exceeded`)."""
    grant = grant_service.set_limit(
        session,
        dataset_id=dataset_id,
        grant_id=grant_id,
        rho_units=body.required_units(rounding="down", max_delta=settings.max_delta),
    )
    spent = grant_service.spent_by_grant(session, [grant.id])[grant.id]
    return GrantOut.of(grant, spent_units=spent)


@router.delete(
    "/{grant_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Revoke a grant (admin): the tenant loses the dataset",
    responses=refusals(NotFound, not_found="No such dataset, or no such grant on it."),
)
@write_endpoint
def revoke_grant(
    dataset_id: ResourceId, grant_id: ResourceId, session: Session, _admin: AdminAuth
) -> Response:
    """The tenant gets 404 on the dataset from then on, as if it did not exist; its jobs
    on it that have not finished are cancelled (a queued one refunded whole). The ledger
    keeps every charge; revoking again changes nothing."""
    grant_service.revoke(session, dataset_id=dataset_id, grant_id=grant_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
