"""Tenants and API keys: creation, lookup by key, and the admin key.

Keys are `secrets.token_urlsafe(32)` (256 random bits) with a short readable
prefix. Only their SHA-256 is stored: a key with that much entropy cannot be
guessed from its hash, so a slow password hash would add latency and no safety.
Comparisons use `hmac.compare_digest`.

The admin key is `PRIVQ_ADMIN_KEY` when set; otherwise one is generated on first
start, its hash stored in `service_secrets`, and the key shown once.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db import ServiceSecret, Tenant
from app.errors import AlreadyExists, InvalidRequest, NotFound
from app.limits import control_character, describe_character

TENANT_KEY_PREFIX = "pq_"
ADMIN_KEY_PREFIX = "pqadmin_"
ADMIN_KEY_SECRET_NAME = "admin_key"
DISPLAYED_PREFIX_LENGTH = 10
MAX_TENANT_NAME_LENGTH = 200


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def keys_match(key: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_key(key), stored_hash)


def generate_key(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def create_tenant(session: Session, *, name: str) -> tuple[Tenant, str]:
    """A new tenant and its API key (returned only here; only its hash is stored)."""
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
    api_key = generate_key(TENANT_KEY_PREFIX)
    tenant = Tenant(
        name=name, api_key_hash=hash_key(api_key), key_prefix=api_key[:DISPLAYED_PREFIX_LENGTH]
    )
    session.add(tenant)
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError:
        # Another request created the same name between our check and insert.
        raise AlreadyExists(f"a tenant named {name!r} already exists") from None
    return tenant, api_key


def list_tenants(session: Session) -> Sequence[Tenant]:
    return session.scalars(select(Tenant).order_by(Tenant.created_at, Tenant.name)).all()


def get_tenant(session: Session, tenant_id: str) -> Tenant:
    tenant = session.get(Tenant, tenant_id)
    if tenant is None:
        raise NotFound("tenant not found")
    return tenant


def tenant_for_key(session: Session, api_key: str) -> Tenant | None:
    """The tenant holding this key, or None."""
    tenant = session.scalars(
        select(Tenant).where(Tenant.api_key_hash == hash_key(api_key))
    ).one_or_none()
    if tenant is None or not keys_match(api_key, tenant.api_key_hash):
        return None
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
