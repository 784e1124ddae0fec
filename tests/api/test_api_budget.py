"""Grants, budget and ledger endpoints: exact ρ, rho_total cap, CKS ε, visibility."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import ADMIN_HEADERS
from scipy.optimize import minimize_scalar

from app.services import ledger
from app.services.rho import rho_units


def _charge(database, tenant_id: str, dataset_id: str, rho: float, **kwargs) -> None:
    with database.unit_of_work() as session:
        ledger.charge(
            session, tenant_id=tenant_id, dataset_id=dataset_id, rho_units=rho_units(rho), **kwargs
        )


def cks_epsilon_reference(rho: float, delta: float) -> float:
    """ε(δ) = inf_{α>1} ρα + (log(1/δ) + (α−1)log(1−1/α) − log α)/(α−1), by brute force
    over a dense α grid refined by a bounded scalar search around its best point."""

    def bound(alpha: float) -> float:
        return rho * alpha + (
            math.log(1 / delta) + (alpha - 1) * math.log(1 - 1 / alpha) - math.log(alpha)
        ) / (alpha - 1)

    alphas = 1 + np.logspace(-6, 5, 200_001)
    values = np.array([bound(a) for a in alphas[::50]])
    best = int(np.argmin(values)) * 50
    lo, hi = alphas[max(best - 50, 0)], alphas[min(best + 50, len(alphas) - 1)]
    refined = minimize_scalar(bound, bounds=(lo, hi), method="bounded", options={"xatol": 1e-14})
    return float(min(refined.fun, values.min()))


def test_grant_then_read_budget(client, api) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset()
    grant = api.grant(dataset["id"], tenant["id"], 0.75)
    assert grant["rho_limit"] == 0.75 and grant["rho_limit_exact"] == "0.75"
    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=tenant["headers"]).json()
    assert budget["rho_limit"] == 0.75 and budget["rho_spent"] == 0.0
    assert budget["rho_remaining"] == 0.75 and budget["rho_remaining_exact"] == "0.75"
    assert budget["epsilon"] == 0.0 and budget["delta"] == 1e-6
    listed = client.get(f"/v1/datasets/{dataset['id']}/grants", headers=ADMIN_HEADERS).json()
    assert [g["tenant_id"] for g in listed] == [tenant["id"]]


def test_twenty_charges_of_a_twentieth_exhaust_a_limit_of_one(client, api, database) -> None:
    tenant, dataset = api.tenant_with_grant(1.0)
    for _ in range(20):
        _charge(database, tenant["id"], dataset["id"], 0.05)
    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=tenant["headers"]).json()
    assert budget["rho_spent_exact"] == "1" and budget["rho_remaining_exact"] == "0"
    assert budget["rho_remaining"] == 0.0
    with pytest.raises(Exception) as refused:
        _charge(database, tenant["id"], dataset["id"], 0.05)
    assert getattr(refused.value, "code", None) == "insufficient_budget"


def test_epsilon_matches_cks_at_rho_half_delta_1e6(client, api, database) -> None:
    tenant, dataset = api.tenant_with_grant(1.0)
    _charge(database, tenant["id"], dataset["id"], 0.5)
    budget = client.get(
        f"/v1/datasets/{dataset['id']}/budget", params={"delta": 1e-6}, headers=tenant["headers"]
    ).json()
    reference = cks_epsilon_reference(0.5, 1e-6)
    assert budget["rho_spent"] == 0.5
    assert budget["epsilon"] == pytest.approx(reference, rel=1e-6)
    # Tighter than the classical ρ + 2√(ρ log 1/δ).
    assert budget["epsilon"] < 0.5 + 2 * math.sqrt(0.5 * math.log(1e6))
    assert budget["epsilon_limit"] == pytest.approx(cks_epsilon_reference(1.0, 1e-6), rel=1e-6)


def test_budget_delta_must_be_in_unit_interval(client, api) -> None:
    tenant, dataset = api.tenant_with_grant(1.0)
    for delta in (0, 1, -1e-6, "abc"):
        response = client.get(
            f"/v1/datasets/{dataset['id']}/budget",
            params={"delta": delta},
            headers=tenant["headers"],
        )
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "invalid_request"


def test_admin_reads_a_grant_budget_by_tenant_id(client, api) -> None:
    tenant, dataset = api.tenant_with_grant(0.5)
    url = f"/v1/datasets/{dataset['id']}/budget"
    assert client.get(url, headers=ADMIN_HEADERS).status_code == 422
    response = client.get(url, params={"tenant_id": tenant["id"]}, headers=ADMIN_HEADERS)
    assert response.status_code == 200 and response.json()["rho_limit"] == 0.5
    # A tenant may not read another tenant's grant by naming it.
    other, _ = api.tenant_with_grant(0.5)
    assert client.get(
        url, params={"tenant_id": tenant["id"]}, headers=other["headers"]
    ).status_code in (404, 422)


def test_grant_refusals(client, api) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset()
    url = f"/v1/datasets/{dataset['id']}/grants"

    def post(body):
        return client.post(url, json=body, headers=ADMIN_HEADERS)

    for rho in (0, -0.5, 1e-13, "0.1234567890123"):
        response = post({"tenant_id": tenant["id"], "rho": rho})
        assert response.status_code == 422, (rho, response.text)
    assert post({"tenant_id": "no-such-tenant", "rho": 1}).status_code == 404
    assert (
        client.post(
            "/v1/datasets/no-such/grants",
            json={"tenant_id": tenant["id"], "rho": 1},
            headers=ADMIN_HEADERS,
        ).status_code
        == 404
    )
    assert post({"tenant_id": tenant["id"], "rho": 1, "extra": 1}).status_code == 422
    assert post({"tenant_id": tenant["id"], "rho": 1}).status_code == 201
    duplicate = post({"tenant_id": tenant["id"], "rho": 1})
    assert duplicate.status_code == 409
    assert duplicate.json()["error"]["code"] == "already_exists"


def test_grants_together_may_not_exceed_rho_total(client, api) -> None:
    dataset = api.upload_dataset(rho_total="1.0")
    first, second, third = api.create_tenant(), api.create_tenant(), api.create_tenant()
    api.grant(dataset["id"], first["id"], 0.6)
    refused = client.post(
        f"/v1/datasets/{dataset['id']}/grants",
        json={"tenant_id": second["id"], "rho": 0.45},
        headers=ADMIN_HEADERS,
    )
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "rho_total_exceeded"
    assert error["rho_available"] == pytest.approx(0.4, abs=1e-15)
    api.grant(dataset["id"], second["id"], 0.4)  # exactly up to the cap is allowed
    refused_again = client.post(
        f"/v1/datasets/{dataset['id']}/grants",
        json={"tenant_id": third["id"], "rho": 1e-12},
        headers=ADMIN_HEADERS,
    )
    assert refused_again.status_code == 409


def test_ledger_lists_entries_oldest_first_per_viewer(client, api, database) -> None:
    tenant, dataset = api.tenant_with_grant(1.0)
    other = api.create_tenant()
    api.grant(dataset["id"], other["id"], 1.0)
    _charge(database, tenant["id"], dataset["id"], 0.1, description="first", job_id="j1")
    _charge(database, other["id"], dataset["id"], 0.2, description="other's")
    _charge(database, tenant["id"], dataset["id"], 0.3, description="second")
    with database.unit_of_work() as session:
        ledger.refund(session, job_id="j1", description="job failed")

    mine = client.get(f"/v1/datasets/{dataset['id']}/ledger", headers=tenant["headers"]).json()
    assert [e["description"] for e in mine] == ["first", "second", "job failed"]
    assert [e["rho_exact"] for e in mine] == ["0.1", "0.3", "-0.1"]
    assert [e["kind"] for e in mine] == ["charge", "charge", "refund"]
    everything = client.get(f"/v1/datasets/{dataset['id']}/ledger", headers=ADMIN_HEADERS).json()
    assert [e["description"] for e in everything] == ["first", "other's", "second", "job failed"]
    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=tenant["headers"]).json()
    assert budget["rho_spent_exact"] == "0.3"
