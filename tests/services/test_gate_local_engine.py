"""End to end: a Parquet source registered by reference (the API and its registration
job) is measured through real jobs, counted by the local engine behind the gate: exactly
the counts its upload gives (missing values, numeric bins, integers, a dictionary
column), and with a privacy unit the same capped rows at every access."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ADMIN_HEADERS, ADMIN_KEY, ApiHelper, job_row, unique_name
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, MeasurementRecord
from app.ingest import unpack_column
from app.services import gate, measuring
from app.worker import Worker

SCHEMA: dict[str, Any] = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M"], "missing": True},
        {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120], "missing": True},
        {"name": "kids", "type": "integer", "size": 5},
        {"name": "region", "type": "categorical", "values": ["n", "s", "e", "w"]},
    ]
}
ROWS = 3000
MARGINALS = [["sex"], ["age"], ["kids"], ["region", "sex"], ["age", "kids", "sex"], ["kids", "age"]]


def table(seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    sex = rng.choice(np.array(["F", "M", " M ", ""], dtype=object), ROWS, p=[0.45, 0.4, 0.1, 0.05])
    age = rng.uniform(0, 120, ROWS).round(1)
    age_missing = rng.random(ROWS) < 0.05
    return pa.table(
        {
            "sex": pa.array([None if rng.random() < 0.03 else s for s in sex], pa.string()),
            "age": pa.array(np.where(age_missing, np.nan, age), mask=rng.random(ROWS) < 0.02),
            "kids": pa.array(rng.integers(0, 5, ROWS), pa.int64()),
            "region": pa.array(rng.choice(["n", "s", "e", "w"], ROWS)).dictionary_encode(),
            "ignored": pa.array(rng.integers(0, 10**9, ROWS)),
        }
    )


def measure_exactly(client: TestClient, dataset_id: str, headers: dict[str, str]) -> str:
    response = client.post(
        f"/v1/datasets/{dataset_id}/measurements",
        json={"marginals": MARGINALS, "noise": "gaussian", "rho": 0.5},
        headers=headers,
    )
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


def stored_counts(database: Database, job_id: str) -> list[np.ndarray]:
    with database.read_only() as session:
        records = (
            session.query(MeasurementRecord)
            .filter_by(job_id=job_id)
            .order_by(MeasurementRecord.position)
            .all()
        )
        return [unpack_column(r.values) for r in records]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The operator's allowed root, holding the sources registered here."""
    return tmp_path_factory.mktemp("lake")


@pytest.fixture(scope="module")
def settings(database_url: str, lake: Path) -> Settings:
    return Settings(
        database_url=database_url,
        admin_key=ADMIN_KEY,
        env="test",
        workers_in_process=0,
        auto_migrate=False,
        source_roots=f"{lake.as_uri()}/",
    )


@pytest.fixture(autouse=True)
def exact_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """No noise: a measurement stores the counts the gate's reader gave."""
    monkeypatch.setattr(measuring, "draw", lambda kind, counts, scale: counts)


def register(
    client: TestClient, database: Database, settings: Settings, folder: Path, **extra: Any
) -> str:
    """Register `folder` through the API and run the registration job: a ready dataset."""
    body = {
        "name": unique_name("lake"),
        "schema": SCHEMA,
        "source": {"format": "parquet", "uri": folder.as_uri() + "/"},
        **extra,
    }
    response = client.post("/v1/datasets", json=body, headers=ADMIN_HEADERS)
    assert response.status_code == 202, response.text
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    shown = client.get(f"/v1/datasets/{response.json()['id']}", headers=ADMIN_HEADERS).json()
    assert shown["status"] == "ready", shown
    return str(response.json()["id"])


def test_a_registered_source_measured_by_the_local_engine_counts_as_its_upload(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings, lake: Path
) -> None:
    data = table(11)
    folder = lake / unique_name("visits")
    folder.mkdir()
    half = ROWS // 2
    pq.write_table(data.slice(0, half), folder / "part-0.parquet", row_group_size=500)
    pq.write_table(data.slice(half), folder / "part-1.parquet", row_group_size=500)
    registered_id = register(client, database, settings, folder)
    buffer = io.BytesIO()
    pq.write_table(data.drop_columns(["ignored"]), buffer)
    uploaded_id = api.upload_dataset(buffer.getvalue(), SCHEMA)["id"]
    tenant = api.create_tenant()
    for dataset_id in (registered_id, uploaded_id):
        api.grant(dataset_id, tenant["id"], 1)

    jobs = [measure_exactly(client, d, tenant["headers"]) for d in (registered_id, uploaded_id)]
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    for job_id in jobs:
        job = job_row(database, job_id)
        assert job.status == "succeeded", job.error
    from_source, from_upload = (stored_counts(database, job_id) for job_id in jobs)
    assert len(from_source) == len(MARGINALS)
    for attrs, source_counts, upload_counts in zip(
        MARGINALS, from_source, from_upload, strict=True
    ):
        assert int(source_counts.sum()) == ROWS, attrs
        assert np.array_equal(source_counts, upload_counts), attrs
    assert type(gate.counting_engine(settings)).__name__ == "LocalEngine"


def test_a_registered_unit_keeps_the_same_capped_rows_at_every_access(
    client: TestClient, api: ApiHelper, database: Database, settings: Settings, lake: Path
) -> None:
    data = table(12)
    people = np.random.default_rng(12).integers(0, 400, ROWS)
    folder = lake / unique_name("people")
    folder.mkdir()
    pq.write_table(
        data.append_column("person", pa.array([f"p{p}" for p in people])),
        folder / "part-0.parquet",
    )
    dataset_id = register(
        client, database, settings, folder, privacy_unit={"column": "person", "max_rows": 2}
    )
    tenant = api.create_tenant()
    api.grant(dataset_id, tenant["id"], 2)
    jobs = [measure_exactly(client, dataset_id, tenant["headers"]) for _ in range(2)]
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    first, second = (stored_counts(database, job_id) for job_id in jobs)
    capped_rows = int(np.minimum(np.bincount(people), 2).sum())
    assert capped_rows < ROWS
    for attrs, a, b in zip(MARGINALS, first, second, strict=True):
        assert int(a.sum()) == capped_rows, attrs
        assert np.array_equal(a, b), attrs  # the same rows at every access


def test_an_aim_job_on_a_registered_source_scans_it_once(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    lake: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.records.local import LocalEngine

    folder = lake / unique_name("aim")
    folder.mkdir()
    pq.write_table(table(13), folder / "part-0.parquet")
    dataset_id = register(client, database, settings, folder)
    tenant = api.create_tenant()
    api.grant(dataset_id, tenant["id"], 1)
    scans: list[list[tuple[str, ...]]] = []
    real_count = LocalEngine.count

    def count(self: LocalEngine, source: Any, schema: Any, marginals: Any, unit: Any) -> Any:
        scans.append(list(marginals))
        return real_count(self, source, schema, marginals, unit)

    monkeypatch.setattr(LocalEngine, "count", count)
    workload = [["sex", "age"], ["age", "kids"], ["kids", "region"], ["sex", "region"]]
    response = client.post(
        f"/v1/datasets/{dataset_id}/mechanisms/aim",
        json={"rho": 0.1, "workload": workload},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    job = job_row(database, job_id)
    assert job.status == "succeeded", job.error
    with database.read_only() as session:
        assert session.query(MeasurementRecord).filter_by(job_id=job_id).count() >= 2
    assert len(scans) == 1  # every round after the first summed from the first scan's counts
    assert {frozenset(m) for m in scans[0]} == {frozenset(m) for m in workload}
