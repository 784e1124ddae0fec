"""No poisoned model: a measurement a fit cannot use is quarantined, never fitted again.

The last good model version keeps answering; the job that owns the measurement fails
naming it; the measurement stays listed (status "quarantined", with the reason) and
charged; the next fit goes on without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import ApiHelper, job_row
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, Job, LedgerEntry
from app.services import measurements as measurement_service
from app.services import quarantine
from app.worker import Worker

INT64_MAX = np.iinfo(np.int64).max


def post_measurement(client: TestClient, world: dict[str, Any], **body: Any) -> str:
    response = client.post(
        f"/v1/datasets/{world['dataset_id']}/measurements", json=body, headers=world["headers"]
    )
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


def model_version(client: TestClient, world: dict[str, Any]) -> int:
    response = client.get(f"/v1/datasets/{world['dataset_id']}/model", headers=world["headers"])
    assert response.status_code == 200, response.text
    return int(response.json()["version"])


@pytest.fixture
def world(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> dict[str, Any]:
    """A dataset with one fitted model version (σ = 1 one-way marginals)."""
    tenant, dataset = api.tenant_with_grant(5)
    state = {"dataset_id": dataset["id"], "headers": tenant["headers"]}
    post_measurement(client, state, marginals=[["sex"], ["age"]], sigma=1.0)
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    assert model_version(client, state) == 1
    return state


def poison(database: Database, job_id: str) -> int:
    """Store, as the job's release, what an unbounded σ = 1e300 used to store:
    saturated counts at a scale no fit can weigh (accepted before issue 10)."""
    with database.unit_of_work() as session:
        job = session.get(Job, job_id)
        job.params = {**job.params, "scale": 1e300}
        record = measurement_service.store(
            session,
            access_id=None,  # a row written directly, as before accesses were recorded
            dataset_id=job.dataset_id,
            job_id=job.id,
            position=0,
            attributes=["age"],
            noise_kind="gaussian",
            scale=1e300,
            rho_units_used=1,
            values=np.array([INT64_MAX, -INT64_MAX, INT64_MAX, 3, -INT64_MAX], dtype=np.int64),
        )
        return int(record.number)  # its id in the API


def test_an_unfittable_release_is_quarantined_and_the_model_goes_on_without_it(
    client: TestClient, world: dict[str, Any], database: Database, settings: Settings
) -> None:
    poisoned_job = post_measurement(client, world, marginals=[["age"]], sigma=1.0)
    poisoned_id = poison(database, poisoned_job)
    worker = Worker(database, settings, poll_seconds=0.01)
    assert worker.run_once()
    failed = job_row(database, poisoned_job)
    assert failed.status == "failed"
    assert f"measurement {poisoned_id}" in (failed.error or "")
    assert "quarantined" in (failed.error or "")
    # The last good version keeps answering.
    assert model_version(client, world) == 1
    marginal = client.get(
        f"/v1/datasets/{world['dataset_id']}/marginals",
        params={"attrs": "age"},
        headers=world["headers"],
    )
    assert marginal.status_code == 200
    assert all(np.isfinite(marginal.json()["counts"]))

    # The next measurement is fitted, without the quarantined one.
    next_job = post_measurement(client, world, marginals=[["sex", "age"]], rho=0.5)
    worker.run_until_idle()
    succeeded = job_row(database, next_job)
    assert succeeded.status == "succeeded", succeeded.error
    assert succeeded.model_version == 2
    model = client.get(f"/v1/datasets/{world['dataset_id']}/model", headers=world["headers"])
    assert poisoned_id not in [m["id"] for m in model.json()["measurements"]]
    releases = client.get(
        f"/v1/datasets/{world['dataset_id']}/measurements", headers=world["headers"]
    ).json()
    listed = {r["id"]: r for r in releases}
    assert listed[poisoned_id]["status"] == "quarantined"
    assert "noise scale" in listed[poisoned_id]["quarantine_reason"]
    assert {r["status"] for i, r in listed.items() if i != poisoned_id} == {"active"}
    # Still a release: its charge stays in the ledger, unrefunded.
    with database.read_only() as session:
        kinds = [e.kind for e in session.query(LedgerEntry).filter_by(job_id=poisoned_job)]
    assert kinds == ["charge"]


def test_a_fit_that_fails_finds_the_measurement_that_breaks_it(
    client: TestClient,
    world: dict[str, Any],
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failure no check foresaw: the fit raises whenever one particular (valid-looking)
    measurement is in it. Bisection over the new measurements finds that one."""
    real_fit = quarantine.fit

    def fragile_fit(domain: Any, measurements: Any, **options: Any) -> Any:
        if any(m.attributes == ("sex", "age") and m.scale == 7.0 for m in measurements):
            raise OverflowError("numerical trouble")
        return real_fit(domain, measurements, **options)

    monkeypatch.setattr(quarantine, "fit", fragile_fit)
    job_id = post_measurement(
        client, world, marginals=[["sex"], ["age"], ["sex", "age"], ["age", "sex"]], sigma=7.0
    )
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    job = job_row(database, job_id)
    assert job.status == "failed"
    releases = client.get(
        f"/v1/datasets/{world['dataset_id']}/measurements", headers=world["headers"]
    ).json()
    mine = [r for r in releases if r["job_id"] == job_id]
    assert [r["status"] for r in mine] == ["active", "active", "quarantined", "active"]
    assert f"measurement {mine[2]['id']}" in (job.error or "")
    assert "OverflowError" in mine[2]["quarantine_reason"]
    # The next fit includes the other three, and the model answers.
    version = model_version(client, world)
    assert version == 2
    covered = client.get(
        f"/v1/datasets/{world['dataset_id']}/model", headers=world["headers"]
    ).json()["measurements"]
    assert {m["id"] for m in covered} >= {mine[0]["id"], mine[1]["id"], mine[3]["id"]}
    assert mine[2]["id"] not in {m["id"] for m in covered}


def test_a_failure_no_new_measurement_explains_leaves_the_last_good_version(
    client: TestClient,
    world: dict[str, Any],
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_fit(*_args: Any, **_kwargs: Any) -> Any:
        raise FloatingPointError("every fit fails now")

    monkeypatch.setattr(quarantine, "fit", broken_fit)
    job_id = post_measurement(client, world, marginals=[["sex"]], rho=0.1)
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    job = job_row(database, job_id)
    assert job.status == "failed"
    assert (job.error or "").startswith("internal error (FloatingPointError)")
    assert model_version(client, world) == 1
    releases = client.get(
        f"/v1/datasets/{world['dataset_id']}/measurements", headers=world["headers"]
    ).json()
    assert {r["status"] for r in releases} == {"active"}  # nobody was blamed


def store_coarse(
    database: Database, job_id: str, sizes: list[int], values: list[int], scale: float = 1.0
) -> int:
    """Store, as the job's release, a coarse (sex, age) measurement as an AIM round
    stores one: its groups in the round's details."""
    groups = [min(n, 3) for n in sizes]
    with database.unit_of_work() as session:
        job = session.get(Job, job_id)
        record = measurement_service.store(
            session,
            access_id=None,
            dataset_id=job.dataset_id,
            job_id=job.id,
            position=0,
            attributes=["sex", "age"],
            noise_kind="gaussian",
            scale=scale,
            rho_units_used=1,
            values=np.array(values, dtype=np.int64),
            details={"coarse": {"sizes": sizes, "groups": groups}},
        )
        return int(record.number)  # its id in the API


def test_a_coarse_release_is_fitted_over_its_groups_and_listed_with_them(
    client: TestClient, world: dict[str, Any], database: Database, settings: Settings
) -> None:
    job_id = post_measurement(client, world, marginals=[["sex", "age"]], sigma=1.0)
    # (sex: F, M) × (age: bins 0–1, 2–3, 4): the five rows are F 23, M 41, F 67, M 17, F 30
    # (σ = 0.05 against the one-way marginals' σ = 1: the fit follows it closely)
    stored_id = store_coarse(database, job_id, [2, 5], [1, 1, 1, 1, 1, 0], scale=0.05)
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    assert job_row(database, job_id).status == "succeeded"
    assert model_version(client, world) == 2
    listed = client.get(
        f"/v1/datasets/{world['dataset_id']}/measurements", headers=world["headers"]
    ).json()
    coarse = next(r for r in listed if r["id"] == stored_id)
    assert coarse["status"] == "active"
    assert coarse["groups"] == [[[0, 0], [1, 1]], [[0, 1], [2, 3], [4, 4]]]
    assert coarse["values"] == [1, 1, 1, 1, 1, 0]
    assert all(r["groups"] is None for r in listed if r["id"] != stored_id)
    # the model's (sex, age) marginal, summed over the groups, follows the measurement
    answer = client.get(
        f"/v1/datasets/{world['dataset_id']}/marginals",
        params={"attrs": "sex,age"},
        headers=world["headers"],
    ).json()
    table = np.asarray(answer["counts"], dtype=float).reshape(2, 5)
    grouped = np.add.reduceat(table, [0, 2, 4], axis=1).ravel()
    assert np.allclose(grouped, [1, 1, 1, 1, 1, 0], atol=0.1)


def test_a_coarse_release_over_other_values_is_quarantined(
    client: TestClient, world: dict[str, Any], database: Database, settings: Settings
) -> None:
    job_id = post_measurement(client, world, marginals=[["sex", "age"]], sigma=1.0)
    stored_id = store_coarse(database, job_id, [2, 4], [1, 1, 1, 1, 1, 0])  # age has 5
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    assert job_row(database, job_id).status == "failed"
    listed = client.get(
        f"/v1/datasets/{world['dataset_id']}/measurements", headers=world["headers"]
    ).json()
    record = next(r for r in listed if r["id"] == stored_id)
    assert record["status"] == "quarantined"
    assert "not of the dataset's attributes" in record["quarantine_reason"]
    assert model_version(client, world) == 1
