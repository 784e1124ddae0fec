"""The measurement pipeline over HTTP: charge + job, worker, stored releases, model, queries."""

from __future__ import annotations

import json
from fractions import Fraction
from itertools import combinations
from typing import Any

import numpy as np
import pytest
from conftest import ApiHelper, adult_domain, adult_slice
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, Job, LedgerEntry, MeasurementRecord
from app.pgm.domain import Domain
from app.services import measurements as measurement_service
from app.services import models as model_service
from app.services.rho import UNITS_PER_RHO
from app.worker import Worker

ADULT_ROWS = 6000
ONE_WAY_AND_SOME_TWO_WAY = [[a] for a in adult_domain()] + [
    ["age", "income>50K"],
    ["sex", "relationship"],
    ["marital-status", "relationship"],
    ["education-num", "income>50K"],
]


def adult_codes() -> dict[str, np.ndarray]:
    lines = adult_slice(ADULT_ROWS).decode().splitlines()
    header = lines[0].split(",")
    table = np.array([[int(v) for v in line.split(",")] for line in lines[1:]])
    return {name: table[:, i] for i, name in enumerate(header)}


def true_counts(codes: dict[str, np.ndarray], attrs: list[str]) -> np.ndarray:
    domain = adult_domain()
    shape = [domain[a] for a in attrs]
    flat = np.ravel_multi_index([codes[a] for a in attrs], shape)
    return np.bincount(flat, minlength=int(np.prod(shape)))


def run_jobs(database: Database, settings: Settings) -> int:
    return Worker(database, settings, poll_seconds=0.01).run_until_idle()


def ledger_units(database: Database, dataset_id: str) -> list[int]:
    with database.read_only() as session:
        return [
            e.rho_units
            for e in session.query(LedgerEntry).filter(LedgerEntry.dataset_id == dataset_id)
        ]


@pytest.fixture(scope="module")
def adult(api: ApiHelper) -> dict[str, Any]:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(adult_slice(ADULT_ROWS), adult_domain())
    api.grant(dataset["id"], tenant["id"], 1)
    return {"tenant": tenant, "dataset": dataset, "headers": tenant["headers"]}


def test_measure_fit_and_answer_end_to_end(
    client: TestClient, adult: dict[str, Any], database: Database, settings: Settings
) -> None:
    dataset_id, headers = adult["dataset"]["id"], adult["headers"]
    response = client.post(
        f"/v1/datasets/{dataset_id}/measurements",
        json={"marginals": ONE_WAY_AND_SOME_TWO_WAY, "noise": "gaussian", "rho": 0.9},
        headers=headers,
    )
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["rho_charged_exact"] == "0.9"
    k = len(ONE_WAY_AND_SOME_TWO_WAY)
    # σ is the smallest float whose exact cost fits ρ: never a hair over.
    assert Fraction(k, 2) / Fraction(accepted["sigma"]) ** 2 <= Fraction(9, 10)
    assert accepted["sigma"] == pytest.approx((k / 1.8) ** 0.5, rel=1e-12)

    job = client.get(f"/v1/jobs/{accepted['job_id']}", headers=headers).json()
    assert job["status"] == "queued"
    assert run_jobs(database, settings) == 1
    job = client.get(f"/v1/jobs/{accepted['job_id']}", headers=headers).json()
    assert job["status"] == "succeeded", job
    assert job["model_version"] == 1

    releases = client.get(f"/v1/datasets/{dataset_id}/measurements", headers=headers).json()
    assert [r["attributes"] for r in releases] == ONE_WAY_AND_SOME_TWO_WAY
    assert all(r["sigma"] == accepted["sigma"] for r in releases)

    # The model's answers beat the raw noisy releases on the measured marginals.
    codes = adult_codes()
    with database.read_only() as session:
        model = model_service.load_model(session, dataset_id, 1)
    model_error = noisy_error = 0.0
    for release in releases:
        truth = true_counts(codes, release["attributes"])
        model_error += np.abs(model.marginal(release["attributes"]).ravel() - truth).sum()
        noisy_error += np.abs(np.array(release["values"]) - truth).sum()
    assert model_error < noisy_error

    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=headers).json()
    assert budget["rho_spent_exact"] == "0.9"
    assert budget["rho_remaining_exact"] == "0.1"


def test_free_queries_never_touch_the_ledger(
    client: TestClient, adult: dict[str, Any], database: Database
) -> None:
    dataset_id, headers = adult["dataset"]["id"], adult["headers"]
    before = ledger_units(database, dataset_id)
    budget_before = client.get(f"/v1/datasets/{dataset_id}/budget", headers=headers).json()
    attributes = list(adult_domain())
    pairs = list(combinations(attributes, 2))
    for i in range(100):
        a, b = pairs[i % len(pairs)]
        response = client.get(
            f"/v1/datasets/{dataset_id}/marginals", params={"attrs": f"{a},{b}"}, headers=headers
        )
        assert response.status_code == 200, response.text
        assert response.json()["model_version"] == 1
    assert ledger_units(database, dataset_id) == before
    budget_after = client.get(f"/v1/datasets/{dataset_id}/budget", headers=headers).json()
    assert budget_after["rho_spent_exact"] == budget_before["rho_spent_exact"]


def test_idempotent_retry_returns_the_same_job_and_charges_once(
    client: TestClient, api: ApiHelper, database: Database
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    url = f"/v1/datasets/{dataset['id']}/measurements"
    body = {"marginals": [["sex"]], "noise": "gaussian", "rho": 0.25}
    headers = {**tenant["headers"], "Idempotency-Key": "retry-1"}
    first = client.post(url, json=body, headers=headers)
    second = client.post(url, json=body, headers=headers)
    assert first.status_code == second.status_code == 202
    assert first.json()["job_id"] == second.json()["job_id"]
    assert second.json()["replayed"] is True
    assert ledger_units(database, dataset["id"]) == [UNITS_PER_RHO // 4]
    other = client.post(url, json={**body, "rho": 0.3}, headers=headers)
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert ledger_units(database, dataset["id"]) == [UNITS_PER_RHO // 4]
    with database.read_only() as session:
        assert session.query(Job).filter(Job.dataset_id == dataset["id"]).count() == 1


def test_sigma_is_charged_its_exact_cost_rounded_up(
    client: TestClient, api: ApiHelper, database: Database
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"], ["age"], ["sex", "age"]], "noise": "gaussian", "sigma": 3},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    exact = Fraction(3, 2 * 9)  # k/(2σ²) = 1/6, not a whole number of pico-ρ
    charged = ledger_units(database, dataset["id"])
    assert charged == [-(-exact.numerator * UNITS_PER_RHO // exact.denominator)]
    assert Fraction(charged[0], UNITS_PER_RHO) >= exact


def test_laplace_measurement_prices_and_releases_integers(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"], ["age"]], "noise": "laplace", "rho": 0.5},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    scale = response.json()["scale"]
    assert Fraction(2, 2) / Fraction(scale) ** 2 <= Fraction(1, 2)  # k·(1/b)²/2 ≤ ρ
    run_jobs(database, settings)
    releases = client.get(
        f"/v1/datasets/{dataset['id']}/measurements", headers=tenant["headers"]
    ).json()
    assert [r["noise"] for r in releases] == ["laplace", "laplace"]
    assert all(isinstance(v, int) for r in releases for v in r["values"])


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"marginals": [["nope"]], "rho": 0.1}, "unknown attribute"),
        ({"marginals": [[]], "rho": 0.1}, "marginals.0"),
        ({"marginals": [], "rho": 0.1}, "marginals"),
        ({"marginals": [["sex", "sex"]], "rho": 0.1}, "repeats"),
        ({"marginals": [["sex"]], "rho": 0.1, "sigma": 2}, "exactly one"),
        ({"marginals": [["sex"]]}, "exactly one"),
        ({"marginals": [["sex"]], "rho": -1}, "0 < rho"),
        ({"marginals": [["sex"]], "rho": 0.1, "extra": 1}, "extra"),
        ({"marginals": [["sex"]], "noise": "uniform", "rho": 0.1}, "noise"),
        ({"marginals": [["sex"]], "noise": "laplace", "sigma": 2}, "scale"),
    ],
)
def test_bad_requests_are_refused_and_charge_nothing(
    client: TestClient, api: ApiHelper, database: Database, body: dict[str, Any], fragment: str
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements", json=body, headers=tenant["headers"]
    )
    assert response.status_code == 422, response.text
    assert fragment in json.dumps(response.json()).lower()
    assert ledger_units(database, dataset["id"]) == []


def test_insufficient_budget_is_409_and_charges_nothing(
    client: TestClient, api: ApiHelper, database: Database
) -> None:
    tenant, dataset = api.tenant_with_grant(0.1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.2},
        headers=tenant["headers"],
    )
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "insufficient_budget"
    assert error["rho_remaining"] == pytest.approx(0.1)
    assert ledger_units(database, dataset["id"]) == []


def test_model_too_large_is_refused_before_charging(api: ApiHelper, database: Database) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    with database.session() as session:
        with pytest.raises(measurement_service.ModelTooLargeRequest) as refused:
            measurement_service.submit(
                session,
                tenant_id=tenant["id"],
                dataset_id=dataset["id"],
                domain=Domain.from_sizes({"sex": 2, "age": 5}),
                kind="measure",
                params={"marginals": [["sex", "age"]]},
                rho_units_total=UNITS_PER_RHO // 10,
                attribute_sets=[("sex", "age")],
                max_model_cells=5,
                idempotency_key=None,
                body_hash="x",
                description="test",
            )
        session.rollback()
    assert refused.value.details["model_cells"] == 10
    assert ledger_units(database, dataset["id"]) == []


def test_marginal_over_the_cell_cap_is_refused(
    client: TestClient, api: ApiHelper, settings: Settings, database: Database
) -> None:
    tenant = api.create_tenant()
    schema = {f"a{i}": 100 for i in range(4)}
    csv = ",".join(schema) + "\n" + ",".join("1" for _ in schema) + "\n"
    dataset = api.upload_dataset(csv, schema)
    api.grant(dataset["id"], tenant["id"], 1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [list(schema)], "rho": 0.1},
        headers=tenant["headers"],
    )
    assert response.status_code == 422
    assert str(settings.max_marginal_cells) in response.json()["error"]["message"]
    assert ledger_units(database, dataset["id"]) == []


def test_admin_key_cannot_buy_measurements(client: TestClient, api: ApiHelper) -> None:
    _tenant, dataset = api.tenant_with_grant(1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.1},
        headers=api.admin,
    )
    assert response.status_code == 403


def test_other_tenants_jobs_and_measurements_are_404(client: TestClient, api: ApiHelper) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    stranger = api.create_tenant()
    job_id = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.1},
        headers=tenant["headers"],
    ).json()["job_id"]
    assert client.get(f"/v1/jobs/{job_id}", headers=stranger["headers"]).status_code == 404
    assert client.get(f"/v1/jobs/{job_id}", headers=tenant["headers"]).status_code == 200
    listing = client.get(f"/v1/datasets/{dataset['id']}/measurements", headers=stranger["headers"])
    assert listing.status_code == 404


def test_a_job_that_fails_before_drawing_noise_is_refunded(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    job_id = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex"]], "rho": 0.1},
        headers=tenant["headers"],
    ).json()["job_id"]
    with database.unit_of_work() as session:  # break the job: its marginal no longer exists
        job = session.get(Job, job_id)
        job.params = {**job.params, "marginals": [["gone"]]}
    run_jobs(database, settings)
    job = client.get(f"/v1/jobs/{job_id}", headers=tenant["headers"]).json()
    assert job["status"] == "failed"
    assert job["error"]
    assert sum(ledger_units(database, dataset["id"])) == 0
    with database.read_only() as session:
        assert session.query(MeasurementRecord).filter_by(job_id=job_id).count() == 0
