"""Within-bin means over HTTP: what an upload keeps, the gate, the release, its price, its use.

The table is tests/data/delays.csv (`make_delays.py`): departure delays with a long
right tail in wide bins, where midpoints put the average delay 14% too high.
"""

from __future__ import annotations

import csv
import json
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from conftest import ADMIN_KEY, DATA_DIR, ApiHelper, bearer
from fastapi.testclient import TestClient
from sqlalchemy import delete, select

from app.config import Settings
from app.db import Database, DatasetColumn, Job, LedgerEntry, MeasurementRecord, RecordAccess
from app.ingest import fraction_column, unpack_column
from app.privacy import noise
from app.privacy.accounting import exact_rho
from app.schema import parse_schema
from app.schema.within_bins import GRID
from app.services import gate
from app.services import within_bin_means as within_bin_service
from app.worker import Worker

DELAYS = (DATA_DIR / "delays.csv").read_bytes()
EDGES = np.array([-30.0, 0.0, 30.0, 120.0, 600.0])
SCHEMA: dict[str, Any] = {
    "attributes": [
        {"name": "carrier", "type": "categorical", "values": ["AA", "DL", "UA", "WN", "B6"]},
        {"name": "distance", "type": "numeric", "bins": [0, 500, 1000, 2000, 5000], "clip": True},
        {"name": "dep_delay", "type": "numeric", "bins": EDGES.tolist(), "clip": True},
    ]
}
ADMIN = bearer(ADMIN_KEY)


def delays() -> np.ndarray:
    rows = csv.DictReader(DELAYS.decode().splitlines())
    return np.array([float(row["dep_delay"]) for row in rows])


def expected_fractions(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes and quantized fractions computed here from the edges, independently."""
    codes = np.clip(np.searchsorted(EDGES, x, side="right") - 1, 0, len(EDGES) - 2)
    low, high = EDGES[codes], EDGES[codes + 1]
    fraction = np.clip((x - low) / (high - low), 0, 1)
    return codes, np.floor(fraction * GRID + 0.5).astype(np.int64)


def run_jobs(database: Database, settings: Settings) -> int:
    return Worker(database, settings, poll_seconds=0.01).run_until_idle()


def ledger_units(database: Database, dataset_id: str) -> int:
    with database.read_only() as session:
        entries = session.scalars(
            select(LedgerEntry.rho_units).where(LedgerEntry.dataset_id == dataset_id)
        ).all()
    return sum(entries)


@pytest.fixture(scope="module")
def delayed(api: ApiHelper) -> dict[str, Any]:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(DELAYS, SCHEMA)
    api.grant(dataset["id"], tenant["id"], 5)
    return {"tenant": tenant, "dataset": dataset, "headers": tenant["headers"]}


def measure(client: TestClient, dataset_id: str, headers: dict[str, str], body: Any) -> Any:
    return client.post(f"/v1/datasets/{dataset_id}/measurements", json=body, headers=headers)


def test_an_upload_keeps_each_rows_place_within_its_bin(
    delayed: dict[str, Any], database: Database
) -> None:
    codes, fractions = expected_fractions(delays())
    with database.read_only() as session:
        stored = {
            c.name: unpack_column(c.data)
            for c in session.scalars(
                select(DatasetColumn).where(DatasetColumn.dataset_id == delayed["dataset"]["id"])
            )
        }
    assert set(stored) == {
        "carrier",
        "distance",
        "dep_delay",
        fraction_column("distance"),
        fraction_column("dep_delay"),
    }
    np.testing.assert_array_equal(stored["dep_delay"], codes)
    np.testing.assert_array_equal(stored[fraction_column("dep_delay")], fractions)


def sql_average(client: TestClient, table: dict[str, Any]) -> tuple[float, str, list[float]]:
    """AVG(dep_delay) from POST /sql: the estimate, how it was made, and its bounds."""
    response = client.post(
        f"/v1/datasets/{table['dataset']['id']}/sql",
        json={"query": f'SELECT AVG(dep_delay) AS mean FROM "{table["dataset"]["name"]}"'},
        headers=table["headers"],
    )
    assert response.status_code == 200, response.text
    body = response.json()
    return body["rows"][0][0], body["estimates"][0], body["bounds"][0][0]


def test_within_bin_means_bring_the_average_back_at_rho_half(
    client: TestClient, delayed: dict[str, Any], database: Database, settings: Settings
) -> None:
    dataset_id, headers = delayed["dataset"]["id"], delayed["headers"]
    truth = float(delays().mean())
    before = ledger_units(database, dataset_id)
    counts_job = measure(client, dataset_id, headers, {"marginals": [["dep_delay"]], "rho": 0.5})
    assert counts_job.status_code == 202, counts_job.text
    run_jobs(database, settings)
    by_midpoints, method, (low, high) = sql_average(client, delayed)
    assert method == "midpoint"
    assert abs(by_midpoints - truth) / truth > 0.10  # midpoints put it far too high
    assert low <= truth <= high

    response = measure(client, dataset_id, headers, {"within_bin_means": ["dep_delay"], "rho": 0.5})
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["within_bin_means"] == ["dep_delay"]
    assert accepted["rho_charged_exact"] == "0.5"
    assert accepted["sigma"] == pytest.approx(1.0)  # k = 1: ρ = 1²/(2σ²)
    run_jobs(database, settings)
    job = client.get(f"/v1/jobs/{accepted['job_id']}", headers=headers).json()
    assert job["status"] == "succeeded", job
    assert job["model_version"] == 2  # the version that covers them
    assert ledger_units(database, dataset_id) - before == 10**12  # 0.5 + 0.5, charged

    model = client.get(f"/v1/datasets/{dataset_id}/model", headers=headers).json()
    assert model["within_bin_means"] == [{"attribute": "dep_delay", "releases": 1, "rho": 0.5}]
    assert model["measurement_count"] == 1  # the fit is over the marginal alone
    by_means, method, (low, high) = sql_average(client, delayed)
    assert method == "within-bin means"
    assert abs(by_means - truth) / truth < 0.02
    assert low <= by_means <= high and low <= truth <= high

    listed = client.get(f"/v1/datasets/{dataset_id}/measurements", headers=headers).json()
    items = listed["items"] if isinstance(listed, dict) else listed
    released = [m for m in items if m["kind"] == "within_bin_means"]
    assert len(released) == 1 and released[0]["attributes"] == ["dep_delay"]
    assert released[0]["details"]["grid"] == GRID
    assert released[0]["sigma"] == pytest.approx(GRID)
    marginal = client.get(
        f"/v1/datasets/{dataset_id}/marginals", params={"attrs": "dep_delay"}, headers=headers
    ).json()
    counts = np.asarray(marginal["counts"], dtype=float)
    with database.read_only() as session:
        means = within_bin_service.within_bin_means(
            session, dataset_id, parse_schema(SCHEMA), "dep_delay", counts
        )
    assert means is not None and np.all((means >= EDGES[:-1]) & (means <= EDGES[1:]))
    assert float(counts @ means / counts.sum()) == pytest.approx(by_means, rel=1e-6)


def test_the_noise_is_priced_at_sensitivity_k_whatever_the_widths() -> None:
    schema = parse_schema(SCHEMA)
    for k in (1, 3):
        plan = within_bin_service.plan(
            schema,
            ["dep_delay", "distance"],
            noise_kind="gaussian",
            rho_units_total=10**12,
            scale=None,
            sensitivity=k,
        )
        # Two attributes at ρ = 1: each k²/(2σ²) = ½, so σ = k; on the grid σ·2¹⁶.
        assert plan.scale == pytest.approx(k)
        assert plan.grid_scale == plan.scale * GRID
        assert exact_rho("gaussian", plan.scale, 2, k) <= Fraction(1)
        assert noise.privacy_map("gaussian", plan.grid_scale, k * GRID) == pytest.approx(0.5)
    laplace = within_bin_service.plan(
        schema, ["dep_delay"], noise_kind="laplace", rho_units_total=None, scale=2.0
    )
    assert laplace.rho_units == 125 * 10**9  # (1/2)²/2


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({"within_bin_means": ["carrier"], "rho": 0.1}, "carrier"),
        ({"within_bin_means": ["nope"], "rho": 0.1}, "nope"),
        ({"within_bin_means": ["dep_delay"], "marginals": [["carrier"]], "rho": 0.1}, "marginals"),
        ({"within_bin_means": ["dep_delay", "dep_delay"], "rho": 0.1}, "twice"),
        ({"within_bin_means": ["dep_delay"], "rho": 0.1, "scale": 2}, "scale"),
    ],
)
def test_bad_requests_are_422_naming_what_is_wrong_and_charge_nothing(
    client: TestClient, delayed: dict[str, Any], database: Database, body: Any, names: str
) -> None:
    dataset_id = delayed["dataset"]["id"]
    before = ledger_units(database, dataset_id)
    response = measure(client, dataset_id, delayed["headers"], body)
    assert response.status_code == 422, response.text
    assert names in json.dumps(response.json())
    assert ledger_units(database, dataset_id) == before


def test_the_dry_run_prices_it_and_charges_nothing(
    client: TestClient, delayed: dict[str, Any], database: Database
) -> None:
    dataset_id = delayed["dataset"]["id"]
    before = ledger_units(database, dataset_id)
    response = client.post(
        f"/v1/datasets/{dataset_id}/measurements?dry_run=true",
        json={"within_bin_means": ["dep_delay", "distance"], "rho": 0.5},
        headers=delayed["headers"],
    )
    assert response.status_code == 200, response.text
    estimate = response.json()
    assert estimate["rho_exact"] == "0.5"
    assert estimate["sigma"] == pytest.approx(np.sqrt(2))  # two attributes share ρ
    assert estimate["sensitivity"] == 1
    by_name = {e["attribute"]: e for e in estimate["within_bin_means"]}
    assert by_name["dep_delay"]["bins"] == 4
    assert by_name["dep_delay"]["widest_bin"] == 480
    assert by_name["dep_delay"]["expected_abs_error_per_bin"] == pytest.approx(
        np.sqrt(2) * np.sqrt(2 / np.pi), rel=0.05
    )
    assert ledger_units(database, dataset_id) == before


def test_a_read_that_fails_past_the_gate_stays_charged(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(DELAYS, SCHEMA)
    api.grant(dataset["id"], tenant["id"], 1)
    response = measure(
        client, dataset["id"], tenant["headers"], {"within_bin_means": ["dep_delay"], "rho": 0.2}
    )
    job_id = response.json()["job_id"]

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the read failed")

    monkeypatch.setattr(gate, "fraction_sums", broken)
    run_jobs(database, settings)
    with database.read_only() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == "failed"
        accesses = session.scalars(select(RecordAccess).where(RecordAccess.job_id == job_id)).all()
        assert [a.rho_units for a in accesses] == [2 * 10**11]  # recorded before the read
        assert session.query(MeasurementRecord).filter_by(job_id=job_id).count() == 0
    assert ledger_units(database, dataset["id"]) == 2 * 10**11  # nothing refunded


def test_a_dataset_without_stored_places_is_409_and_charges_nothing(
    client: TestClient, api: ApiHelper, database: Database
) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(DELAYS, SCHEMA)
    api.grant(dataset["id"], tenant["id"], 1)
    with database.unit_of_work() as session:  # as an upload made before they were kept
        session.execute(
            delete(DatasetColumn).where(
                DatasetColumn.dataset_id == dataset["id"],
                DatasetColumn.name == fraction_column("dep_delay"),
            )
        )
    response = measure(
        client, dataset["id"], tenant["headers"], {"within_bin_means": ["dep_delay"], "rho": 0.2}
    )
    assert response.status_code == 409, response.text
    assert response.json()["error"]["code"] == "within_bin_means_unavailable"
    assert ledger_units(database, dataset["id"]) == 0


def test_a_purge_destroys_the_places_with_the_records(
    client: TestClient, api: ApiHelper, database: Database
) -> None:
    dataset = api.upload_dataset(DELAYS, SCHEMA)
    response = client.delete(f"/v1/datasets/{dataset['id']}/records", headers=ADMIN)
    assert response.status_code == 204, response.text
    with database.read_only() as session:
        left = session.scalars(
            select(DatasetColumn.name).where(DatasetColumn.dataset_id == dataset["id"])
        ).all()
    assert left == []


def test_a_refusal_before_the_gate_refunds_the_whole_charge(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings
) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(DELAYS, SCHEMA)
    api.grant(dataset["id"], tenant["id"], 1)
    response = measure(
        client, dataset["id"], tenant["headers"], {"within_bin_means": ["dep_delay"], "rho": 0.2}
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    assert ledger_units(database, dataset["id"]) == 2 * 10**11
    with database.unit_of_work() as session:  # the places gone after the request was accepted
        session.execute(
            delete(DatasetColumn).where(
                DatasetColumn.dataset_id == dataset["id"],
                DatasetColumn.name == fraction_column("dep_delay"),
            )
        )
    run_jobs(database, settings)
    with database.read_only() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == "failed"
        assert not session.scalars(select(RecordAccess).where(RecordAccess.job_id == job_id)).all()
    assert ledger_units(database, dataset["id"]) == 0  # nothing was read: refunded whole


def test_an_idempotent_retry_is_charged_once(
    client: TestClient, api: ApiHelper, database: Database
) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(DELAYS, SCHEMA)
    api.grant(dataset["id"], tenant["id"], 1)
    headers = {**tenant["headers"], "Idempotency-Key": "within-1"}
    body = {"within_bin_means": ["dep_delay"], "rho": 0.25}
    first = measure(client, dataset["id"], headers, body).json()
    again = measure(client, dataset["id"], headers, body).json()
    assert again["job_id"] == first["job_id"] and again["replayed"] is True
    assert ledger_units(database, dataset["id"]) == 25 * 10**10
    other = measure(client, dataset["id"], headers, {**body, "rho": 0.3})
    assert other.status_code == 409, other.text  # the same key for another request
