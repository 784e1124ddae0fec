"""Every cost at the dataset's sensitivity k (rows per privacy unit), over HTTP, both backends.

The same request on a dataset whose unit holds at most 3 rows costs 9 times the ρ of
one whose unit is a row (a σ or b given), or gets 3 times the σ for the same ρ: the
measure route, its dry run, the ledger and budget routes, the worker's gate, and the
AIM and MWEM rounds (their σ ×3, their selection's ε the same with its score
sensitivity ×3). The datasets here get their unit by setting the two columns upload
fills, so that the accounting is tested on the very same records at k = 1 and k = 3.
"""

from __future__ import annotations

import io
import json
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from conftest import ADMIN_HEADERS, ApiHelper, job_row, unique_name
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, update

from app.config import Settings
from app.db import Database, Dataset, LedgerEntry, MeasurementRecord, RecordAccess
from app.privacy.expected_error import discrete_gaussian_abs_mean
from app.privacy.mechanisms.budget import split_round
from app.services import mechanisms as mechanism_service
from app.services import refunds
from app.services.rho import UNITS_PER_RHO
from app.worker import Worker

SCHEMA: dict[str, Any] = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
        {"name": "smoker", "type": "categorical", "values": ["no", "yes"]},
    ]
}


def table(rows: int = 400) -> str:
    """A seeded table of `rows` records in the schema's values."""
    rng = np.random.default_rng(21)
    sex = rng.choice(["F", "M"], rows)
    age = rng.integers(0, 100, rows)
    smoker = np.where(rng.random(rows) < 0.2 + 0.2 * (sex == "M"), "yes", "no")
    lines = ["sex,age,smoker", *(f"{s},{a},{m}" for s, a, m in zip(sex, age, smoker, strict=True))]
    return "\n".join(lines) + "\n"


def set_unit(database: Database, dataset_id: str, column: str | None, k: int) -> None:
    with database.unit_of_work() as session:
        session.execute(
            update(Dataset)
            .where(Dataset.id == dataset_id)
            .values(unit_column=column, unit_max_rows=k)
        )


@pytest.fixture(scope="module")
def pair(api: ApiHelper, database: Database) -> dict[int, dict[str, Any]]:
    """The same records twice: a unit is a row (k = 1), and a unit holds ≤ 3 rows (k = 3)."""
    csv = table()
    row_level = api.upload_dataset(csv, SCHEMA)
    unit_level = api.upload_dataset(csv, SCHEMA)
    set_unit(database, unit_level["id"], "person", 3)
    return {1: row_level, 3: unit_level}


def tenant_on(api: ApiHelper, datasets: dict[int, dict[str, Any]], rho: float = 5) -> Any:
    tenant = api.create_tenant()
    for dataset in datasets.values():
        api.grant(dataset["id"], tenant["id"], rho)
    return tenant


def run_jobs(database: Database, settings: Settings) -> int:
    return Worker(database, settings, poll_seconds=0.01).run_until_idle()


def test_the_dataset_shows_its_privacy_unit_to_everyone(
    client: TestClient, api: ApiHelper, pair: dict[int, dict[str, Any]]
) -> None:
    tenant = tenant_on(api, pair)
    for headers in (ADMIN_HEADERS, tenant["headers"]):
        one = client.get(f"/v1/datasets/{pair[1]['id']}", headers=headers).json()
        three = client.get(f"/v1/datasets/{pair[3]['id']}", headers=headers).json()
        # like the dataset's other unset fields, left out: a unit is one row
        assert "privacy_unit" not in one
        assert three["privacy_unit"] == {"column": "person", "max_rows": 3}
        listed = {d["id"]: d for d in client.get("/v1/datasets", headers=headers).json()}
        assert "privacy_unit" not in listed[pair[1]["id"]]
        assert listed[pair[3]["id"]]["privacy_unit"] == {"column": "person", "max_rows": 3}


def test_a_given_rho_buys_three_times_the_sigma_at_the_same_charge(
    client: TestClient,
    api: ApiHelper,
    pair: dict[int, dict[str, Any]],
    database: Database,
    settings: Settings,
) -> None:
    tenant = tenant_on(api, pair)
    body = {"marginals": [["sex"], ["sex", "age"]], "noise": "gaussian", "rho": 0.25}
    accepted = {}
    for k, dataset in pair.items():
        url = f"/v1/datasets/{dataset['id']}/measurements"
        dry = client.post(url, params={"dry_run": True}, json=body, headers=tenant["headers"])
        assert dry.status_code == 200, dry.text
        response = client.post(url, json=body, headers=tenant["headers"])
        assert response.status_code == 202, response.text
        accepted[k] = response.json()
        assert accepted[k]["rho_charged_exact"] == "0.25"
        # the dry run said what the real request got
        assert (dry.json()["sigma"], dry.json()["sensitivity"]) == (accepted[k]["sigma"], k)
        per_cell = discrete_gaussian_abs_mean(accepted[k]["sigma"])
        assert dry.json()["marginals"][0]["expected_abs_error_per_cell"] == pytest.approx(per_cell)
        # exact: 2 marginals of sensitivity k at σ cost at most ρ, and ρ is spent
        sigma = Fraction(accepted[k]["sigma"])
        assert Fraction(2 * k * k, 2) / sigma**2 <= Fraction(1, 4)
    assert accepted[3]["sigma"] == pytest.approx(3 * accepted[1]["sigma"], rel=1e-12)

    assert run_jobs(database, settings) >= 2
    with database.read_only() as session:
        for answer in accepted.values():
            job = job_row(database, answer["job_id"])
            assert job.status == "succeeded", job.error
            scales = session.scalars(
                select(MeasurementRecord.scale).where(MeasurementRecord.job_id == job.id)
            ).all()
            assert scales == [answer["sigma"]] * 2
            # the gate recorded the whole charge as used, exactly
            accesses = session.scalars(
                select(RecordAccess).where(RecordAccess.job_id == job.id)
            ).all()
            assert [(a.exact_rho, a.rho_units) for a in accesses] == [("1/4", UNITS_PER_RHO // 4)]


@pytest.mark.parametrize(
    ("noise", "scale", "row_exact", "unit_exact"),
    [
        # 2 marginals, σ = 10: 2·1/(2·100) = 0.01 per row, 2·9/(2·100) = 0.09 per unit of 3
        ("gaussian", 10.0, "0.01", "0.09"),
        # 1 marginal, b = 2: (1/2)²/2 = 0.125, (3/2)²/2 = 1.125
        ("laplace", 2.0, "0.125", "1.125"),
    ],
)
def test_a_given_scale_costs_nine_times_the_rho(
    client: TestClient,
    api: ApiHelper,
    pair: dict[int, dict[str, Any]],
    database: Database,
    noise: str,
    scale: float,
    row_exact: str,
    unit_exact: str,
) -> None:
    tenant = tenant_on(api, pair)
    marginals = [["sex"], ["age"]] if noise == "gaussian" else [["smoker"]]
    body = {
        "marginals": marginals,
        "noise": noise,
        ("sigma" if noise == "gaussian" else "scale"): scale,
    }
    expected = {1: row_exact, 3: unit_exact}
    for k, dataset in pair.items():
        url = f"/v1/datasets/{dataset['id']}/measurements"
        dry = client.post(url, params={"dry_run": True}, json=body, headers=tenant["headers"])
        assert dry.status_code == 200, dry.text
        assert (dry.json()["rho_exact"], dry.json()["sensitivity"]) == (expected[k], k)
        response = client.post(url, json=body, headers=tenant["headers"])
        assert response.status_code == 202, response.text
        assert response.json()["rho_charged_exact"] == expected[k]
        # The ledger's line is the exact cost; the budget route counts it, per unit.
        lines = client.get(f"/v1/datasets/{dataset['id']}/ledger", headers=tenant["headers"])
        assert [line["rho_exact"] for line in lines.json()] == [expected[k]]
        budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=tenant["headers"])
        assert budget.json()["rho_spent_exact"] == expected[k]
        assert budget.json()["privacy_unit"] == (
            None if k == 1 else {"column": "person", "max_rows": 3}
        )
    with database.read_only() as session:
        units = {
            k: session.scalars(
                select(LedgerEntry.rho_units).where(
                    LedgerEntry.dataset_id == dataset["id"], LedgerEntry.tenant_id == tenant["id"]
                )
            ).one()
            for k, dataset in pair.items()
        }
    assert units[3] == 9 * units[1]


def test_a_grant_too_small_at_k_is_refused_though_enough_per_row(
    client: TestClient, api: ApiHelper, pair: dict[int, dict[str, Any]]
) -> None:
    tenant = tenant_on(api, pair, rho=0.05)
    body = {"marginals": [["sex"], ["age"]], "noise": "gaussian", "sigma": 10.0}  # 0.01 / 0.09
    row = client.post(
        f"/v1/datasets/{pair[1]['id']}/measurements", json=body, headers=tenant["headers"]
    )
    assert row.status_code == 202, row.text
    unit = client.post(
        f"/v1/datasets/{pair[3]['id']}/measurements", json=body, headers=tenant["headers"]
    )
    assert unit.status_code == 409, unit.text
    assert unit.json()["error"]["code"] == "insufficient_budget"


def test_a_job_priced_below_its_datasets_sensitivity_draws_nothing(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
) -> None:
    # Priced at k = 1, then the dataset says k = 3 (which upload never does): the worker
    # refuses before its gate, records no access and refunds the whole charge.
    dataset = api.upload_dataset(table(50), SCHEMA)
    tenant = tenant_on(api, {1: dataset})
    body = {"marginals": [["sex"]], "noise": "gaussian", "rho": 0.5}
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements", json=body, headers=tenant["headers"]
    )
    assert response.status_code == 202, response.text
    set_unit(database, dataset["id"], "person", 3)
    run_jobs(database, settings)
    job = job_row(database, response.json()["job_id"])
    assert job.status == "failed" and "LedgerInvariantViolated" in (job.error or "")
    with database.read_only() as session:
        assert not session.scalars(select(RecordAccess).where(RecordAccess.job_id == job.id)).all()
        assert sorted(
            session.scalars(select(LedgerEntry.rho_units).where(LedgerEntry.job_id == job.id)).all()
        ) == [-UNITS_PER_RHO // 2, UNITS_PER_RHO // 2]


@pytest.mark.parametrize("kind", ["aim", "mwem"])
def test_mechanism_dry_runs_give_three_times_the_sigma_and_the_same_epsilon(
    client: TestClient, api: ApiHelper, pair: dict[int, dict[str, Any]], kind: str
) -> None:
    tenant = tenant_on(api, pair)
    body: dict[str, Any] = {"rho": 0.4}
    if kind == "mwem":
        body["rounds"] = 3
    estimates = {}
    for k, dataset in pair.items():
        response = client.post(
            f"/v1/datasets/{dataset['id']}/mechanisms/{kind}",
            params={"dry_run": True},
            json=body,
            headers=tenant["headers"],
        )
        assert response.status_code == 200, response.text
        estimates[k] = response.json()
        assert estimates[k]["sensitivity"] == k
        assert estimates[k]["rho_exact"] == "0.4"
    assert estimates[3]["sigma"] == pytest.approx(3 * estimates[1]["sigma"], rel=1e-12)
    assert estimates[3]["epsilon_per_selection"] == pytest.approx(
        estimates[1]["epsilon_per_selection"], rel=1e-12
    )
    if kind == "mwem":
        run_rho = 0.4 * mechanism_service.SAFETY
        assert (estimates[3]["sigma"], estimates[3]["epsilon_per_selection"]) == split_round(
            run_rho / 3, 0.9, 3
        )


@pytest.mark.parametrize("kind", ["mwem", "aim"])
def test_mechanism_rounds_are_priced_and_gated_at_k(
    client: TestClient,
    api: ApiHelper,
    pair: dict[int, dict[str, Any]],
    database: Database,
    settings: Settings,
    kind: str,
) -> None:
    tenant = tenant_on(api, pair)
    body: dict[str, Any] = {"rho": 2, "workload": [["sex", "smoker"], ["age", "smoker"]]}
    if kind == "mwem":
        body["rounds"] = 3
    url = f"/v1/datasets/{pair[3]['id']}/mechanisms/{kind}"
    estimate = client.post(url, params={"dry_run": True}, json=body, headers=tenant["headers"])
    response = client.post(url, json=body, headers=tenant["headers"])
    assert response.status_code == 202, response.text
    assert run_jobs(database, settings) >= 1
    job = job_row(database, response.json()["job_id"])
    assert job.status == "succeeded", job.error
    with database.read_only() as session:
        rounds = mechanism_service.stored_rounds(session, job.id)
        accesses = session.scalars(
            select(RecordAccess)
            .where(RecordAccess.job_id == job.id)
            .order_by(RecordAccess.sequence)
        ).all()
    assert rounds and all(r.sensitivity == 3 for r in rounds)
    # The gate recorded each round's exact cost at k = 3: k²/(2σ²) + ε²/8.
    assert [Fraction(a.exact_rho) for a in accesses] == [r.exact_cost for r in rounds]
    for r in rounds:
        measured = Fraction(9, 2) / Fraction(r.sigma) ** 2
        selected = Fraction(r.epsilon) ** 2 / 8 if r.epsilon > 0 else 0
        assert r.exact_cost == measured + selected
        if r.selection is not None:  # the scores' sensitivity is 3 × the weight's
            assert r.selection.sensitivity % 3 == 0 and r.selection.sensitivity >= 3
    spent = sum((r.exact_cost for r in rounds), Fraction(0))
    assert Fraction(2) * Fraction(999, 1000) < spent <= 2
    # A job whose rounds were stored before accesses were recorded (no access rows) has
    # used what its stored rounds cost — at their k, which each round stored.
    with database.unit_of_work() as session:
        session.execute(
            update(MeasurementRecord)
            .where(MeasurementRecord.job_id == job.id)
            .values(access_id=None)
        )
        session.execute(delete(RecordAccess).where(RecordAccess.job_id == job.id))
    with database.read_only() as session:
        used = refunds.used_units(session, job_row(database, job.id))
    assert used == -(-spent.numerator * UNITS_PER_RHO // spent.denominator)
    if kind == "mwem":  # every round but the last at the dry run's σ and ε
        sigma, epsilon = estimate.json()["sigma"], estimate.json()["epsilon_per_selection"]
        assert [(r.sigma, r.epsilon) for r in rounds[:-1]] == [(sigma, epsilon)] * 2
        assert rounds[-1].sigma == pytest.approx(sigma, rel=1e-9)


def upload_with_unit(
    client: TestClient, csv: str, unit: dict[str, Any], expect: int = 201
) -> dict[str, Any]:
    response = client.post(
        "/v1/datasets",
        data={
            "schema": json.dumps(SCHEMA),
            "name": unique_name("units"),
            "privacy_unit": json.dumps(unit),
        },
        files={"file": ("data.csv", io.BytesIO(csv.encode()), "text/csv")},
        headers=ADMIN_HEADERS,
    )
    assert response.status_code == expect, response.text
    return response.json()  # type: ignore[no-any-return]


def test_an_upload_with_a_privacy_unit_prices_at_its_max_rows(
    client: TestClient, api: ApiHelper
) -> None:
    # Two rows per person on average, some with five: uploaded with max_rows = 2, every
    # measurement is priced at sensitivity 2 (4 times the ρ for the same σ).
    rng = np.random.default_rng(7)
    lines = ["person,sex,age,smoker"]
    for person in range(120):
        sex, smoker = rng.choice(["F", "M"]), rng.choice(["no", "yes"])
        for _ in range(5 if person % 10 == 0 else int(rng.integers(1, 4))):
            lines.append(f"p{person},{sex},{int(rng.integers(0, 100))},{smoker}")
    dataset = upload_with_unit(client, "\n".join(lines) + "\n", {"column": "person", "max_rows": 2})
    assert dataset["privacy_unit"] == {"column": "person", "max_rows": 2}
    tenant = tenant_on(api, {2: dataset})
    shown = client.get(f"/v1/datasets/{dataset['id']}", headers=tenant["headers"]).json()
    assert shown["privacy_unit"] == {"column": "person", "max_rows": 2}
    url = f"/v1/datasets/{dataset['id']}/measurements"
    body = {"marginals": [["sex"], ["age"]], "noise": "gaussian", "sigma": 10.0}
    response = client.post(url, json=body, headers=tenant["headers"])
    assert response.status_code == 202, response.text
    assert response.json()["rho_charged_exact"] == "0.04"  # 2 · 2²/(2·10²)
    by_rho = client.post(
        url,
        json={"marginals": [["smoker"]], "noise": "gaussian", "rho": 0.5},
        headers=tenant["headers"],
    )
    assert by_rho.json()["sigma"] == pytest.approx(2.0, rel=1e-12)  # √(2²/(2·0.5))


def test_error_bounds_follow_the_larger_sigma(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    csv = table(300)
    pair = {1: api.upload_dataset(csv, SCHEMA), 3: api.upload_dataset(csv, SCHEMA)}
    set_unit(database, pair[3]["id"], "person", 3)
    tenant = tenant_on(api, pair)
    body = {"marginals": [["sex", "smoker"]], "noise": "gaussian", "rho": 0.2}
    sigmas = {}
    for k, dataset in pair.items():
        url = f"/v1/datasets/{dataset['id']}/measurements"
        sigmas[k] = client.post(url, json=body, headers=tenant["headers"]).json()["sigma"]
    run_jobs(database, settings)
    cells = 4
    for k, dataset in pair.items():
        answer = client.get(
            f"/v1/datasets/{dataset['id']}/marginals",
            params={"attrs": "sex,smoker"},
            headers=tenant["headers"],
        ).json()
        bound = answer["error_bound"]
        assert bound["method"] == "AIM theorem 2"
        # Theorem 2 at the measurement's σ (plus the model's distance to it): at k = 3
        # at least the noise part of a σ three times the k = 1 one.
        lam = math.sqrt(2 * math.log(1 / 0.05))
        noise_part = (math.sqrt(2 / math.pi) * cells + lam * math.sqrt(cells)) * sigmas[1]
        assert sigmas[k] == pytest.approx(k * sigmas[1], rel=1e-12)
        assert bound["l1"] >= k * noise_part * (1 - 1e-9)
