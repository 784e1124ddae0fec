"""API dependencies as `Annotated` aliases: settings, the request's session, and who is calling.

- `SessionDep` — the request's unit of work: one session, committed once right after
  the endpoint returns (before the response is sent), rolled back if it raised.
  Endpoints and services never commit.
- `ReadSessionDep` — a session for endpoints that only read: never commits, and on
  SQLite does not take the write lock (DEFERRED), so reads never queue behind writes.
- `PrincipalDep` — the caller: the admin, or a tenant (401 without a valid key).
- `CurrentTenant` — a tenant only (the admin key gets 403: it holds no budget).
- `AdminAuth` — the admin only (a tenant key gets 403).

Keys are checked in a separate short read-only session, so authenticating does not
open the request's (on SQLite: write-locking) transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Database, Tenant
from app.errors import Forbidden, Unauthorized
from app.services import tenants as tenant_service

bearer_scheme = HTTPBearer(auto_error=False, description="The admin key or a tenant's API key.")


def get_settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


def get_database(request: Request) -> Database:
    return request.app.state.database  # type: ignore[no-any-return]


SettingsDep = Annotated[Settings, Depends(get_settings)]
DatabaseDep = Annotated[Database, Depends(get_database)]


def get_session(database: DatabaseDep) -> Iterator[Session]:
    with database.session() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


# scope="function": commit when the endpoint returns, so a failed commit is the
# response the client gets (not a 201 followed by a lost write).
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


def get_read_session(database: DatabaseDep) -> Iterator[Session]:
    with database.read_only() as session:
        yield session


ReadSessionDep = Annotated[Session, Depends(get_read_session, scope="function")]


@dataclass(frozen=True)
class Principal:
    """Who is calling: the admin (tenant is None) or a tenant."""

    tenant: Tenant | None

    @property
    def is_admin(self) -> bool:
        return self.tenant is None


def _is_admin_key(request: Request, key: str, settings: Settings, database: Database) -> bool:
    if settings.admin_key is not None:
        return tenant_service.keys_match(
            key, tenant_service.hash_key(settings.admin_key.get_secret_value())
        )
    stored_hash: str | None = getattr(request.app.state, "admin_key_hash", None)
    if stored_hash is None:
        with database.read_only() as session:
            stored_hash = tenant_service.stored_admin_key_hash(session)
        # It never changes once generated, so it can be remembered.
        request.app.state.admin_key_hash = stored_hash
    return stored_hash is not None and tenant_service.keys_match(key, stored_hash)


def get_principal(
    request: Request,
    settings: SettingsDep,
    database: DatabaseDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise Unauthorized()
    key = credentials.credentials
    if _is_admin_key(request, key, settings, database):
        return Principal(tenant=None)
    with database.read_only() as session:
        tenant = tenant_service.tenant_for_key(session, key)
        if tenant is not None:
            session.expunge(tenant)
    if tenant is None:
        raise Unauthorized("the API key is not valid")
    return Principal(tenant=tenant)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


def require_tenant(principal: PrincipalDep) -> Tenant:
    if principal.tenant is None:
        raise Forbidden("this operation needs a tenant's API key; the admin key holds no budget")
    return principal.tenant


def require_admin(principal: PrincipalDep) -> Principal:
    if not principal.is_admin:
        raise Forbidden("this operation needs the admin key")
    return principal


CurrentTenant = Annotated[Tenant, Depends(require_tenant)]
AdminAuth = Annotated[Principal, Depends(require_admin)]
