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
open the request's (on SQLite: write-locking) transaction. A key that matched a tenant
is remembered per process for `TENANT_KEY_TTL_SECONDS` (`TenantKeyCache`): no endpoint
rotates or revokes keys, so within that time a repeat call needs no database round
trip. A key changed or a tenant removed directly in the database is therefore still
accepted by a running API process for at most that long. Keys that match nothing are
never remembered: every wrong key is looked up (and refused) again.

The cheap dependencies are `async def`, so they run on the event loop instead of
hopping to the thread pool; authenticating does too when the key is cached or is the
admin's, and only a cache miss goes to the thread pool for its database lookup.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from cachetools import TTLCache
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, make_transient_to_detached
from starlette.concurrency import run_in_threadpool

from app.config import Settings
from app.db import Database, Tenant, make_engine
from app.errors import Forbidden, Unauthorized
from app.services import tenants as tenant_service

bearer_scheme = HTTPBearer(auto_error=False, description="The admin key or a tenant's API key.")

# How long a process trusts a key it has matched to a tenant without asking again.
TENANT_KEY_TTL_SECONDS = 5.0
TENANT_KEY_CACHE_ENTRIES = 1024


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


async def get_database(request: Request) -> Database:
    return request.app.state.database  # type: ignore[no-any-return]


# A read on the event loop must not wait long; in WAL mode SQLite readers do not wait
# for writers at all, so this only bounds rare recovery or checkpoint moments.
LOOP_READ_BUSY_TIMEOUT_SECONDS = 1.0


def make_loop_read_engine(database: Database) -> Engine | None:
    """A separate engine for the few reads done on the event loop itself (local SQLite only).

    Only the event loop's thread uses it, one statement at a time, so its one pooled
    connection is always free: a checkout never waits behind request threads holding
    the main pool's connections. None for PostgreSQL (a network round trip belongs in
    a worker thread) and for in-memory SQLite (another connection is another database).
    """
    if not database.is_sqlite:
        return None
    url = make_url(database.url)
    if not url.database or url.database == ":memory:" or url.query.get("mode") == "memory":
        return None
    return make_engine(
        database.url,
        sqlite_busy_timeout_seconds=LOOP_READ_BUSY_TIMEOUT_SECONDS,
        pool_size=1,
        max_overflow=4,  # only if another event loop shares the app (tests)
    )


def loop_read_engine(request: Request) -> Engine | None:
    """The app's engine for reads on the event loop, if it has one."""
    return getattr(request.app.state, "loop_read_engine", None)


SettingsDep = Annotated[Settings, Depends(get_settings)]
DatabaseDep = Annotated[Database, Depends(get_database)]


def get_session(database: DatabaseDep) -> Iterator[Session]:
    with database.unit_of_work() as session:
        yield session


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

    @property
    def tenant_id(self) -> str | None:
        """The tenant's id, or None for the admin (what services take as `tenant_id`)."""
        return None if self.tenant is None else self.tenant.id


@dataclass(frozen=True)
class TenantSnapshot:
    """The columns of a tenant row, as read when its key was last looked up."""

    id: str
    name: str
    api_key_hash: str
    key_prefix: str
    created_at: datetime

    @classmethod
    def of(cls, tenant: Tenant) -> TenantSnapshot:
        return cls(
            tenant.id, tenant.name, tenant.api_key_hash, tenant.key_prefix, tenant.created_at
        )

    def to_tenant(self) -> Tenant:
        """A new detached `Tenant` per request, so no two requests share one instance."""
        tenant = Tenant(
            id=self.id,
            name=self.name,
            api_key_hash=self.api_key_hash,
            key_prefix=self.key_prefix,
            created_at=self.created_at,
        )
        make_transient_to_detached(tenant)
        return tenant


class TenantKeyCache:
    """Key hash → tenant snapshot for `ttl_seconds`: a bounded LRU (`cachetools.TTLCache`)
    behind a lock, as the event loop and request threads share it.

    Only successful lookups are stored (see the module docstring for why a short
    TTL is safe); an entry's time runs from when it was stored, not from its last use.
    `clock` is injectable for tests.
    """

    def __init__(
        self,
        *,
        ttl_seconds: float = TENANT_KEY_TTL_SECONDS,
        max_entries: int = TENANT_KEY_CACHE_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self._entries: TTLCache[str, TenantSnapshot] = TTLCache(
            maxsize=max_entries, ttl=ttl_seconds, timer=clock
        )
        self._lock = threading.Lock()

    def get(self, key_hash: str) -> TenantSnapshot | None:
        with self._lock:
            try:
                return self._entries[key_hash]
            except KeyError:  # never stored, evicted or expired
                return None

    def put(self, key_hash: str, snapshot: TenantSnapshot) -> None:
        with self._lock:
            self._entries[key_hash] = snapshot

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        """Entries still valid now."""
        with self._lock:
            self._entries.expire()
            return len(self._entries)


def tenant_key_cache(request: Request) -> TenantKeyCache:
    """The app's cache (one per app, so apps on different databases never share one)."""
    state = request.app.state
    cache: TenantKeyCache | None = getattr(state, "tenant_key_cache", None)
    if cache is None:
        cache = state.tenant_key_cache = TenantKeyCache()
    return cache


def _stored_admin_key_hash(database: Database) -> str | None:
    with database.read_only() as session:
        return tenant_service.stored_admin_key_hash(session)


async def _admin_key_hash(request: Request, settings: Settings, database: Database) -> str | None:
    """The admin key's hash: from the settings, or the generated one stored at start-up."""
    state = request.app.state
    known: str | None = getattr(state, "admin_key_hash", None)
    if known is not None:
        return known
    if settings.admin_key is not None:
        known = tenant_service.hash_key(settings.admin_key.get_secret_value())
    else:
        known = await run_in_threadpool(_stored_admin_key_hash, database)
    # It never changes while the process runs (settings are fixed; a generated key is
    # stored once), so it can be remembered once found.
    if known is not None:
        state.admin_key_hash = known
    return known


def _lookup_tenant(database: Database, key: str) -> TenantSnapshot | None:
    with database.read_only() as session:
        tenant = tenant_service.tenant_for_key(session, key)
        return None if tenant is None else TenantSnapshot.of(tenant)


async def get_principal(
    request: Request,
    settings: SettingsDep,
    database: DatabaseDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise Unauthorized()
    key = credentials.credentials
    key_hash = tenant_service.hash_key(key)
    admin_hash = await _admin_key_hash(request, settings, database)
    if admin_hash is not None and hmac.compare_digest(key_hash, admin_hash):
        return Principal(tenant=None)
    cache = tenant_key_cache(request)
    snapshot = cache.get(key_hash)
    if snapshot is None:
        snapshot = await run_in_threadpool(_lookup_tenant, database, key)
        if snapshot is None:
            raise Unauthorized("the API key is not valid")
        cache.put(key_hash, snapshot)
    return Principal(tenant=snapshot.to_tenant())


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def require_tenant(principal: PrincipalDep) -> Tenant:
    if principal.tenant is None:
        raise Forbidden("this operation needs a tenant's API key; the admin key holds no budget")
    return principal.tenant


async def require_admin(principal: PrincipalDep) -> Principal:
    if not principal.is_admin:
        raise Forbidden("this operation needs the admin key")
    return principal


CurrentTenant = Annotated[Tenant, Depends(require_tenant)]
AdminAuth = Annotated[Principal, Depends(require_admin)]
