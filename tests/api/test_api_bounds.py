"""Error bounds of the marginals endpoint: AIM Theorem 2 where measured, Theorem 4 otherwise."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import ApiHelper
from fastapi.testclient import TestClient
from test_api_mechanisms import SIZES, small_adult

from app.config import Settings
from app.db import Database, Job
from app.pgm.domain import Domain
from app.pgm.measurement import Measurement
from app.privacy.mechanisms import theorem2_bound
from app.worker import Worker


@pytest.fixture(scope="module")
def small(api: ApiHelper) -> dict[str, Any]:
    return api.upload_dataset(small_adult(2000), SIZES)


def marginal(
    client: TestClient, dataset_id: str, attrs: str, headers: dict[str, str]
) -> dict[str, Any]:
    response = client.get(
        f"/v1/datasets/{dataset_id}/marginals", params={"attrs": attrs}, headers=headers
    )
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_theorem_2_bound_for_measured_marginals_and_none_elsewhere(
    client: TestClient,
    api: ApiHelper,
    small: dict[str, Any],
    database: Database,
    settings: Settings,
) -> None:
    tenant = api.create_tenant()
    api.grant(small["id"], tenant["id"], 1)
    headers = tenant["headers"]
    client.post(
        f"/v1/datasets/{small['id']}/measurements",
        headers=headers,
        json={"marginals": [["sex", "race"], ["race"], ["relationship"]], "rho": 0.3},
    )
    Worker(database, settings, poll_seconds=0.01).run_until_idle()

    answer = marginal(client, small["id"], "race", headers)
    bound = answer["error_bound"]
    assert bound["method"] == "AIM theorem 2" and bound["confidence"] == 0.95
    # The same bound from the releases themselves: both measurements covering race.
    releases = client.get(f"/v1/datasets/{small['id']}/measurements", headers=headers).json()
    measurements = [
        Measurement(tuple(r["attributes"]), np.array(r["values"], float), "gaussian", r["sigma"])
        for r in releases
    ]
    domain = Domain.from_sizes(SIZES)
    expected = theorem2_bound(domain, ("race",), measurements, np.array(answer["counts"]))
    assert expected is not None
    assert bound["l1"] == pytest.approx(expected.bound, rel=1e-9)
    # Covered by one measurement only: a looser bound than race's, which has two.
    assert marginal(client, small["id"], "sex", headers)["error_bound"]["l1"] > 0
    # Not in the downward closure of any measurement, and no mechanism ran: no claim.
    assert marginal(client, small["id"], "relationship,sex", headers)["error_bound"] is None


def test_theorem_4_bound_for_workload_marginals_aim_never_measured(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    dataset = api.upload_dataset(small_adult(2000), SIZES)
    tenant = api.create_tenant()
    api.grant(dataset["id"], tenant["id"], 1)
    job_id = client.post(
        f"/v1/datasets/{dataset['id']}/mechanisms/aim",
        json={"rho": 0.01},
        headers=tenant["headers"],
    ).json()["job_id"]
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    with database.read_only() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == "succeeded", job.error if job else None
        result = dict(job.progress or {})
    unmeasured = result["unmeasured_bounds"]
    if not unmeasured:
        pytest.fail("AIM at ρ = 0.01 measured every 2-way marginal; the test needs one it did not")
    left_out = unmeasured[0]
    answer = marginal(client, dataset["id"], ",".join(left_out["attributes"]), tenant["headers"])
    assert answer["covered_by"] == 0
    bound = answer["error_bound"]
    assert bound["method"] == "AIM theorem 4"
    assert bound["round"] == left_out["round_index"]
    # Relative to the mechanism's own model, which is the version that answered.
    assert result["bounds_model_version"] == answer["model_version"]
    # The same bound, plus the distance from the reference answer to the one returned
    # (only the rounding of counts to thousandths here).
    cells = int(np.prod([SIZES[a] for a in left_out["attributes"]]))
    assert left_out["bound"] <= bound["l1"] <= left_out["bound"] + 0.0005 * cells + 1e-9
