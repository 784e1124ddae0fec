"""Tenants (admin only): create, list, read, disable and enable; add and revoke their keys.

Rotating a key without downtime: `POST /v1/tenants/{id}/keys` (a second key, shown
once), switch the clients to it, then `DELETE /v1/tenants/{id}/keys/{old_key_id}`; the
old key is refused from its next request on, in every API process.
"""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from sqlalchemy.orm import Session

from app.api.concurrency import read_endpoint, write_endpoint
from app.api.deps import AdminAuth
from app.api.openapi import refusals
from app.api.pagination import PageDep, paged_list
from app.api.schemas import (
    ApiKeyCreated,
    ApiKeyOut,
    GrantOut,
    TenantCreate,
    TenantCreated,
    TenantDetail,
    TenantOut,
    TenantUpdate,
)
from app.api.types import ResourceId
from app.errors import AlreadyExists, NotFound
from app.services import grants as grant_service
from app.services import keys as key_service
from app.services import tenants as tenant_service

router = APIRouter(prefix="/v1/tenants", tags=["tenants (admin)"])

NO_SUCH_TENANT = refusals(NotFound, not_found="No such tenant.")


def tenant_detail(session: Session, tenant_id: str) -> TenantDetail:
    """The tenant, its keys (never the keys themselves) and its grants with their budgets."""
    tenant = tenant_service.get_tenant(session, tenant_id)
    grants = grant_service.grants_of_tenant(session, tenant_id)
    spent = grant_service.spent_by_grant(session, (grant.id for grant in grants))
    return TenantDetail(
        **TenantOut.of(tenant).model_dump(),
        keys=[ApiKeyOut.of(key) for key in key_service.keys_of(session, tenant_id)],
        grants=[GrantOut.of(grant, spent_units=spent[grant.id]) for grant in grants],
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TenantCreated,
    summary="Create a tenant and its first API key (shown once)",
    responses=refusals(AlreadyExists, already_exists="A tenant with this name exists."),
)
@write_endpoint
def create_tenant(body: TenantCreate, session: Session, _admin: AdminAuth) -> TenantCreated:
    """Create a tenant. The response holds its API key; it is never shown again."""
    tenant, key, api_key = tenant_service.create_tenant(session, name=body.name)
    return TenantCreated(
        **TenantOut.of(tenant).model_dump(),
        api_key=api_key,
        key_id=key.id,
        key_prefix=key.key_prefix,
    )


@paged_list(router, TenantOut, summary="List tenants, oldest first")
def list_tenants(
    session: Session,
    _admin: AdminAuth,
    page: PageDep,
) -> list[TenantOut]:
    """Every tenant, oldest first, a page at a time (keys are not shown)."""
    found = tenant_service.list_tenants(session, limit=page.limit, cursor=page.cursor)
    page.link_next(found.next_cursor)
    return [TenantOut.of(tenant) for tenant in found.items]


@router.get(
    "/{tenant_id}",
    response_model=TenantDetail,
    summary="A tenant with its keys and grants",
    responses=NO_SUCH_TENANT,
)
@read_endpoint
def read_tenant(tenant_id: ResourceId, session: Session, _admin: AdminAuth) -> TenantDetail:
    """The tenant, each of its keys (prefix, created, last used, revoked — never the key)
    and each of its grants with limit, spent and remaining ρ."""
    return tenant_detail(session, tenant_id)


@router.patch(
    "/{tenant_id}",
    response_model=TenantDetail,
    summary="Disable or enable a tenant",
    responses=NO_SUCH_TENANT,
)
@write_endpoint
def update_tenant(
    tenant_id: ResourceId, body: TenantUpdate, session: Session, _admin: AdminAuth
) -> TenantDetail:
    """`{"disabled": true}`: every key of the tenant gets 401 `tenant_disabled` from the next
    request on, in every API process; `false` lets the same keys in again. Grants, jobs
    and the ledger are untouched."""
    tenant_service.set_disabled(session, tenant_id, disabled=body.disabled)
    return tenant_detail(session, tenant_id)


@router.post(
    "/{tenant_id}/keys",
    status_code=status.HTTP_201_CREATED,
    response_model=ApiKeyCreated,
    summary="Add an API key to a tenant (rotation: add, switch, revoke the old)",
    responses=NO_SUCH_TENANT,
)
@write_endpoint
def add_key(tenant_id: ResourceId, session: Session, _admin: AdminAuth) -> ApiKeyCreated:
    """One more key for the tenant, shown only in this response; its other keys keep
    working until they are revoked."""
    tenant = tenant_service.get_tenant(session, tenant_id)
    key, api_key = key_service.issue(session, tenant)
    return ApiKeyCreated(
        id=key.id, key_prefix=key.key_prefix, api_key=api_key, created_at=key.created_at
    )


@router.delete(
    "/{tenant_id}/keys/{key_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Revoke one of a tenant's API keys",
    responses=refusals(NotFound, not_found="No such tenant, or no such key of it."),
)
@write_endpoint
def revoke_key(
    tenant_id: ResourceId, key_id: ResourceId, session: Session, _admin: AdminAuth
) -> Response:
    """The key gets 401 `key_revoked` from its next request on, in every API process.
    Revoking it again changes nothing; the key's row stays for the audit."""
    tenant_service.get_tenant(session, tenant_id)
    key_service.revoke(session, tenant_id=tenant_id, key_id=key_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
