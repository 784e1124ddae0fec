"""The gate over a registered source: counted through the worker's engine in one scan per
access; a source that changed (or is gone), a dataset not ready or forgotten, is refused
before the access is recorded (the job refunded whole); a change seen mid-scan leaves
the access charged and fails the job with `source_changed`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ApiHelper, job_row, unique_name
from fastapi.testclient import TestClient
from sqlalchemy import update

from app.config import Settings
from app.db import Database, Dataset, LedgerEntry, MeasurementRecord, RecordAccess, utcnow
from app.records.engine import Marginal, UnitCap
from app.schema import DatasetSchema
from app.services import gate
from app.services.refunds import units_up
from app.sources import Source, fingerprint_json, list_files
from app.worker import Worker

ATTRS = {"a": 3, "b": 4, "c": 2}
SCHEMA = {
    "attributes": [
        {"name": name, "type": "categorical", "values": [f"{name}{i}" for i in range(size)]}
        for name, size in ATTRS.items()
    ]
}
ROWS = 1200
MARGINALS = [["a"], ["b"], ["c"], ["a", "b"], ["b", "c"], ["c", "a"]]


def codes(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.integers(0, size, ROWS) for name, size in ATTRS.items()}


def direct(table: dict[str, np.ndarray], attrs: Sequence[str]) -> np.ndarray:
    shape = [ATTRS[a] for a in attrs]
    flat = np.ravel_multi_index([table[a] for a in attrs], shape)
    return np.bincount(flat, minlength=int(np.prod(shape)))


def write_source(folder: Path, table: dict[str, np.ndarray], parts: int = 2) -> None:
    """The table as Parquet files in `folder` (values as the schema names them)."""
    folder.mkdir(parents=True, exist_ok=True)
    for part, rows in enumerate(np.array_split(np.arange(ROWS), parts)):
        columns = {name: [f"{name}{v}" for v in table[name][rows]] for name in ATTRS}
        pq.write_table(pa.table(columns), folder / f"part-{part}.parquet")


class FakeEngine:
    """Counts the table the test wrote (an engine's answer without reading Parquet), and
    records each scan; `during` runs inside a scan (a change the scan would meet)."""

    name = "fake"

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table
        self.scans: list[list[Marginal]] = []
        self.during: Any = None

    def validate(self, source: Source, schema: DatasetSchema, unit: UnitCap | None) -> Any:
        raise NotImplementedError

    def count(
        self,
        source: Source,
        schema: DatasetSchema,
        marginals: Sequence[Marginal],
        unit: UnitCap | None,
    ) -> dict[Marginal, np.ndarray]:
        self.scans.append(list(marginals))
        if self.during is not None:
            self.during()
        return {m: direct(self.table, m).astype(np.int64) for m in marginals}


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEngine]:
    fake = FakeEngine({})
    monkeypatch.setattr(gate, "record_engine", lambda settings: fake)
    monkeypatch.setattr(gate, "_ENGINES", {})
    yield fake


def register(database: Database, folder: Path) -> str:
    """A ready dataset registered by reference to `folder` (as the registration job leaves
    it): schema, URI and the fingerprint of its files now."""
    uri = folder.as_uri() + "/"
    with database.unit_of_work() as session:
        dataset = Dataset(
            name=unique_name("lake"),
            rows=ROWS,
            schema_json=SCHEMA,
            status="ready",
            source_format="parquet",
            source_uri=uri,
            source_fingerprint=fingerprint_json(list_files(uri)),
            source_secret=1234567,
        )
        session.add(dataset)
        session.flush()
        return dataset.id


def measure(client: TestClient, api: ApiHelper, dataset_id: str) -> tuple[str, dict[str, str]]:
    tenant = api.create_tenant()
    api.grant(dataset_id, tenant["id"], 1)
    response = client.post(
        f"/v1/datasets/{dataset_id}/measurements",
        json={"marginals": MARGINALS, "noise": "gaussian", "rho": 0.5},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"]), tenant["headers"]


def run(database: Database, settings: Settings, root: Path) -> None:
    """Run the queued jobs with `root` the operator's one allowed root."""
    allowed = settings.model_copy(update={"source_roots": root.as_uri() + "/"})
    Worker(database, allowed, poll_seconds=0.01).run_until_idle()


def accesses(database: Database, job_id: str) -> list[RecordAccess]:
    with database.read_only() as session:
        return session.query(RecordAccess).filter_by(job_id=job_id).all()


def net_units(database: Database, job_id: str) -> int:
    """The job's charge less its refunds, in ledger units."""
    with database.read_only() as session:
        return sum(e.rho_units for e in session.query(LedgerEntry).filter_by(job_id=job_id))


def test_a_registered_source_is_counted_through_the_engine_in_one_scan(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    engine: FakeEngine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.services import measuring

    engine.table = codes(1)
    write_source(tmp_path / "lake", engine.table)
    dataset_id = register(database, tmp_path / "lake")
    job_id, _ = measure(client, api, dataset_id)
    monkeypatch.setattr(measuring, "draw", lambda kind, counts, scale: counts)
    run(database, settings, tmp_path)
    job = job_row(database, job_id)
    assert job.status == "succeeded", job.error
    # one scan, of the maximal sets only
    assert len(engine.scans) == 1
    assert {frozenset(m) for m in engine.scans[0]} == {
        frozenset(m) for m in [("a", "b"), ("b", "c"), ("c", "a")]
    }
    with database.read_only() as session:
        from app.ingest import unpack_column

        records = (
            session.query(MeasurementRecord)
            .filter_by(job_id=job_id)
            .order_by(MeasurementRecord.position)
            .all()
        )
        for record, attrs in zip(records, MARGINALS, strict=True):
            assert np.array_equal(unpack_column(record.values), direct(engine.table, attrs))
    assert len(accesses(database, job_id)) == 1


def test_the_worker_keeps_one_engine_per_configuration(
    settings: Settings, engine: FakeEngine
) -> None:
    assert gate.counting_engine(settings) is gate.counting_engine(settings) is engine


@pytest.mark.parametrize("change", ["file added", "file rewritten", "source gone"])
def test_a_changed_source_fails_the_job_before_the_access_is_recorded(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    engine: FakeEngine,
    tmp_path: Path,
    change: str,
) -> None:
    engine.table = codes(2)
    folder = tmp_path / "lake"
    write_source(folder, engine.table)
    dataset_id = register(database, folder)
    job_id, headers = measure(client, api, dataset_id)
    charged = net_units(database, job_id)
    assert charged > 0
    if change == "file added":
        write_source(tmp_path / "more", codes(3), parts=1)
        (tmp_path / "more" / "part-0.parquet").rename(folder / "part-9.parquet")
    elif change == "file rewritten":
        pq.write_table(pa.table({"a": ["a0"], "b": ["b0"], "c": ["c0"]}), folder / "part-1.parquet")
    else:
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()
    run(database, settings, tmp_path)
    job = job_row(database, job_id)
    assert job.status == "failed"
    assert (job.progress or {}).get("error_code") == "source_changed"
    assert engine.scans == []  # nothing read
    assert accesses(database, job_id) == []  # nothing recorded...
    assert net_units(database, job_id) == 0  # ...so refunded whole
    shown = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
    assert shown["status"] == "failed" and shown["error_code"] == "source_changed"
    assert "fingerprint" in shown["error"]


def test_a_change_seen_mid_scan_leaves_the_access_charged_and_fails_the_job(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    engine: FakeEngine,
    tmp_path: Path,
) -> None:
    engine.table = codes(4)
    folder = tmp_path / "lake"
    write_source(folder, engine.table)
    dataset_id = register(database, folder)
    job_id, headers = measure(client, api, dataset_id)
    # the curator appends a file while the scan runs
    engine.during = lambda: write_source(folder / "late", codes(5), parts=1)
    run(database, settings, tmp_path)
    job = job_row(database, job_id)
    assert job.status == "failed"
    assert (job.progress or {}).get("error_code") == "source_changed"
    (access,) = accesses(database, job_id)  # it passed the gate: spent
    assert net_units(database, job_id) == access.rho_units
    assert Fraction(access.exact_rho) == Fraction(1, 2)
    with database.read_only() as session:
        assert session.query(MeasurementRecord).filter_by(job_id=job_id).count() == 0
    shown = client.get(f"/v1/jobs/{job_id}", headers=headers).json()
    assert shown["error_code"] == "source_changed"


@pytest.mark.parametrize(
    ("state", "code"),
    [
        ("registering", "dataset_not_ready"),
        ("rejected", "dataset_not_ready"),
        ("purged", "records_purged"),
    ],
)
def test_a_dataset_not_ready_or_forgotten_is_refused_before_the_access_is_recorded(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    engine: FakeEngine,
    tmp_path: Path,
    state: str,
    code: str,
) -> None:
    engine.table = codes(6)
    write_source(tmp_path / "lake", engine.table)
    dataset_id = register(database, tmp_path / "lake")
    job_id, _ = measure(client, api, dataset_id)
    # what the registration (or a purge) leaves, after the job was accepted
    values: dict[str, Any] = (
        {"status": state}
        if state != "purged"
        else {"source_uri": None, "source_fingerprint": None, "records_purged_at": utcnow()}
    )
    with database.unit_of_work() as session:
        session.execute(update(Dataset).where(Dataset.id == dataset_id).values(**values))
    run(database, settings, tmp_path)
    job = job_row(database, job_id)
    assert job.status == "failed"
    assert (job.progress or {}).get("error_code") == code
    assert engine.scans == [] and accesses(database, job_id) == []
    assert net_units(database, job_id) == 0


def test_a_mechanism_scans_a_source_once_and_a_change_between_rounds_stops_it_at_the_gate(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    engine: FakeEngine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.services import measurements as measurement_service

    engine.table = codes(7)
    folder = tmp_path / "lake"
    write_source(folder, engine.table)
    dataset_id = register(database, folder)
    tenant = api.create_tenant()
    api.grant(dataset_id, tenant["id"], 1)
    workload = [["a", "b"], ["b", "c"], ["a", "c"]]
    response = client.post(
        f"/v1/datasets/{dataset_id}/mechanisms/mwem",
        json={"rho": 0.2, "rounds": 4, "workload": workload},
        headers=tenant["headers"],
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    store, stored = measurement_service.store, []

    def store_then_change(session: Any, **kwargs: Any) -> Any:
        stored.append(kwargs["position"])
        if len(stored) == 2:  # the curator rewrites the lake after the second round
            write_source(folder / "late", codes(8), parts=1)
        return store(session, **kwargs)

    monkeypatch.setattr(measurement_service, "store", store_then_change)
    run(database, settings, tmp_path)
    job = job_row(database, job_id)
    assert job.status == "failed"
    assert (job.progress or {}).get("error_code") == "source_changed"
    assert len(engine.scans) == 1  # the first round counted the workload; the second summed
    assert {frozenset(m) for m in engine.scans[0]} == {frozenset(m) for m in workload}
    done = accesses(database, job_id)
    assert len(done) == len(stored) == 2  # the third round was refused before recording
    charged = sum(Fraction(a.exact_rho) for a in done)
    assert net_units(database, job_id) == units_up(charged)  # the rest refunded


def test_a_source_outside_the_roots_now_is_refused_before_the_access_is_recorded(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    engine: FakeEngine,
    tmp_path: Path,
) -> None:
    engine.table = codes(9)
    write_source(tmp_path / "lake", engine.table)
    dataset_id = register(database, tmp_path / "lake")
    job_id, _ = measure(client, api, dataset_id)
    (tmp_path / "elsewhere").mkdir()
    run(database, settings, tmp_path / "elsewhere")  # the operator narrowed the roots
    job = job_row(database, job_id)
    assert job.status == "failed"
    assert (job.progress or {}).get("error_code") == "source_not_allowed"
    assert engine.scans == [] and accesses(database, job_id) == []
    assert net_units(database, job_id) == 0
