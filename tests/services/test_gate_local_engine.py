"""End to end: a Parquet source registered by reference is measured through a real job,
counted by the local engine behind the gate, and gives exactly the counts the same
file gives when uploaded (missing values, numeric bins, integers)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ApiHelper, job_row, unique_name
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, Dataset, MeasurementRecord
from app.ingest import unpack_column
from app.services import gate, measuring
from app.sources import fingerprint_json, list_files
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


def test_a_registered_source_measured_by_the_local_engine_counts_as_its_upload(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = table(11)
    lake = tmp_path / "lake"
    lake.mkdir()
    half = ROWS // 2
    pq.write_table(data.slice(0, half), lake / "part-0.parquet", row_group_size=500)
    pq.write_table(data.slice(half), lake / "part-1.parquet", row_group_size=500)
    uri = lake.as_uri() + "/"
    with database.unit_of_work() as session:
        registered = Dataset(
            name=unique_name("lake"),
            rows=ROWS,
            schema_json=SCHEMA,
            status="ready",
            source_format="parquet",
            source_uri=uri,
            source_fingerprint=fingerprint_json(list_files(uri)),
            source_secret=42,
        )
        session.add(registered)
        session.flush()
        registered_id = registered.id
    buffer = io.BytesIO()
    pq.write_table(data.drop_columns(["ignored"]), buffer)
    uploaded_id = api.upload_dataset(buffer.getvalue(), SCHEMA)["id"]
    tenant = api.create_tenant()
    for dataset_id in (registered_id, uploaded_id):
        api.grant(dataset_id, tenant["id"], 1)

    monkeypatch.setattr(gate, "_ENGINES", {})  # the worker's own engine, built on first use
    monkeypatch.setattr(measuring, "draw", lambda kind, counts, scale: counts)  # exact counts
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
    assert settings.record_engine == "local"
    assert type(gate.counting_engine(settings)).__name__ == "LocalEngine"
