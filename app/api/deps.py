"""API dependencies as `Annotated` aliases: settings, the database, and who is calling.

- `DatabaseDep` — the process's `Database`. An endpoint opens its own unit of work in
  its body — `with database.unit_of_work() as session:` (commits once when the block
  ends, rolls back if it raised) or `with database.read_only() as session:` (on SQLite
  DEFERRED: reads never queue behind writes) — and builds its response inside it, so
  the transaction ends and its connection returns to the pool *before* FastAPI
  serialises the response. (A yield dependency would hold the connection through
  serialisation, which for a sync endpoint waits for a thread-pool token: with more
  requests in flight than tokens, every token waits for a connection that waits for a
  token — the stall issue 10 measured.) Slow work (decoding many releases, converting
  ρ to ε) happens after the block. `run_read` runs a short read on the event loop when
  the database is a local SQLite file, in a thread otherwise; writes go through
  `app.api.concurrency.write_endpoint`.
- `PrincipalDep` — the caller: the admin, or a tenant (401 without a valid key).
- `CurrentTenant` — a tenant only (the admin key gets 403: it holds no budget).
- `AdminAuth` — the admin only (a tenant key gets 403).
- `DatasetAccessDep` — for the free answer routes: the caller and the latest model
  version of the path's dataset they may see, read in one statement
  (`app.services.access`) with `PrincipalDep`'s refusals, then 404 as for a dataset
  that does not exist.

A tenant's key is checked against the database on every request, in one precompiled
statement (`app.services.keys.match_on`) that reads the key, its tenant and both their
states. Nothing about a tenant key is remembered between requests: keys are revoked
and tenants disabled at run time, possibly through another API process or the CLI,
and either must take effect on the very next request everywhere. The statement runs
outside the request's (on SQLite: write-locking) transaction — on the event loop for
a local SQLite file (a read there costs tens of microseconds and never waits for a
writer in WAL mode), in a worker thread for PostgreSQL (a network round trip). A
key's `last_used_at` is written after the response, at most once a minute.

The cheap dependencies are `async def`, so they run on the event loop instead of
hopping to the thread pool.
"""

from __future__ import annotations

import hmac
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Annotated, Any, TypeVar

from fastapi import BackgroundTasks, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, make_transient_to_detached, sessionmaker
from starlette.concurrency import run_in_threadpool

from app.api.types import ResourceId
from app.config import Settings
from app.db import SQLITE_BEGIN_OPTION, Database, Tenant, make_engine, utcnow
from app.errors import Forbidden, KeyRevoked, TenantDisabled, Unauthorized
from app.services import access, keys
from app.services import models as model_service
from app.services import tenants as tenant_service

T = TypeVar("T")

bearer_scheme = HTTPBearer(auto_error=False, description="The admin key or a tenant's API key.")


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


def loop_read_sessions(engine: Engine) -> sessionmaker[Session]:
    """Sessions on the loop engine whose transactions begin DEFERRED (never the lock)."""
    return sessionmaker(
        bind=engine.execution_options(**{SQLITE_BEGIN_OPTION: "DEFERRED"}),
        expire_on_commit=False,
    )


def read_in_thread(database: Database, read: Callable[[Session], T]) -> T:
    with database.read_only() as session:
        return read(session)


async def run_read(request: Request, database: Database, read: Callable[[Session], T]) -> T:
    """Run a short, bounded read — `read(session)`, which also builds the response — where
    it costs least: on the event loop when the database is a local SQLite file (a WAL
    read never waits for a writer and takes well under a millisecond, less than the two
    thread switches a worker thread costs), else in a worker thread. Reads that can grow
    large (ledgers, release listings) stay in threads.
    """
    return await (await get_reads(request, database)).run(read)


SettingsDep = Annotated[Settings, Depends(get_settings)]
DatabaseDep = Annotated[Database, Depends(get_database)]


@dataclass(frozen=True)
class Reads:
    """Where a request's short reads run: the loop's sessions (local SQLite), or threads."""

    database: Database
    loop_sessions: sessionmaker[Session] | None

    async def run(self, read: Callable[[Session], T]) -> T:
        if self.loop_sessions is None:
            return await run_in_threadpool(read_in_thread, self.database, read)
        with self.loop_sessions() as session:
            return read(session)


async def get_reads(request: Request, database: DatabaseDep) -> Reads:
    return Reads(database, getattr(request.app.state, "loop_read_sessions", None))


ReadsDep = Annotated[Reads, Depends(get_reads)]


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


# How long an API process trusts the stored admin key's hash it read (a rotation takes
# effect everywhere within this many seconds).
ADMIN_KEY_RECHECK_SECONDS = 5.0


def _stored_admin_key_hash(database: Database) -> str | None:
    with database.read_only() as session:
        return tenant_service.stored_admin_key_hash(session)


async def _admin_key_hash(request: Request, settings: Settings, database: Database) -> str | None:
    """The admin key's hash: from the settings, or the generated one stored at start-up."""
    state = request.app.state
    known: str | None = getattr(state, "admin_key_hash", None)
    if known is not None and time.monotonic() < getattr(state, "admin_key_hash_until", 0.0):
        return known
    if settings.admin_key is not None:
        # Fixed while the process runs: remembered for good.
        known = tenant_service.hash_key(settings.admin_key.get_secret_value())
        until = math.inf
    else:
        # A generated key is stored, and `privq admin rotate-key` replaces it: looked up
        # again every few seconds, so a rotation reaches every API process that soon.
        known = await run_in_threadpool(_stored_admin_key_hash, database)
        until = time.monotonic() + ADMIN_KEY_RECHECK_SECONDS
    if known is not None:
        state.admin_key_hash = known
        state.admin_key_hash_until = until
    return known


def _touch_key(database: Database, key_id: str, now: datetime) -> None:
    with database.unit_of_work() as session:
        keys.touch(session, key_id, now)


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]


async def _presented(
    request: Request, settings: Settings, database: Database, credentials: Credentials
) -> tuple[str, bool]:
    """The presented key's hash, and whether it is the admin key (401 without a key)."""
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise Unauthorized()
    key_hash = tenant_service.hash_key(credentials.credentials)
    admin_hash = await _admin_key_hash(request, settings, database)
    return key_hash, admin_hash is not None and hmac.compare_digest(key_hash, admin_hash)


async def _hot_read(request: Request, database: Database, read: Callable[..., T], *args: Any) -> T:
    """`read(engine, *args)`, one precompiled statement: on the event loop for a local
    SQLite file, in a worker thread on the hot-read pool otherwise."""
    engine = loop_read_engine(request)
    if engine is not None:
        return read(engine, *args)
    return await run_in_threadpool(read, database.hot_read_engine, *args)


async def get_principal(
    request: Request,
    settings: SettingsDep,
    database: DatabaseDep,
    credentials: Credentials,
    background_tasks: BackgroundTasks,
) -> Principal:
    key_hash, is_admin = await _presented(request, settings, database, credentials)
    if is_admin:
        return Principal(tenant=None)
    return _tenant_principal(
        await _hot_read(request, database, keys.match_on, key_hash), database, background_tasks
    )


def _tenant_principal(
    match: keys.KeyMatch | None, database: Database, background_tasks: BackgroundTasks
) -> Principal:
    """The tenant a key read just now belongs to: 401 for no such key or a revoked one,
    403 for a disabled tenant."""
    if match is None:
        raise Unauthorized("the API key is not valid")
    if match.revoked:
        raise KeyRevoked()
    if match.tenant_disabled:
        raise TenantDisabled()
    now = utcnow()
    if match.last_use_is_stale(now):
        background_tasks.add_task(_touch_key, database, match.key_id, now)
    # A new detached instance per request, so no two requests share one.
    tenant = Tenant(id=match.tenant_id, name=match.tenant_name, created_at=match.tenant_created_at)
    make_transient_to_detached(tenant)
    return Principal(tenant=tenant)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


@dataclass(frozen=True)
class DatasetAccess:
    """The caller, and the latest model version of the path's dataset they may see (None
    before the first fit): for the free answer routes, read in one statement."""

    principal: Principal
    dataset_id: str
    version: int | None


async def get_dataset_access(
    request: Request,
    settings: SettingsDep,
    database: DatabaseDep,
    credentials: Credentials,
    background_tasks: BackgroundTasks,
    dataset_id: ResourceId,
) -> DatasetAccess:
    """`get_principal`, then the dataset's visibility and latest version (404 if the
    caller may not see it), with the same errors in the same order, in one round trip."""
    key_hash, is_admin = await _presented(request, settings, database, credentials)
    if is_admin:
        version = await _hot_read(
            request,
            database,
            partial(model_service.visible_latest_version_on, tenant_id=None),
            dataset_id,
        )
        return DatasetAccess(Principal(tenant=None), dataset_id, version)
    found = await _hot_read(request, database, access.key_and_version_on, key_hash, dataset_id)
    principal = _tenant_principal(found.match, database, background_tasks)
    return DatasetAccess(principal, dataset_id, found.version())


DatasetAccessDep = Annotated[DatasetAccess, Depends(get_dataset_access)]


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
