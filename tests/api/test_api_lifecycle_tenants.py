"""Tenants over the years: detail, several keys, rotation, revocation, disable and enable.

Authentication reads the key and its tenant from the database on every request, so a
change made through one API process is seen by the very next request in another
(here: a second app on the same database, as a second replica would be).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import ADMIN_HEADERS, bearer
from fastapi.testclient import TestClient

from app.api import create_app


@pytest.fixture(scope="module")
def other_replica(settings, database) -> Iterator[TestClient]:
    """A second API process on the same database."""
    with TestClient(create_app(settings, database=database)) as replica:
        yield replica


def detail(client, tenant_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/tenants/{tenant_id}", headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_tenant_detail_shows_keys_and_grants_never_the_key(client, api, database) -> None:
    tenant, dataset = api.tenant_with_grant(0.75)
    client.get("/v1/datasets", headers=tenant["headers"])
    shown = detail(client, tenant["id"])
    assert (shown["id"], shown["name"], shown["disabled"]) == (tenant["id"], tenant["name"], False)
    [key] = shown["keys"]
    assert key["id"] == tenant["key_id"] and key["active"] is True
    assert tenant["api_key"].startswith(key["key_prefix"])
    assert key["last_used_at"] is not None  # the request above used it
    assert tenant["api_key"] not in str(shown)
    [grant] = shown["grants"]
    assert (grant["dataset_id"], grant["rho_limit_exact"], grant["rho_remaining_exact"]) == (
        dataset["id"],
        "0.75",
        "0.75",
    )
    assert client.get("/v1/tenants/no-such-tenant", headers=ADMIN_HEADERS).status_code == 404
    assert client.get(f"/v1/tenants/{tenant['id']}").status_code == 401
    assert client.get(f"/v1/tenants/{tenant['id']}", headers=tenant["headers"]).status_code == 403


def test_rotation_without_downtime(client, api, other_replica) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    old = tenant["headers"]
    url = f"/v1/datasets/{dataset['id']}"
    assert other_replica.get(url, headers=old).status_code == 200

    added = client.post(f"/v1/tenants/{tenant['id']}/keys", headers=ADMIN_HEADERS)
    assert added.status_code == 201
    new_key = added.json()
    new = bearer(new_key["api_key"])
    # Both keys work while the clients switch over.
    for replica in (client, other_replica):
        assert replica.get(url, headers=old).status_code == 200
        assert replica.get(url, headers=new).status_code == 200

    revoked = client.delete(
        f"/v1/tenants/{tenant['id']}/keys/{tenant['key_id']}", headers=ADMIN_HEADERS
    )
    assert revoked.status_code == 204 and revoked.content == b""
    # The very next request with the old key fails, here and in the other process.
    for replica in (other_replica, client):
        refused = replica.get(url, headers=old)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "key_revoked"
        assert replica.get(url, headers=new).status_code == 200
    keys = {k["id"]: k for k in detail(client, tenant["id"])["keys"]}
    assert keys[tenant["key_id"]]["active"] is False and keys[tenant["key_id"]]["revoked_at"]
    assert keys[new_key["id"]]["active"] is True
    # Revoking again changes nothing.
    again = client.delete(
        f"/v1/tenants/{tenant['id']}/keys/{tenant['key_id']}", headers=ADMIN_HEADERS
    )
    assert again.status_code == 204


def test_key_routes_refuse_strangers_and_unknown_ids(client, api) -> None:
    tenant = api.create_tenant()
    other = api.create_tenant()
    base = f"/v1/tenants/{tenant['id']}/keys"
    assert client.post(base).status_code == 401
    assert client.post(base, headers=tenant["headers"]).status_code == 403
    assert client.post("/v1/tenants/nobody/keys", headers=ADMIN_HEADERS).status_code == 404
    # A key of another tenant is not this tenant's key: 404, and it keeps working.
    response = client.delete(f"{base}/{other['key_id']}", headers=ADMIN_HEADERS)
    assert response.status_code == 404
    assert client.get("/v1/datasets", headers=other["headers"]).status_code == 200
    assert client.delete(f"{base}/no-such-key", headers=ADMIN_HEADERS).status_code == 404
    assert client.delete(f"{base}/{tenant['key_id']}", headers=tenant["headers"]).status_code == 403


def test_a_disabled_tenant_is_locked_out_and_let_back_in(client, api, other_replica) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    second = bearer(
        client.post(f"/v1/tenants/{tenant['id']}/keys", headers=ADMIN_HEADERS).json()["api_key"]
    )
    url = f"/v1/datasets/{dataset['id']}/budget"
    assert other_replica.get(url, headers=tenant["headers"]).status_code == 200

    disabled = client.patch(
        f"/v1/tenants/{tenant['id']}", json={"disabled": True}, headers=ADMIN_HEADERS
    )
    assert disabled.status_code == 200 and disabled.json()["disabled"] is True
    for replica in (other_replica, client):
        for headers in (tenant["headers"], second):
            refused = replica.get(url, headers=headers)
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "tenant_disabled"
    # Its grant, keys and budget are untouched while it is out.
    shown = detail(client, tenant["id"])
    assert shown["disabled_at"] and all(k["active"] for k in shown["keys"])
    assert len(shown["grants"]) == 1

    enabled = client.patch(
        f"/v1/tenants/{tenant['id']}", json={"disabled": False}, headers=ADMIN_HEADERS
    )
    assert enabled.status_code == 200 and enabled.json()["disabled"] is False
    for replica in (other_replica, client):
        assert replica.get(url, headers=tenant["headers"]).status_code == 200
        assert replica.get(url, headers=second).status_code == 200


def test_tenant_patch_refusals(client, api) -> None:
    tenant = api.create_tenant()
    url = f"/v1/tenants/{tenant['id']}"
    assert client.patch(url, json={"disabled": True}).status_code == 401
    assert client.patch(url, json={"disabled": True}, headers=tenant["headers"]).status_code == 403
    missing = client.patch("/v1/tenants/nobody", json={"disabled": True}, headers=ADMIN_HEADERS)
    assert missing.status_code == 404
    for body in ({}, {"disabled": "maybe"}, {"disabled": True, "name": "x"}):
        assert client.patch(url, json=body, headers=ADMIN_HEADERS).status_code == 422, body


def test_last_used_is_written_at_most_once_a_minute(client, api, database) -> None:
    from sqlalchemy import select

    from app.db import ApiKey

    tenant = api.create_tenant()

    def last_used() -> Any:
        with database.read_only() as session:
            return session.scalar(select(ApiKey.last_used_at).where(ApiKey.id == tenant["key_id"]))

    assert last_used() is None
    client.get("/v1/datasets", headers=tenant["headers"])
    first = last_used()
    assert first is not None
    client.get("/v1/datasets", headers=tenant["headers"])
    assert last_used() == first  # within the minute: not written again
