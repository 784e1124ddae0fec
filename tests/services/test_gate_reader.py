"""The gate's reader counts once per access: the maximal sets of what an access needs (and
what a mechanism names for later) in one scan, smaller marginals summed from them, the
counts kept for the job's later rounds and readable only inside the gate."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from itertools import combinations
from typing import Any

import numpy as np
import pytest
from conftest import ApiHelper, job_row
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database, MeasurementRecord
from app.ingest import unpack_column
from app.pgm.domain import Domain
from app.services import columns, gate, measuring
from app.services.record_reader import CountedMarginals, maximal, project
from app.worker import Worker

ATTRS = {"a": 3, "b": 4, "c": 2, "d": 5}
SCHEMA = {
    "attributes": [
        {"name": name, "type": "categorical", "values": [f"{name}{i}" for i in range(size)]}
        for name, size in ATTRS.items()
    ]
}
ROWS = 1500


def codes(seed: int = 0, rows: int = ROWS) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.integers(0, size, rows) for name, size in ATTRS.items()}


def direct(table: dict[str, np.ndarray], attrs: tuple[str, ...]) -> np.ndarray:
    shape = [ATTRS[a] for a in attrs]
    flat = np.ravel_multi_index([table[a] for a in attrs], shape)
    return np.bincount(flat, minlength=int(np.prod(shape)))


def csv_of(table: dict[str, np.ndarray]) -> str:
    lines = [",".join(ATTRS)]
    for i in range(len(table["a"])):
        lines.append(",".join(f"{name}{table[name][i]}" for name in ATTRS))
    return "\n".join(lines) + "\n"


# -- the pure part: what is counted, and sums from it -------------------------------------


def test_only_the_maximal_sets_are_counted() -> None:
    asked = [("a",), ("b", "a"), ("a", "b"), ("c",), ("a", "b", "c"), ("d",), ("c", "d")]
    assert maximal(asked) == [("a", "b", "c"), ("c", "d")]


def test_sums_from_a_superset_equal_direct_counts_in_any_order() -> None:
    table = codes(1)
    domain = Domain(tuple(ATTRS), tuple(ATTRS.values()))
    have = ("b", "d", "a")
    counts = direct(table, have).reshape(domain.shape(have))
    for want in [("a",), ("d", "b"), ("a", "b"), ("a", "d", "b"), ("b", "d", "a")]:
        assert np.array_equal(project(counts, have, want), direct(table, want)), want
    summed = project(counts, have, have)
    summed[0] += 1  # a copy: the kept counts stay exact
    assert np.array_equal(counts.ravel(), direct(table, have))


def test_kept_counts_answer_subsets_and_a_new_request_plans_a_new_scan() -> None:
    table = codes(2)
    domain = Domain(tuple(ATTRS), tuple(ATTRS.values()))
    counted = CountedMarginals(domain, max_cells=1000)
    plan = counted.plan([("a",)], [("a", "b"), ("b", "c"), ("a", "b", "c")])
    assert plan == [("a", "b", "c")]
    counted.add({m: direct(table, m) for m in plan})
    assert counted.plan([("c", "b")], [("a", "b")]) == []  # covered: no scan
    assert np.array_equal(counted.get(("c", "a")), direct(table, ("c", "a")))
    assert counted.plan([("d",)]) == [("d",)]


def test_a_preload_beyond_the_cell_budget_waits_until_asked_for() -> None:
    domain = Domain(tuple(ATTRS), tuple(ATTRS.values()))
    counted = CountedMarginals(domain, max_cells=30)  # a×b×c has 24 cells, b×d 20
    plan = counted.plan([("a",)], [("a", "b", "c"), ("b", "d")])
    assert plan == [("a", "b", "c")]  # b×d would pass the budget: counted when needed
    counted.add({("a", "b", "c"): np.zeros(24, dtype=np.int64)})
    counted.add({("b", "d"): np.zeros(20, dtype=np.int64)})
    assert counted.kept == [("b", "d")]  # the oldest went to make room
    assert counted.cells <= 30
    # a preload fills only the room left: it never pushes out what is kept
    assert counted.plan([("c",)], [("a", "b", "c")]) == [("c",)]
    assert counted.plan([("c",)], [("a", "c")]) == [("a", "c")]


# -- through the worker: one scan per access -------------------------------------------


class Scans:
    """Counts the reads of stored records (column loads) and the bincounts over them, and
    keeps the job's gate to try its reader after the job."""

    def __init__(self) -> None:
        self.loads = 0
        self.bincounts: list[tuple[str, ...]] = []
        self.gates: list[gate.RecordGate] = []


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Scans]:
    spy = Scans()
    real_get, real_true_marginal, real_open = (
        columns.ColumnCache.get,
        gate.true_marginal,
        gate.RecordGate.open,
    )

    def get(self: Any, *args: Any, **kwargs: Any) -> Any:
        spy.loads += 1
        return real_get(self, *args, **kwargs)

    def true_marginal(column_codes: Any, domain: Any, attrs: Any) -> Any:
        spy.bincounts.append(tuple(attrs))
        return real_true_marginal(column_codes, domain, attrs)

    @contextmanager
    def open_gate(self: gate.RecordGate, **kwargs: Any) -> Iterator[gate.RecordGate]:
        if self not in spy.gates:
            spy.gates.append(self)
        with real_open(self, **kwargs) as opened:
            yield opened

    monkeypatch.setattr(columns.ColumnCache, "get", get)
    monkeypatch.setattr(gate, "true_marginal", true_marginal)
    monkeypatch.setattr(gate.RecordGate, "open", open_gate)
    yield spy


@pytest.fixture(scope="module")
def stored(api: ApiHelper) -> dict[str, Any]:
    table = codes(3)
    dataset = api.upload_dataset(csv_of(table), SCHEMA)
    tenant = api.create_tenant()
    api.grant(dataset["id"], tenant["id"], 5)
    return {"table": table, "dataset": dataset, "headers": tenant["headers"]}


TEN = [("a",), ("b",), ("c",), ("d",), ("a", "b"), ("b", "a"), ("c", "d"), ("a", "c")]
TEN += [("b", "c", "a"), ("d", "a")]


def test_a_measurement_of_ten_marginals_reads_the_records_once(
    client: TestClient,
    stored: dict[str, Any],
    database: Database,
    settings: Settings,
    scans: Scans,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No noise, so the stored values are the counts the reader gave.
    monkeypatch.setattr(measuring, "draw", lambda kind, counts, scale: counts)
    response = client.post(
        f"/v1/datasets/{stored['dataset']['id']}/measurements",
        json={"marginals": [list(m) for m in TEN], "noise": "gaussian", "rho": 0.5},
        headers=stored["headers"],
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    assert job_row(database, job_id).status == "succeeded"
    assert scans.loads == 1  # one read of the columns
    # one bincount for each maximal set, none for the marginals they contain
    assert len(scans.bincounts) == 3
    assert set(map(frozenset, scans.bincounts)) == {
        frozenset(m) for m in [("b", "c", "a"), ("c", "d"), ("d", "a")]
    }
    with database.read_only() as session:
        records = (
            session.query(MeasurementRecord)
            .filter_by(job_id=job_id)
            .order_by(MeasurementRecord.position)
            .all()
        )
        assert [tuple(r.attributes) for r in records] == TEN
        for record, attrs in zip(records, TEN, strict=True):
            values = unpack_column(record.values)
            assert np.array_equal(values, direct(stored["table"], attrs)), attrs
    # the job's gate is closed: its reader refuses, kept counts and all
    (used,) = scans.gates
    with pytest.raises(gate.UngatedAccess):
        used.marginal(("a",))
    with pytest.raises(gate.UngatedAccess):
        used.marginals([("a", "b")])


@pytest.mark.parametrize("kind", ["aim", "mwem"])
def test_a_mechanism_reads_the_records_once_for_all_its_rounds(
    client: TestClient,
    stored: dict[str, Any],
    database: Database,
    settings: Settings,
    scans: Scans,
    kind: str,
) -> None:
    workload = [list(p) for p in combinations(ATTRS, 2)]
    body: dict[str, Any] = {"rho": 0.2, "workload": workload}
    if kind == "mwem":
        body["rounds"] = 4
    response = client.post(
        f"/v1/datasets/{stored['dataset']['id']}/mechanisms/{kind}",
        json=body,
        headers=stored["headers"],
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    Worker(database, settings, poll_seconds=0.01).run_until_idle()
    job = job_row(database, job_id)
    assert job.status == "succeeded", job.error
    with database.read_only() as session:
        rounds = session.query(MeasurementRecord).filter_by(job_id=job_id).count()
    assert rounds >= 2  # several accesses...
    assert scans.loads == 1  # ...one read of the records
    assert len(scans.bincounts) == len(workload)
    assert set(map(frozenset, scans.bincounts)) == set(map(frozenset, workload))
