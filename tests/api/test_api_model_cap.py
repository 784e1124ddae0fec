"""The junction-tree size cap is enforced at the door: 422 `model_too_large`, nothing charged.

Four attributes of 100 values: any one pair is a 10,000-cell marginal (well within the
marginal cap), but all six pairs together make the interaction graph complete, and the
junction tree one clique of 100⁴ = 10⁸ cells — over the service's model cap. The
worker must never be handed that job (it would build the tree and run out of memory).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

from conftest import ApiHelper
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, Job, LedgerEntry

SCHEMA = {f"a{i}": 100 for i in range(4)}
PAIRS = [list(pair) for pair in combinations(SCHEMA, 2)]


def _dataset(api: ApiHelper) -> tuple[dict[str, Any], dict[str, Any]]:
    tenant = api.create_tenant()
    csv = ",".join(SCHEMA) + "\n" + "\n".join(",".join(str(r) for _ in SCHEMA) for r in range(5))
    dataset = api.upload_dataset(csv + "\n", SCHEMA)
    api.grant(dataset["id"], tenant["id"], 1)
    return tenant, dataset


def _charges_and_jobs(database: Database, dataset_id: str) -> tuple[list[int], int]:
    with database.read_only() as session:
        charges = [e.rho_units for e in session.query(LedgerEntry).filter_by(dataset_id=dataset_id)]
        jobs = session.query(Job).filter_by(dataset_id=dataset_id).count()
    return charges, jobs


def test_a_measurement_over_the_model_cap_is_refused_and_charges_nothing(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    tenant, dataset = _dataset(api)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": PAIRS, "rho": 0.5},
        headers=tenant["headers"],
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "model_too_large"
    assert error["model_cells"] == 100**4
    assert error["max_model_cells"] == settings.max_model_cells
    assert _charges_and_jobs(database, dataset["id"]) == ([], 0)
    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=tenant["headers"]).json()
    assert budget["rho_spent"] == 0.0 and budget["rho_remaining"] == 1.0


def test_the_cap_counts_what_is_already_measured_or_queued(
    client: TestClient, api: ApiHelper, database: Database
) -> None:
    tenant, dataset = _dataset(api)
    url = f"/v1/datasets/{dataset['id']}/measurements"
    # A path a0-a1-a2-a3 is a chain of 10,000-cell cliques: accepted (and queued).
    first = client.post(
        url,
        json={"marginals": [PAIRS[0], PAIRS[3], PAIRS[5]], "rho": 0.1},
        headers=tenant["headers"],
    )
    assert first.status_code == 202, first.text
    before = _charges_and_jobs(database, dataset["id"])
    # The rest closes the graph: refused although each request alone would fit.
    rest = [pair for k, pair in enumerate(PAIRS) if k not in (0, 3, 5)]
    refused = client.post(url, json={"marginals": rest, "rho": 0.1}, headers=tenant["headers"])
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "model_too_large"
    assert _charges_and_jobs(database, dataset["id"]) == before
