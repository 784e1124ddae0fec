"""Tenants: create (with a first API key), list, read, disable and enable; the admin key.

Tenants' keys are in `app.services.keys`. A disabled tenant keeps its keys, grants
and ledger; every key of it is refused (401 `tenant_disabled`) until it is enabled
again.

The admin key is `PRIVQ_ADMIN_KEY` when set; otherwise one is generated on first
start, its hash stored in `service_secrets`, and the key shown once.
"""

from __future__ import annotations

import hmac
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db import ApiKey, ServiceSecret, Tenant, utcnow
from app.errors import AlreadyExists, InvalidRequest, NotFound
from app.limits import control_character, describe_character
from app.services import keys
from app.services.keys import generate_key, hash_key
from app.services.pages import Page, page

ADMIN_KEY_PREFIX = "pqadmin_"
ADMIN_KEY_SECRET_NAME = "admin_key"
MAX_TENANT_NAME_LENGTH = 200

__all__ = ["hash_key"]  # the admin key is hashed the same way as tenants' keys


def keys_match(key: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_key(key), stored_hash)


def create_tenant(session: Session, *, name: str) -> tuple[Tenant, ApiKey, str]:
    """A new tenant, its first key's row and the key (returned only here; only its hash
    is stored)."""
    name = name.strip()
    if not name or len(name) > MAX_TENANT_NAME_LENGTH:
        raise InvalidRequest(f"tenant name must be 1 to {MAX_TENANT_NAME_LENGTH} characters")
    found = control_character(name)
    if found is not None:
        raise InvalidRequest(
            f"tenant name must not contain control characters (found {describe_character(found)})"
        )
    if session.scalars(select(Tenant.id).where(Tenant.name == name)).first() is not None:
        raise AlreadyExists(f"a tenant named {name!r} already exists")
    tenant = Tenant(name=name)
    session.add(tenant)
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError:
        # Another request created the same name between our check and insert.
        raise AlreadyExists(f"a tenant named {name!r} already exists") from None
    key_row, api_key = keys.issue(session, tenant)
    return tenant, key_row, api_key


def list_tenants(session: Session, *, limit: int, cursor: str | None = None) -> Page[Tenant]:
    """One page of tenants, oldest first."""
    return page(
        session,
        select(Tenant),
        keys=(Tenant.created_at, Tenant.id),
        kinds=(datetime, str),
        limit=limit,
        cursor=cursor,
        key_of=lambda tenant: (tenant.created_at, tenant.id),
    )


def get_tenant(session: Session, tenant_id: str) -> Tenant:
    tenant = session.get(Tenant, tenant_id)
    if tenant is None:
        raise NotFound("tenant not found")
    return tenant


def set_disabled(session: Session, tenant_id: str, *, disabled: bool) -> Tenant:
    """Disable (every key refused from the next request on) or enable a tenant; idempotent."""
    tenant = session.scalars(
        select(Tenant).where(Tenant.id == tenant_id).with_for_update()
    ).one_or_none()
    if tenant is None:
        raise NotFound("tenant not found")
    if disabled and tenant.disabled_at is None:
        tenant.disabled_at = utcnow()
    elif not disabled:
        tenant.disabled_at = None
    session.flush()
    return tenant


def stored_admin_key_hash(session: Session) -> str | None:
    secret = session.get(ServiceSecret, ADMIN_KEY_SECRET_NAME)
    return None if secret is None else secret.value_hash


def ensure_generated_admin_key(session: Session) -> str | None:
    """Generate and store an admin key if none is stored; returns it (once) or None."""
    if stored_admin_key_hash(session) is not None:
        return None
    admin_key = generate_key(ADMIN_KEY_PREFIX)
    session.add(ServiceSecret(name=ADMIN_KEY_SECRET_NAME, value_hash=hash_key(admin_key)))
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError:
        return None  # another process generated it first; it printed the key
    return admin_key
