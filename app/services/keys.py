"""Tenants' API keys: issue, list, revoke, and match a presented key for authentication.

Keys are `secrets.token_urlsafe(32)` (256 random bits) with a short readable prefix.
Only their SHA-256 is stored: a key with that much entropy cannot be guessed from its
hash, so a slow password hash would add latency and no safety.

A tenant may hold several keys at once, which is what makes rotation free of
downtime: add a key, switch the clients over, revoke the old one. A revoked key keeps
its row (prefix, created, last used, revoked) for the audit.

Authentication (`match_on`) reads the key, its tenant and both their states in one
precompiled statement on every request — never from a per-process cache — so a key
revoked or a tenant disabled through any API process or the CLI is refused on the
very next request everywhere. `last_used_at` is written at most once a minute per key
(`LAST_USED_RESOLUTION`), so a busy key does not turn every read into a write.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Engine, Select, bindparam, or_, select, update
from sqlalchemy.orm import Session

from app.db import ApiKey, Tenant, utcnow
from app.errors import NotFound
from app.services.precompiled import PrecompiledSelect

TENANT_KEY_PREFIX = "pq_"
DISPLAYED_PREFIX_LENGTH = 10
LAST_USED_RESOLUTION = timedelta(seconds=60)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def generate_key(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def issue(session: Session, tenant: Tenant) -> tuple[ApiKey, str]:
    """A new key for `tenant`: its row and the key itself (returned only here)."""
    api_key = generate_key(TENANT_KEY_PREFIX)
    row = ApiKey(
        tenant_id=tenant.id,
        key_hash=hash_key(api_key),
        key_prefix=api_key[:DISPLAYED_PREFIX_LENGTH],
    )
    session.add(row)
    session.flush()
    return row, api_key


def keys_of(session: Session, tenant_id: str) -> Sequence[ApiKey]:
    """Every key of the tenant, revoked ones too, oldest first."""
    return session.scalars(
        select(ApiKey).where(ApiKey.tenant_id == tenant_id).order_by(ApiKey.created_at, ApiKey.id)
    ).all()


def revoke(session: Session, *, tenant_id: str, key_id: str) -> ApiKey:
    """Revoke one of the tenant's keys (again: no change); NotFound if it has no such key."""
    row = session.scalars(
        select(ApiKey).where(ApiKey.id == key_id, ApiKey.tenant_id == tenant_id).with_for_update()
    ).one_or_none()
    if row is None:
        raise NotFound("no such key for this tenant")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()
    return row


@dataclass(frozen=True)
class KeyMatch:
    """A presented key's row and its tenant, as they are in the database now."""

    key_id: str
    revoked: bool
    last_used_at: datetime | None
    tenant_id: str
    tenant_name: str
    tenant_created_at: datetime
    tenant_disabled: bool

    def last_use_is_stale(self, now: datetime) -> bool:
        return self.last_used_at is None or now - self.last_used_at >= LAST_USED_RESOLUTION


MATCH_STATEMENT = cast(
    "Select[Any]",
    select(
        ApiKey.id,
        ApiKey.revoked_at,
        ApiKey.last_used_at,
        Tenant.id,
        Tenant.name,
        Tenant.created_at,
        Tenant.disabled_at,
    )
    .join(Tenant, Tenant.id == ApiKey.tenant_id)
    .where(ApiKey.key_hash == bindparam("key_hash")),
)
_MATCH = PrecompiledSelect(MATCH_STATEMENT)


def _utc(value: Any) -> datetime | None:
    """A timestamp from the driver's own cursor: aware on PostgreSQL, text on SQLite."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise TypeError(f"a timestamp column returned {type(value).__name__}")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def match_on(engine: Engine, key_hash: str) -> KeyMatch | None:
    """The key with this hash and its tenant, read now in one statement; None if no such key."""
    row = _MATCH.first(engine, {"key_hash": key_hash})
    return None if row is None else key_match(row)


def key_match(row: tuple[Any, ...]) -> KeyMatch:
    """A `KeyMatch` from a row of MATCH_STATEMENT (and any columns added after them)."""
    key_id, revoked_at, last_used_at, tenant_id, name, created_at, disabled_at = row[:7]
    created = _utc(created_at)
    if created is None:  # the column is NOT NULL
        raise TypeError("a tenant without a creation time")
    return KeyMatch(
        key_id=str(key_id),
        revoked=revoked_at is not None,
        last_used_at=_utc(last_used_at),
        tenant_id=str(tenant_id),
        tenant_name=str(name),
        tenant_created_at=created,
        tenant_disabled=disabled_at is not None,
    )


def touch(session: Session, key_id: str, now: datetime) -> None:
    """Record that the key was used now, unless that was already recorded within a minute."""
    session.execute(
        update(ApiKey)
        .where(
            ApiKey.id == key_id,
            or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at < now - LAST_USED_RESOLUTION),
        )
        .values(last_used_at=now)
    )
