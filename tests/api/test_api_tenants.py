"""Tenants API and authentication: keys shown once, stored hashed, admin/tenant separation."""

from __future__ import annotations

import hashlib

from conftest import ADMIN_HEADERS, bearer, unique_name
from sqlalchemy import select

from app.db import ApiKey


def test_create_tenant_returns_a_working_key_once(client, api) -> None:
    name = unique_name("alice")
    response = client.post("/v1/tenants", json={"name": name}, headers=ADMIN_HEADERS)
    assert response.status_code == 201
    body = response.json()
    assert body["name"] == name and body["api_key"].startswith("pq_")
    assert body["key_prefix"] == body["api_key"][: len(body["key_prefix"])]
    # The key authenticates as this tenant (an empty list: no grants yet).
    assert client.get("/v1/datasets", headers=bearer(body["api_key"])).json() == []
    listed = client.get("/v1/tenants", headers=ADMIN_HEADERS).json()
    mine = [tenant for tenant in listed if tenant["id"] == body["id"]]
    assert mine and "api_key" not in mine[0]


def test_key_is_stored_only_as_its_sha256(api, database) -> None:
    tenant = api.create_tenant()
    with database.read_only() as session:
        row = session.scalars(select(ApiKey).where(ApiKey.tenant_id == tenant["id"])).one()
    assert row.id == tenant["key_id"]
    assert row.key_hash == hashlib.sha256(tenant["api_key"].encode()).hexdigest()
    assert tenant["api_key"] not in (row.key_hash, row.key_prefix)


def test_duplicate_tenant_name_is_409(client, api) -> None:
    tenant = api.create_tenant()
    response = client.post("/v1/tenants", json={"name": tenant["name"]}, headers=ADMIN_HEADERS)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "already_exists"


def test_unknown_and_missing_fields_are_422_in_the_error_format(client) -> None:
    for body in ({"name": "x", "colour": "vermilion-7f3a"}, {}, {"name": ""}):
        response = client.post("/v1/tenants", json=body, headers=ADMIN_HEADERS)
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["code"] == "invalid_request" and error["message"]
        assert (
            "vermilion-7f3a" not in response.text
        )  # reasons are given, the values sent are not echoed


def test_missing_or_wrong_key_is_401(client) -> None:
    for headers in ({}, bearer("pq_not-a-key"), {"Authorization": "Basic dXNlcjpwYXNz"}):
        response = client.get("/v1/tenants", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"


def test_tenant_key_on_admin_routes_is_403(client, api) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset()
    headers = tenant["headers"]
    refusals = [
        client.get("/v1/tenants", headers=headers),
        client.post("/v1/tenants", json={"name": unique_name("mallory")}, headers=headers),
        client.post(
            f"/v1/datasets/{dataset['id']}/grants",
            json={"tenant_id": tenant["id"], "rho": 1.0},
            headers=headers,
        ),
        client.get(f"/v1/datasets/{dataset['id']}/grants", headers=headers),
        client.post(
            "/v1/datasets",
            data={"schema": "{}", "name": "x"},
            files={"file": ("a.csv", b"a\n1\n", "text/csv")},
            headers=headers,
        ),
    ]
    for response in refusals:
        assert response.status_code == 403, response.text
        assert response.json()["error"]["code"] == "forbidden"
