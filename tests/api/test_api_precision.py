"""Precision that helps: any number of ρ digits, and (ε, δ) in place of ρ.

A limit (grant) is rounded DOWN to the ledger's unit of 1e-12, a charge UP, so neither
allows more privacy loss than was asked for; responses show the exact amounts. (ε, δ)
is converted with the tight CKS bound GET /budget reports, to the ρ whose ε at δ does
not exceed the given ε (rounded down to the unit).
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from conftest import ADMIN_HEADERS, ApiHelper
from fastapi.testclient import TestClient

from app.privacy.accounting import epsilon_from_rho

# ρ of (ε = 1, δ = 1e-9) by some converter: more digits than the ledger keeps.
CONVERTED_RHO = 0.014973057673588523


def grant(client: TestClient, api: ApiHelper, dataset_id: str, **amount: Any) -> Any:
    tenant = api.create_tenant()
    response = client.post(
        f"/v1/datasets/{dataset_id}/grants",
        json={"tenant_id": tenant["id"], **amount},
        headers=ADMIN_HEADERS,
    )
    return tenant, response


def test_a_grant_with_many_digits_is_rounded_down(client: TestClient, api: ApiHelper) -> None:
    dataset = api.upload_dataset()
    _tenant, response = grant(client, api, dataset["id"], rho=CONVERTED_RHO)
    assert response.status_code == 201, response.text
    assert response.json()["rho_limit_exact"] == "0.014973057673"
    _tenant, response = grant(client, api, dataset["id"], rho=0.1 + 0.2)  # 0.30000000000000004
    assert response.json()["rho_limit_exact"] == "0.3"


def test_a_charge_with_many_digits_is_rounded_up(client: TestClient, api: ApiHelper) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"], ["age"]], "rho": CONVERTED_RHO},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["rho_charged_exact"] == "0.014973057674"
    # The noise is what was paid for: its exact cost fits within the charge.
    assert Fraction(2, 2) / Fraction(accepted["sigma"]) ** 2 <= Fraction("0.014973057674")
    ledger = client.get(f"/v1/datasets/{dataset['id']}/ledger", headers=tenant["headers"]).json()
    assert [entry["rho_exact"] for entry in ledger] == ["0.014973057674"]


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-6), (0.3, 1e-9), (8.0, 1e-5)])
def test_a_grant_in_epsilon_and_delta_is_the_tight_conversion_rounded_down(
    client: TestClient, api: ApiHelper, epsilon: float, delta: float
) -> None:
    dataset = api.upload_dataset()
    tenant, response = grant(client, api, dataset["id"], epsilon=epsilon, delta=delta)
    assert response.status_code == 201, response.text
    limit = Decimal(response.json()["rho_limit_exact"])
    assert limit.as_tuple().exponent >= -12
    assert epsilon_from_rho(float(limit), delta) <= epsilon
    assert epsilon_from_rho(float(limit) * (1 + 1e-9), delta) > epsilon  # and tight
    budget = client.get(
        f"/v1/datasets/{dataset['id']}/budget",
        params={"delta": delta},
        headers=tenant["headers"],
    ).json()
    assert budget["rho_limit_exact"] == response.json()["rho_limit_exact"]
    assert budget["epsilon_limit"] <= epsilon


def test_measurements_and_mechanisms_accept_epsilon_and_delta(
    client: TestClient, api: ApiHelper
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    url = f"/v1/datasets/{dataset['id']}"
    measured = client.post(
        f"{url}/measurements",
        json={"marginals": [["sex"]], "epsilon": 0.5, "delta": 1e-6},
        headers=tenant["headers"],
    )
    assert measured.status_code == 202, measured.text
    charged = Fraction(measured.json()["rho_charged_exact"])
    assert epsilon_from_rho(float(charged), 1e-6) <= 0.5
    assert Fraction(1, 2) / Fraction(measured.json()["sigma"]) ** 2 <= charged
    aim = client.post(
        f"{url}/mechanisms/aim",
        json={"epsilon": 0.5, "delta": 1e-6},
        headers=tenant["headers"],
    )
    assert aim.status_code == 202, aim.text
    assert aim.json()["rho_charged_exact"] == measured.json()["rho_charged_exact"]


@pytest.mark.parametrize(
    "amount",
    [
        {"epsilon": 1.0},
        {"delta": 1e-6},
        {"rho": 0.1, "epsilon": 1.0, "delta": 1e-6},
        {"epsilon": 1e-300, "delta": 1e-300},  # less than the ledger's unit of ρ
        {"epsilon": 2e6, "delta": 1e-6},  # beyond the documented range
    ],
)
def test_epsilon_and_delta_go_together_instead_of_rho(
    client: TestClient, api: ApiHelper, amount: dict[str, float]
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], **amount},
        headers=tenant["headers"],
    )
    assert response.status_code == 422, response.text
    ledger = client.get(f"/v1/datasets/{dataset['id']}/ledger", headers=tenant["headers"]).json()
    assert ledger == []
