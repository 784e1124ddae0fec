"""The per-process tenant key cache: hits skip the database, entries expire, misses never stick."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from conftest import bearer
from sqlalchemy import event, update

from app.api.deps import TENANT_KEY_TTL_SECONDS, TenantKeyCache, TenantSnapshot
from app.db import Database, Tenant
from app.services.tenants import hash_key


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(client) -> Iterator[FakeClock]:
    """Give the app a fresh key cache on a clock the test moves; restore it afterwards."""
    fake = FakeClock()
    original = client.app.state.tenant_key_cache
    client.app.state.tenant_key_cache = TenantKeyCache(clock=fake)
    try:
        yield fake
    finally:
        client.app.state.tenant_key_cache = original


@contextmanager
def tenant_lookups(database: Database) -> Iterator[list[str]]:
    """Collect every SQL statement that reads the tenants table while the block runs."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "FROM tenants" in statement:
            seen.append(statement)

    event.listen(database.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(database.engine, "before_cursor_execute", record)


def _change_key_hash_in_database(database: Database, tenant_id: str) -> None:
    """What a rotation done directly in the database would look like."""
    with database.unit_of_work() as session:
        session.execute(update(Tenant).where(Tenant.id == tenant_id).values(api_key_hash="0" * 64))


def test_a_cached_key_needs_no_database_lookup_within_the_ttl(client, api, database, clock) -> None:
    tenant, dataset = api.tenant_with_grant(1.0)
    path = f"/v1/datasets/{dataset['id']}"
    with tenant_lookups(database) as lookups:
        assert client.get(path, headers=tenant["headers"]).status_code == 200
        assert len(lookups) == 1  # the first call looks the key up
        clock.now += TENANT_KEY_TTL_SECONDS / 2
        for _ in range(3):
            assert client.get(path, headers=tenant["headers"]).status_code == 200
        assert len(lookups) == 1  # later calls within the TTL do not


def test_a_cached_key_expires_after_the_ttl(client, api, database, clock) -> None:
    tenant, dataset = api.tenant_with_grant(1.0)
    path = f"/v1/datasets/{dataset['id']}"
    assert client.get(path, headers=tenant["headers"]).status_code == 200
    _change_key_hash_in_database(database, tenant["id"])
    # Still trusted from the cache until the TTL is over …
    clock.now += TENANT_KEY_TTL_SECONDS - 0.01
    assert client.get(path, headers=tenant["headers"]).status_code == 200
    # … then looked up again, and refused.
    clock.now += 0.02
    response = client.get(path, headers=tenant["headers"])
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


def test_a_wrong_key_is_401_every_time_and_never_cached(client, api, database, clock) -> None:
    _tenant, dataset = api.tenant_with_grant(1.0)
    wrong = bearer("pq_" + "w" * 43)
    cache: TenantKeyCache = client.app.state.tenant_key_cache
    with tenant_lookups(database) as lookups:
        for _ in range(2):
            response = client.get(f"/v1/datasets/{dataset['id']}", headers=wrong)
            assert response.status_code == 401
        assert len(lookups) == 2  # each attempt is checked against the database
    assert len(cache) == 0


def test_the_cached_tenant_still_sees_only_granted_datasets(client, api, clock) -> None:
    tenant, _dataset = api.tenant_with_grant(1.0)
    other = api.upload_dataset()
    assert client.get("/v1/datasets", headers=tenant["headers"]).status_code == 200
    # Served from the cache now, and still 404 on a dataset without a grant.
    assert client.get(f"/v1/datasets/{other['id']}", headers=tenant["headers"]).status_code == 404


def test_the_cache_is_bounded_and_evicts_the_least_recently_used() -> None:
    fake = FakeClock()
    cache = TenantKeyCache(max_entries=2, clock=fake)

    def snapshot(name: str) -> TenantSnapshot:
        return TenantSnapshot(
            id=name, name=name, api_key_hash=hash_key(name), key_prefix=name, created_at=None
        )  # type: ignore[arg-type]

    cache.put("a", snapshot("a"))
    cache.put("b", snapshot("b"))
    assert cache.get("a") is not None  # "a" is now the most recently used
    cache.put("c", snapshot("c"))
    assert len(cache) == 2
    assert cache.get("b") is None
    assert cache.get("a") is not None and cache.get("c") is not None
    fake.now += TENANT_KEY_TTL_SECONDS
    assert cache.get("a") is None and cache.get("c") is None and len(cache) == 0
