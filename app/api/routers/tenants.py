"""Tenants (admin only): create one (its API key is shown once) and list them."""

from __future__ import annotations

from fastapi import APIRouter, status

from app.api.deps import AdminAuth, ReadSessionDep, SessionDep
from app.api.schemas import TenantCreate, TenantCreated, TenantOut, error_responses
from app.services import tenants as tenant_service

router = APIRouter(prefix="/v1/tenants", tags=["tenants (admin)"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TenantCreated,
    responses=error_responses({409: "A tenant with this name exists."}),
)
def create_tenant(body: TenantCreate, session: SessionDep, _admin: AdminAuth) -> TenantCreated:
    """Create a tenant. The response holds its API key; it is never shown again."""
    tenant, api_key = tenant_service.create_tenant(session, name=body.name)
    return TenantCreated(**TenantOut.of(tenant).model_dump(), api_key=api_key)


@router.get("", response_model=list[TenantOut])
def list_tenants(session: ReadSessionDep, _admin: AdminAuth) -> list[TenantOut]:
    """Every tenant, oldest first (keys are not shown)."""
    return [TenantOut.of(tenant) for tenant in tenant_service.list_tenants(session)]
