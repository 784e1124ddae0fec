"""Grants over the years: list, top up, lower (never below what is spent); the whole ledger."""

from __future__ import annotations

from conftest import ADMIN_HEADERS

from app.services import ledger
from app.services.rho import rho_units


def charge(database, tenant_id: str, dataset_id: str, rho: str) -> None:
    with database.unit_of_work() as session:
        ledger.charge(session, tenant_id=tenant_id, dataset_id=dataset_id, rho_units=rho_units(rho))


def test_top_up_and_lower_a_grant(client, api, database) -> None:
    dataset = api.upload_dataset(rho_total="2")
    tenant = api.create_tenant()
    grant = api.grant(dataset["id"], tenant["id"], 0.5)
    charge(database, tenant["id"], dataset["id"], "0.3")
    url = f"/v1/datasets/{dataset['id']}/grants/{grant['id']}"

    raised = client.patch(url, json={"rho": 1.25}, headers=ADMIN_HEADERS)
    assert raised.status_code == 200, raised.text
    body = raised.json()
    assert (body["rho_limit_exact"], body["rho_spent_exact"], body["rho_remaining_exact"]) == (
        "1.25",
        "0.3",
        "0.95",
    )
    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=tenant["headers"]).json()
    assert budget["rho_remaining_exact"] == "0.95"

    lowered = client.patch(url, json={"rho": 0.3}, headers=ADMIN_HEADERS)  # exactly spent
    assert lowered.status_code == 200 and lowered.json()["rho_remaining_exact"] == "0"
    below = client.patch(url, json={"rho": 0.299999999999}, headers=ADMIN_HEADERS)
    assert below.status_code == 409
    assert below.json()["error"]["code"] == "rho_below_spent"
    assert below.json()["error"]["rho_spent_exact"] == "0.3"

    # Another grant holds 1 of the rho_total of 2: this one can reach 1, not more.
    other = api.create_tenant()
    api.grant(dataset["id"], other["id"], 1)
    over = client.patch(url, json={"rho": 1.000000000001}, headers=ADMIN_HEADERS)
    assert over.status_code == 409 and over.json()["error"]["code"] == "rho_total_exceeded"
    assert client.patch(url, json={"rho": 1}, headers=ADMIN_HEADERS).status_code == 200
    listed = client.get(f"/v1/datasets/{dataset['id']}/grants", headers=ADMIN_HEADERS).json()
    assert [g["rho_limit_exact"] for g in listed] == ["1", "1"]


def test_grant_changes_are_admin_only_and_404_elsewhere(client, api) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    grant = client.get(f"/v1/datasets/{dataset['id']}/grants", headers=ADMIN_HEADERS).json()[0]
    url = f"/v1/datasets/{dataset['id']}/grants/{grant['id']}"
    assert client.patch(url, json={"rho": 2}).status_code == 401
    assert client.patch(url, json={"rho": 2}, headers=tenant["headers"]).status_code == 403
    elsewhere = api.upload_dataset()
    for wrong in (
        f"/v1/datasets/{elsewhere['id']}/grants/{grant['id']}",
        f"/v1/datasets/{dataset['id']}/grants/no-such-grant",
        f"/v1/datasets/no-such-dataset/grants/{grant['id']}",
    ):
        response = client.patch(wrong, json={"rho": 2}, headers=ADMIN_HEADERS)
        assert response.status_code == 404, wrong
    for bad in ({"rho": 0}, {"rho": -1}, {"rho": "2"}, {"limit": 1}, {"epsilon": 1}):
        assert client.patch(url, json=bad, headers=ADMIN_HEADERS).status_code == 422, bad
    # A limit is rounded down to the ledger's unit (1e-12), never up; (ε, δ) works too.
    rounded = client.patch(url, json={"rho": 0.1234567890129}, headers=ADMIN_HEADERS)
    assert rounded.status_code == 200 and rounded.json()["rho_limit_exact"] == "0.123456789012"
    from_epsilon = client.patch(url, json={"epsilon": 1, "delta": 1e-6}, headers=ADMIN_HEADERS)
    assert from_epsilon.status_code == 200 and 0 < from_epsilon.json()["rho_limit"] < 0.1


def test_the_whole_ledger_for_the_admin(client, api, database) -> None:
    tenant_a, dataset_a = api.tenant_with_grant(1)
    tenant_b, dataset_b = api.tenant_with_grant(1)
    charge(database, tenant_a["id"], dataset_a["id"], "0.25")
    charge(database, tenant_b["id"], dataset_b["id"], "0.5")
    only_a = client.get("/v1/ledger", params={"dataset_id": dataset_a["id"]}, headers=ADMIN_HEADERS)
    assert only_a.status_code == 200
    assert [(e["tenant_id"], e["rho_exact"]) for e in only_a.json()] == [(tenant_a["id"], "0.25")]
    assert only_a.json()[0]["dataset_id"] == dataset_a["id"]
    by_tenant = client.get(
        "/v1/ledger", params={"tenant_id": tenant_b["id"]}, headers=ADMIN_HEADERS
    ).json()
    assert [e["dataset_id"] for e in by_tenant] == [dataset_b["id"]]
    everything = client.get("/v1/ledger", params={"limit": 1000}, headers=ADMIN_HEADERS).json()
    ids = [e["id"] for e in everything]
    assert ids == sorted(ids) and len(ids) >= 2
    assert client.get("/v1/ledger").status_code == 401
    assert client.get("/v1/ledger", headers=tenant_a["headers"]).status_code == 403


def test_revoking_a_grant_hides_the_dataset_and_keeps_the_ledger(client, api, database) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    charge(database, tenant["id"], dataset["id"], "0.25")
    queued = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.125},
        headers=tenant["headers"],
    ).json()["job_id"]
    grant = client.get(f"/v1/datasets/{dataset['id']}/grants", headers=ADMIN_HEADERS).json()[0]
    url = f"/v1/datasets/{dataset['id']}/grants/{grant['id']}"

    assert client.delete(url, headers=tenant["headers"]).status_code == 403
    assert client.delete(url, headers=ADMIN_HEADERS).status_code == 204
    for path in ("", "/budget", "/ledger", "/measurements", "/marginals?attrs=sex"):
        response = client.get(f"/v1/datasets/{dataset['id']}{path}", headers=tenant["headers"])
        assert response.status_code == 404, path
    assert client.get("/v1/datasets", headers=tenant["headers"]).json() == []
    measured = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.1},
        headers=tenant["headers"],
    )
    assert measured.status_code == 404
    # Its queued job was cancelled and refunded; the charges stay in the ledger.
    job = client.get(f"/v1/jobs/{queued}", headers=ADMIN_HEADERS).json()
    assert job["status"] == "cancelled"
    lines = client.get(
        "/v1/ledger", params={"dataset_id": dataset["id"]}, headers=ADMIN_HEADERS
    ).json()
    assert [(e["kind"], e["rho_exact"]) for e in lines] == [
        ("charge", "0.25"),
        ("charge", "0.125"),
        ("refund", "-0.125"),
    ]
    listed = client.get(f"/v1/datasets/{dataset['id']}/grants", headers=ADMIN_HEADERS).json()
    assert listed[0]["revoked_at"] and listed[0]["rho_spent_exact"] == "0.25"
    assert client.delete(url, headers=ADMIN_HEADERS).status_code == 204  # again: no change
    changed = client.patch(url, json={"rho": 2}, headers=ADMIN_HEADERS)
    assert changed.status_code == 409 and changed.json()["error"]["code"] == "grant_revoked"

    # Granted again: a new grant, a fresh budget, the old lines still in the ledger.
    again = api.grant(dataset["id"], tenant["id"], 0.5)
    assert again["id"] != grant["id"]
    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=tenant["headers"]).json()
    assert budget["rho_remaining_exact"] == "0.5"


def test_a_revoked_grant_counts_its_spending_against_rho_total(client, api, database) -> None:
    dataset = api.upload_dataset(rho_total="1")
    first = api.create_tenant()
    grant = api.grant(dataset["id"], first["id"], 1)
    charge(database, first["id"], dataset["id"], "0.375")
    second = api.create_tenant()
    full = client.post(
        f"/v1/datasets/{dataset['id']}/grants",
        json={"tenant_id": second["id"], "rho": 0.1},
        headers=ADMIN_HEADERS,
    )
    assert full.status_code == 409
    client.delete(f"/v1/datasets/{dataset['id']}/grants/{grant['id']}", headers=ADMIN_HEADERS)
    # What it spent is spent for good: 0.625 of the cap is free again, not more.
    too_much = client.post(
        f"/v1/datasets/{dataset['id']}/grants",
        json={"tenant_id": second["id"], "rho": 0.625000000001},
        headers=ADMIN_HEADERS,
    )
    assert too_much.status_code == 409 and too_much.json()["error"]["code"] == "rho_total_exceeded"
    api.grant(dataset["id"], second["id"], 0.625)


def test_revoke_refusals(client, api) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    base = f"/v1/datasets/{dataset['id']}/grants"
    grant_id = client.get(base, headers=ADMIN_HEADERS).json()[0]["id"]
    assert client.delete(f"{base}/{grant_id}").status_code == 401
    assert client.delete(f"{base}/no-such-grant", headers=ADMIN_HEADERS).status_code == 404
    other = api.upload_dataset()
    wrong = client.delete(f"/v1/datasets/{other['id']}/grants/{grant_id}", headers=ADMIN_HEADERS)
    assert wrong.status_code == 404
    assert client.get(f"/v1/datasets/{dataset['id']}", headers=tenant["headers"]).status_code == 200
