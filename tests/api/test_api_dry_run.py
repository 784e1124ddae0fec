"""`?dry_run=true` on measurements and mechanisms: the cost and accuracy, nothing charged."""

from __future__ import annotations

from fractions import Fraction

import pytest
from conftest import ADMIN_HEADERS
from sqlalchemy import func, select

from app.db import Job, LedgerEntry
from app.privacy.accounting import epsilon_from_rho
from app.privacy.expected_error import discrete_gaussian_abs_mean, discrete_laplace_abs_mean
from app.privacy.mechanisms.budget import split_round
from app.services.mechanisms import SAFETY


def counts(database, dataset_id: str) -> tuple[int, int]:
    """(ledger lines, jobs) of a dataset."""
    with database.read_only() as session:
        entries = session.scalar(
            select(func.count())
            .select_from(LedgerEntry)
            .where(LedgerEntry.dataset_id == dataset_id)
        )
        jobs = session.scalar(
            select(func.count()).select_from(Job).where(Job.dataset_id == dataset_id)
        )
    return int(entries or 0), int(jobs or 0)


def test_measurement_dry_run_prices_exactly_and_writes_nothing(client, api, database) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    url = f"/v1/datasets/{dataset['id']}/measurements"
    body = {"marginals": [["sex"], ["sex", "age"]], "noise": "gaussian", "rho": 0.25}
    response = client.post(
        url, params={"dry_run": "true", "delta": 1e-5}, json=body, headers=tenant["headers"]
    )
    assert response.status_code == 200, response.text
    estimate = response.json()
    assert counts(database, dataset["id"]) == (0, 0)
    assert estimate["dry_run"] is True
    assert (estimate["rho_exact"], estimate["rho"]) == ("0.25", 0.25)
    assert estimate["epsilon"] == pytest.approx(epsilon_from_rho(0.25, 1e-5))
    assert (estimate["rho_remaining_before"], estimate["rho_remaining_exact"]) == (1.0, "0.75")
    assert estimate["affordable"] is True
    sigma = estimate["sigma"]
    assert Fraction(2, 2) / Fraction(sigma) ** 2 <= Fraction(1, 4)  # k/(2σ²) within ρ
    per_cell = discrete_gaussian_abs_mean(sigma)
    assert [(m["attributes"], m["cells"]) for m in estimate["marginals"]] == [
        (["sex"], 2),
        (["sex", "age"], 10),
    ]
    for marginal in estimate["marginals"]:
        assert marginal["expected_abs_error_per_cell"] == pytest.approx(per_cell)
        assert marginal["expected_l1_error"] == pytest.approx(per_cell * marginal["cells"])
    assert estimate["model_cells"] == 10

    # The real request is charged what the dry run said, with the same σ.
    real = client.post(url, json=body, headers=tenant["headers"])
    assert real.status_code == 202
    assert (real.json()["rho_charged_exact"], real.json()["sigma"]) == ("0.25", sigma)
    again = client.post(url, params={"dry_run": True}, json=body, headers=tenant["headers"])
    assert again.json()["rho_remaining_before"] == 0.75


def test_laplace_dry_run_from_a_scale_and_an_unaffordable_one(client, api, database) -> None:
    tenant, dataset = api.tenant_with_grant(0.01)
    url = f"/v1/datasets/{dataset['id']}/measurements"
    response = client.post(
        url,
        params={"dry_run": True},
        json={"marginals": [["age"]], "noise": "laplace", "scale": 2.0},
        headers=tenant["headers"],
    )
    assert response.status_code == 200
    estimate = response.json()
    assert estimate["scale"] == 2.0 and "sigma" not in estimate
    assert estimate["rho_exact"] == "0.125"  # (1/b)²/2
    assert estimate["marginals"][0]["expected_abs_error_per_cell"] == pytest.approx(
        discrete_laplace_abs_mean(2.0)
    )
    # More than the grant holds: still a 200 answer, flagged, and nothing charged.
    assert estimate["affordable"] is False
    assert estimate["rho_remaining_exact"] == "-0.115"
    assert counts(database, dataset["id"]) == (0, 0)


def test_dry_run_refuses_what_the_real_request_refuses(client, api) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    other = api.create_tenant()
    url = f"/v1/datasets/{dataset['id']}/measurements"
    body = {"marginals": [["sex"]], "rho": 0.1}
    params = {"dry_run": True}
    assert client.post(url, params=params, json=body).status_code == 401
    assert client.post(url, params=params, json=body, headers=ADMIN_HEADERS).status_code == 403
    hidden = client.post(url, params=params, json=body, headers=other["headers"])
    assert hidden.status_code == 404
    bad = client.post(
        url, params=params, json={"marginals": [["nope"]], "rho": 0.1}, headers=tenant["headers"]
    )
    assert bad.status_code == 422 and "nope" in bad.json()["error"]["message"]
    bad_delta = client.post(
        url, params={"dry_run": True, "delta": 2}, json=body, headers=tenant["headers"]
    )
    assert bad_delta.status_code == 422


def test_mechanism_dry_runs_give_their_schedule(client, api, database) -> None:
    tenant, dataset = api.tenant_with_grant(1)
    base = f"/v1/datasets/{dataset['id']}/mechanisms"
    mwem = client.post(
        f"{base}/mwem",
        params={"dry_run": True},
        json={"rho": 0.5, "workload": [["sex", "age"]], "rounds": 4},
        headers=tenant["headers"],
    )
    assert mwem.status_code == 200, mwem.text
    estimate = mwem.json()
    sigma, epsilon = split_round(0.5 * SAFETY / 4, 0.9)
    assert (estimate["mechanism"], estimate["rounds"]) == ("mwem", 4)
    assert estimate["sigma"] == pytest.approx(sigma)
    assert estimate["epsilon_per_selection"] == pytest.approx(epsilon)
    assert estimate["marginals"][0]["cells"] == 10
    assert estimate["marginals"][0]["expected_l1_error"] == pytest.approx(
        10 * discrete_gaussian_abs_mean(sigma)
    )

    aim = client.post(
        f"{base}/aim", params={"dry_run": True}, json={"rho": 0.5}, headers=tenant["headers"]
    )
    assert aim.status_code == 200, aim.text
    estimate = aim.json()
    assert estimate["rounds_at_most"] == 4 * 2  # T = 4·d
    assert [m["attributes"] for m in estimate["oneway"]] == [["age"], ["sex"]]
    assert estimate["rho_exact"] == "0.5" and estimate["rho_remaining_exact"] == "0.5"
    assert counts(database, dataset["id"]) == (0, 0)


def test_dry_run_is_documented_in_openapi(client) -> None:
    document = client.get("/openapi.json").json()
    for path in (
        "/v1/datasets/{dataset_id}/measurements",
        "/v1/datasets/{dataset_id}/mechanisms/aim",
        "/v1/datasets/{dataset_id}/mechanisms/mwem",
    ):
        operation = document["paths"][path]["post"]
        assert "dry_run" in [p["name"] for p in operation["parameters"]]
        assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/DryRunOut"
        }


def test_a_mechanism_s_dry_run_expects_a_run_time_from_public_sizes_only(client, api) -> None:
    from app.services import run_time

    tenant = api.create_tenant()
    few = api.upload_dataset()  # five rows
    many = api.upload_dataset("sex,age\n" + "F,23\nM,41\nM,70\n" * 400)  # same schema
    answers = []
    for dataset in (few, many):
        api.grant(dataset["id"], tenant["id"], 1)
        response = client.post(
            f"/v1/datasets/{dataset['id']}/mechanisms/aim",
            params={"dry_run": True},
            json={"rho": 0.5},
            headers=tenant["headers"],
        )
        assert response.status_code == 200, response.text
        answers.append(response.json())
    # The rows never enter: two tables of one schema and different sizes, one estimate.
    assert answers[0]["expected_seconds"] == answers[1]["expected_seconds"]
    estimate = answers[0]
    basis = estimate["run_time"]
    # sex × age: the largest model is their one 10-cell marginal, and the typical one too
    assert basis["model_cells_at_most"] == basis["expected_model_cells"] == 10
    assert basis["selection_rounds"] == 8
    final_fit = 10 * run_time.FINAL_ADMM_ITERATIONS * 0.4e-6  # ADMM at 10 cells
    assert basis["final_fit_seconds"] == pytest.approx(final_fit, abs=0.05)
    share = run_time.ROUND_MODEL_SHARE * run_time.ROUND_FIT_ITERATIONS
    per_round = 10 * share * 0.4e-6 + run_time.SELECTION_SECONDS
    assert basis["seconds_per_round"] == pytest.approx(per_round, abs=1e-3)
    assert estimate["expected_seconds"] == pytest.approx(8 * per_round + final_fit, abs=0.1)
    assert basis["at_most_seconds"] == estimate["expected_seconds"]

    # A larger model (the cap allows it) is expected to take longer; MWEM has one too.
    wide = api.upload_dataset(
        "a,b,c\n0,1,2\n",
        {
            "attributes": [
                {"name": name, "type": "categorical", "values": [str(v) for v in range(40)]}
                for name in ("a", "b", "c")
            ]
        },
    )
    api.grant(wide["id"], tenant["id"], 1)
    timed = {}
    for cap in (2000, 64000):
        response = client.post(
            f"/v1/datasets/{wide['id']}/mechanisms/mwem",
            params={"dry_run": True},
            json={"rho": 0.5, "max_model_cells": cap, "workload": [["a", "b"], ["b", "c"]]},
            headers=tenant["headers"],
        )
        assert response.status_code == 200, response.text
        timed[cap] = response.json()
    assert timed[2000]["run_time"]["model_cells_at_most"] == 2000  # the cap
    assert timed[64000]["run_time"]["model_cells_at_most"] == 2 * 1600  # a-b, b-c
    assert timed[64000]["run_time"]["at_most_seconds"] > timed[2000]["run_time"]["at_most_seconds"]
    assert timed[2000]["expected_seconds"] > 0
