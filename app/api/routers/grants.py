"""Grants (admin only): give a tenant a ρ limit on a dataset; list a dataset's grants."""

from __future__ import annotations

from fastapi import APIRouter, status

from app.api.deps import AdminAuth, ReadSessionDep, SessionDep
from app.api.schemas import GrantCreate, GrantOut, error_responses
from app.api.types import ResourceId
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
def create_grant(
    dataset_id: ResourceId, body: GrantCreate, session: SessionDep, _admin: AdminAuth
) -> GrantOut:
    """Grant a tenant a ρ budget on this dataset (grants together stay within rho_total).

    Give `rho` with any number of digits (the limit is rounded down to the ledger's unit
    of 1e-12; `rho_limit_exact` shows it), or `epsilon` and `delta`."""
    grant = grant_service.create_grant(
        session,
        dataset_id=dataset_id,
        tenant_id=body.tenant_id,
        rho_units=body.required_units(rounding="down"),
    )
    return GrantOut.of(grant)


@router.get("", response_model=list[GrantOut])
def list_grants(
    dataset_id: ResourceId, session: ReadSessionDep, _admin: AdminAuth
) -> list[GrantOut]:
    """Every grant on this dataset."""
    dataset_service.get_dataset(session, dataset_id)
    return [
        GrantOut.of(grant) for grant in grant_service.list_grants(session, dataset_id=dataset_id)
    ]
