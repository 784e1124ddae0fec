"""The dataset's estimator over HTTP: PATCH (admin; 404/403/422), the refit job that spends
nothing, GET /model naming the estimator of each version, and a cgm-em refit running EM
after the solver (its iterations in GET /model) — on both backends."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import ADMIN_HEADERS, ApiHelper, unique_name
from fastapi.testclient import TestClient
from test_api_answers import SCHEMA, _csv

from app.config import Settings
from app.db import Database, Job, LedgerEntry
from app.pgm import cgm
from app.pgm.estimators import FitRun
from app.pgm.model import GraphicalModel
from app.services import models as model_service
from app.worker import Worker

LAPLACE_MARGINALS = [["sex", "age"], ["race", "sex"], ["hours"]]


def run_jobs(database: Database, settings: Settings) -> int:
    return Worker(database, settings, poll_seconds=0.01).run_until_idle()


def ledger_lines(database: Database, dataset_id: str) -> list[tuple[int, str, int]]:
    with database.read_only() as session:
        return [
            (e.id, e.kind, e.rho_units)
            for e in session.query(LedgerEntry)
            .filter(LedgerEntry.dataset_id == dataset_id)
            .order_by(LedgerEntry.id)
        ]


def _patch(client: TestClient, dataset_id: str, body: Any, headers=ADMIN_HEADERS):
    return client.patch(f"/v1/datasets/{dataset_id}", json=body, headers=headers)


def _model(client: TestClient, dataset_id: str, headers) -> dict[str, Any]:
    response = client.get(f"/v1/datasets/{dataset_id}/model", headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def measured(api: ApiHelper, client: TestClient, database: Database, settings: Settings):
    """A dataset with Laplace measurements fitted once (by mle, the default)."""
    tenant = api.create_tenant()
    dataset = api.upload_dataset(_csv(700, seed=3), SCHEMA, name=unique_name("estimator"))
    api.grant(dataset["id"], tenant["id"], 2.0)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": LAPLACE_MARGINALS, "noise": "laplace", "rho": 0.5},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    assert run_jobs(database, settings) == 1
    return {"tenant": tenant, "dataset_id": dataset["id"], "headers": tenant["headers"]}


def test_new_datasets_use_mle_and_say_so(api: ApiHelper, client: TestClient) -> None:
    tenant, dataset = api.tenant_with_grant(1.0)
    assert dataset["estimator"] == "mle"
    seen = client.get(f"/v1/datasets/{dataset['id']}", headers=tenant["headers"]).json()
    assert seen["estimator"] == "mle"


def test_patch_refuses_tenants_unknown_datasets_and_bad_bodies(
    api: ApiHelper, client: TestClient
) -> None:
    tenant, dataset = api.tenant_with_grant(1.0)
    forbidden = _patch(client, dataset["id"], {"estimator": "cgm-em"}, headers=tenant["headers"])
    assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "forbidden"
    missing = _patch(client, f"{'0' * 8}-0000-0000-0000-{'0' * 12}", {"estimator": "cgm-em"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    for body in ({}, {"estimator": "median"}, {"estimator": "mle", "solver": "admm"}):
        response = _patch(client, dataset["id"], body)
        assert response.status_code == 422, (body, response.text)
        assert "error" in response.json()
    # None of that changed the setting.
    assert (
        client.get(f"/v1/datasets/{dataset['id']}", headers=ADMIN_HEADERS).json()["estimator"]
        == "mle"
    )


def test_patch_without_measurements_sets_the_estimator_and_queues_nothing(
    api: ApiHelper, client: TestClient, database: Database
) -> None:
    dataset = api.upload_dataset(_csv(50), SCHEMA, name=unique_name("unmeasured"))
    response = _patch(client, dataset["id"], {"estimator": "cgm-em"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["estimator"] == "cgm-em" and "refit_job_id" not in body
    with database.read_only() as session:
        assert session.query(Job).filter(Job.dataset_id == dataset["id"]).count() == 0


def test_changing_the_estimator_refits_for_free_and_the_model_names_it(
    client: TestClient, measured: dict[str, Any], database: Database, settings: Settings
) -> None:
    dataset_id, headers = measured["dataset_id"], measured["headers"]
    before = _model(client, dataset_id, headers)
    assert before["estimator"] == "mle"
    ledger_before = ledger_lines(database, dataset_id)
    budget_before = client.get(f"/v1/datasets/{dataset_id}/budget", headers=headers).json()

    response = _patch(client, dataset_id, {"estimator": "cgm-em"})
    assert response.status_code == 200, response.text
    job_id = response.json()["refit_job_id"]
    assert response.json()["estimator"] == "cgm-em"
    job = client.get(f"/v1/jobs/{job_id}", headers=ADMIN_HEADERS).json()
    assert job["status"] == "queued"
    # The tenant who paid for the measurements does not see the admin's refit job.
    assert client.get(f"/v1/jobs/{job_id}", headers=headers).status_code == 404
    assert run_jobs(database, settings) == 1

    job = client.get(f"/v1/jobs/{job_id}", headers=ADMIN_HEADERS).json()
    assert job["status"] == "succeeded", job
    after = _model(client, dataset_id, headers)
    assert after["version"] == before["version"] + 1 == job["model_version"]
    assert after["estimator"] == "cgm-em"
    assert after["measurement_count"] == before["measurement_count"]
    # Nothing charged, nothing refunded, nothing drawn.
    assert ledger_lines(database, dataset_id) == ledger_before
    budget_after = client.get(f"/v1/datasets/{dataset_id}/budget", headers=headers).json()
    assert budget_after["rho_spent_exact"] == budget_before["rho_spent_exact"]
    measurements = client.get(f"/v1/datasets/{dataset_id}/measurements", headers=headers).json()
    assert len(measurements) == len(LAPLACE_MARGINALS)
    # cgm-em starts at mle's optimum, a fixed point of its EM: the same model up to the
    # solver's tolerance, and never a less likely one.
    marginal = client.get(
        f"/v1/datasets/{dataset_id}/marginals", params={"attrs": "sex,age"}, headers=headers
    ).json()
    assert marginal["model_version"] == after["version"]
    with database.read_only() as session:
        mle = model_service.load_model(session, dataset_id, before["version"])
    assert np.abs(np.array(marginal["counts"]) - mle.marginal(("sex", "age")).ravel()).max() < 1.0
    assert after["loss"] <= before["loss"] * (1 + 1e-6)

    # Setting it again changes nothing; setting it back refits again, by mle.
    same = _patch(client, dataset_id, {"estimator": "cgm-em"}).json()
    assert "refit_job_id" not in same
    assert run_jobs(database, settings) == 0
    back = _patch(client, dataset_id, {"estimator": "mle"}).json()
    assert back["refit_job_id"]
    assert run_jobs(database, settings) == 1
    latest = _model(client, dataset_id, headers)
    assert latest["version"] == after["version"] + 1 and latest["estimator"] == "mle"
    assert ledger_lines(database, dataset_id) == ledger_before


def test_new_measurements_on_a_cgm_em_dataset_are_fitted_by_cgm_em(
    api: ApiHelper, client: TestClient, database: Database, settings: Settings
) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(_csv(500, seed=9), SCHEMA, name=unique_name("cgm-first"))
    api.grant(dataset["id"], tenant["id"], 2.0)
    assert _patch(client, dataset["id"], {"estimator": "cgm-em"}).status_code == 200
    for noise in ("laplace", "gaussian"):  # Gaussian releases get the same latent treatment
        response = client.post(
            f"/v1/datasets/{dataset['id']}/measurements",
            json={"marginals": [["sex", "race"], ["age"]], "noise": noise, "rho": 0.2},
            headers=tenant["headers"],
        )
        assert response.status_code == 202, response.text
        assert run_jobs(database, settings) == 1
        model = _model(client, dataset["id"], tenant["headers"])
        assert model["estimator"] == "cgm-em"
        assert model["solver"] == "admm"


def test_a_cancelled_refit_refunds_nothing_and_fits_nothing(
    client: TestClient, measured: dict[str, Any], database: Database, settings: Settings
) -> None:
    dataset_id, headers = measured["dataset_id"], measured["headers"]
    version_before = _model(client, dataset_id, headers)["version"]
    ledger_before = ledger_lines(database, dataset_id)
    current = client.get(f"/v1/datasets/{dataset_id}", headers=ADMIN_HEADERS).json()
    other = "mle" if current["estimator"] == "cgm-em" else "cgm-em"
    job_id = _patch(client, dataset_id, {"estimator": other}).json()["refit_job_id"]
    response = client.post(f"/v1/jobs/{job_id}/cancel", headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "cancelled"
    assert run_jobs(database, settings) == 0
    assert _model(client, dataset_id, headers)["version"] == version_before
    assert ledger_lines(database, dataset_id) == ledger_before


def test_a_cgm_em_refit_runs_em_after_the_solver_and_the_model_counts_its_iterations(
    api: ApiHelper,
    client: TestClient,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker runs in this process: a spy on `cgm.refine` sees which fits take EM."""
    calls: list[tuple[int, int]] = []  # (the run's iterations before EM, after EM)
    refine = cgm.refine

    def spy(run: FitRun, model: GraphicalModel) -> GraphicalModel:
        before = len(run.losses)
        refined = refine(run, model)
        calls.append((before, len(run.losses)))
        return refined

    monkeypatch.setattr(cgm, "refine", spy)
    tenant = api.create_tenant()
    dataset = api.upload_dataset(_csv(400, seed=5), SCHEMA, name=unique_name("cgm-em-spy"))
    dataset_id, headers = dataset["id"], tenant["headers"]
    api.grant(dataset_id, tenant["id"], 2.0)
    response = client.post(
        f"/v1/datasets/{dataset_id}/measurements",
        json={"marginals": LAPLACE_MARGINALS, "noise": "laplace", "rho": 0.5},
        headers=headers,
    )
    assert response.status_code == 202, response.text
    assert run_jobs(database, settings) == 1
    assert _model(client, dataset_id, headers)["estimator"] == "mle"
    assert calls == []  # mle: the solver's optimum, no EM

    assert _patch(client, dataset_id, {"estimator": "cgm-em"}).status_code == 200
    assert run_jobs(database, settings) == 1
    after = _model(client, dataset_id, headers)
    assert after["estimator"] == "cgm-em"
    assert len(calls) == 1
    solver_iterations, total_iterations = calls[0]
    # EM ran at least one iteration after the solver's, and the stored figure counts both.
    assert total_iterations > solver_iterations >= 1
    assert after["iterations"] == total_iterations

    assert _patch(client, dataset_id, {"estimator": "mle"}).status_code == 200
    assert run_jobs(database, settings) == 1
    assert _model(client, dataset_id, headers)["estimator"] == "mle"
    assert len(calls) == 1  # back to mle: no EM


def test_a_stein_refit_shrinks_the_noisy_one_way_marginals_from_the_released_values(
    api: ApiHelper, client: TestClient, database: Database, settings: Settings
) -> None:
    """The model's age marginal after PATCH "stein" is the shrunk released age counts
    (every other measured attribute is precise), computed here from GET /measurements."""
    tenant = api.create_tenant()
    dataset = api.upload_dataset(_csv(300, seed=4), SCHEMA, name=unique_name("stein"))
    dataset_id, headers = dataset["id"], tenant["headers"]
    api.grant(dataset_id, tenant["id"], 3.0)
    for marginals, rho in (([["age"]], 0.002), ([["sex"], ["race"]], 2.0)):
        response = client.post(
            f"/v1/datasets/{dataset_id}/measurements",
            json={"marginals": marginals, "noise": "gaussian", "rho": rho},
            headers=headers,
        )
        assert response.status_code == 202, response.text
        assert run_jobs(database, settings) == 1
    before = _model(client, dataset_id, headers)
    ledger_before = ledger_lines(database, dataset_id)

    response = _patch(client, dataset_id, {"estimator": "stein"})
    assert response.status_code == 200, response.text
    assert response.json()["estimator"] == "stein" and response.json()["refit_job_id"]
    assert run_jobs(database, settings) == 1
    after = _model(client, dataset_id, headers)
    assert after["estimator"] == "stein" and after["version"] == before["version"] + 1
    assert ledger_lines(database, dataset_id) == ledger_before  # a refit spends nothing

    released = client.get(f"/v1/datasets/{dataset_id}/measurements", headers=headers).json()
    # N̂: every release's total, inverse-variance weighted (a total of n cells at σ: n·σ²)
    weights = [1.0 / (len(m["values"]) * m["sigma"] ** 2) for m in released]
    total = sum(w * sum(m["values"]) for w, m in zip(weights, released, strict=True))
    total /= sum(weights)
    (age,) = [m for m in released if m["attributes"] == ["age"]]
    values = np.array(age["values"], dtype=float)
    deviation = values - total / values.size
    factor = max(0.0, 1.0 - (values.size - 2) * age["sigma"] ** 2 / float(deviation @ deviation))
    assert factor < 1.0
    shrunk = total / values.size + factor * deviation
    assert shrunk.min() > 0  # σ ≈ 16 against about 60 rows a bin: only a 4σ draw breaks it

    def age_counts() -> np.ndarray:
        answer = client.get(
            f"/v1/datasets/{dataset_id}/marginals", params={"attrs": "age"}, headers=headers
        ).json()
        return np.array(answer["counts"], dtype=float)

    fitted = age_counts()
    shift = fitted - shrunk  # least squares under the model's total: one shift for every cell
    assert np.ptp(shift) < 0.05 * max(np.ptp(values), 1.0)
    # mle's answer from the same release is further from uniform
    assert _patch(client, dataset_id, {"estimator": "mle"}).status_code == 200
    assert run_jobs(database, settings) == 1
    assert np.ptp(fitted) < np.ptp(age_counts())
