"""The model store: versions numbered per dataset, lazy columns, covered measurements, cache."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from sqlalchemy import func, select
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.exc import InvalidRequestError

from app.db import Dataset, Job, MeasurementRecord, ModelVersion
from app.ingest import pack_column
from app.pgm.domain import Domain
from app.pgm.estimation import fit
from app.pgm.measurement import Measurement
from app.services import models as model_service
from app.services.models import LoadedModel, ModelCache, NoModel

SCHEMA = {
    "attributes": [
        {"name": "a", "type": "categorical", "values": ["x", "y"]},
        {"name": "b", "type": "integer", "size": 3, "clip": False},
    ]
}
DOMAIN = Domain(("a", "b"), (2, 3))


def _dataset(database) -> str:
    with database.unit_of_work() as session:
        dataset = Dataset(name="models-test", rows=60, schema_json=SCHEMA)
        session.add(dataset)
        session.flush()
        return dataset.id


def _measure(database, dataset_id: str, attrs, values, noise="gaussian", scale=1.0) -> int:
    with database.unit_of_work() as session:
        job = Job(dataset_id=dataset_id, kind="measure", params={})
        session.add(job)
        session.flush()
        earlier = session.scalar(
            select(func.count())
            .select_from(MeasurementRecord)
            .where(MeasurementRecord.dataset_id == dataset_id)
        )
        record = MeasurementRecord(
            number=int(earlier or 0) + 1,
            dataset_id=dataset_id,
            job_id=job.id,
            position=0,
            attributes=list(attrs),
            noise=noise,
            scale=scale,
            rho_units=1,
            values=pack_column(np.asarray(values, dtype=np.int64)),
        )
        session.add(record)
        session.flush()
        return record.id


def _fit_and_save(database, dataset_id, measurements, high_water):
    model, record = fit(DOMAIN, measurements, max_iterations=200)
    with database.unit_of_work() as session:
        row = model_service.save_version(
            session,
            dataset_id=dataset_id,
            model=model,
            record=record,
            high_water=high_water,
            measurement_count=len(measurements),
        )
        return row.version, model, record


@pytest.fixture
def dataset_id(database) -> str:
    return _dataset(database)


def test_versions_count_up_per_dataset_and_round_trip(database, dataset_id) -> None:
    with database.read_only() as session:
        assert model_service.latest_version_row(session, dataset_id) is None
        with pytest.raises(NoModel) as refused:
            model_service.current_model(session, dataset_id, cache=ModelCache())
    assert refused.value.status == 404 and refused.value.code == "no_model"
    assert refused.value.message == "no model yet: measure something first"

    first_id = _measure(database, dataset_id, ("a", "b"), [10, 12, 8, 9, 11, 10])
    m1 = Measurement(("a", "b"), [10, 12, 8, 9, 11, 10], "gaussian", 1.0)
    version, model, _record = _fit_and_save(database, dataset_id, [m1], first_id)
    assert version == 1
    other = _dataset(database)  # another dataset's versions start at 1 too
    other_version, _, _ = _fit_and_save(database, other, [m1], first_id)
    assert other_version == 1
    second_id = _measure(database, dataset_id, ("b",), [20, 21, 19], "laplace", 2.0)
    m2 = Measurement(("b",), [20, 21, 19], "laplace", 2.0)
    version2, _model2, record2 = _fit_and_save(database, dataset_id, [m1, m2], second_id)
    assert version2 == 2

    with database.read_only() as session:
        row = model_service.latest_version_row(session, dataset_id)
        assert row is not None and row.version == 2 and row.high_water == second_id
        assert row.measurement_count == 2 and row.solver == record2.solver
        assert row.iterations == record2.iterations and row.loss == pytest.approx(
            record2.final_loss
        )
        assert "data" in sa_inspect(row).unloaded  # the model bytes were not read
        with pytest.raises(InvalidRequestError):
            _ = row.data
        loaded = model_service.load_model(session, dataset_id, 1)
    np.testing.assert_allclose(loaded.marginal(("a", "b")), model.marginal(("a", "b")))
    assert loaded.cliques == model.cliques and loaded.total == pytest.approx(model.total)


def test_covered_measurements_stop_at_the_high_water_mark(database, dataset_id) -> None:
    first = _measure(database, dataset_id, ("a",), [30, 30])
    _fit_and_save(database, dataset_id, [Measurement(("a",), [30, 30], "gaussian", 1.0)], first)
    later = _measure(database, dataset_id, ("a", "b"), [5] * 6, "laplace", 3.0)
    with database.read_only() as session:
        current = model_service.current_model(session, dataset_id, cache=ModelCache())
        everything = model_service.covered_measurements(session, dataset_id, later)
    assert [m.id for m in current.measurements] == [first]
    assert current.measurements[0].attributes == ("a",)
    assert current.measurements[0].noise_variance == 1.0
    assert [m.id for m in everything] == [first, later]
    assert everything[1].noise == "laplace" and everything[1].noise_variance == 18.0
    assert current.measured_attributes == {"a"}
    assert current.schema.names == ("a", "b") and current.version == 1


def test_a_duplicate_version_is_refused_by_the_primary_key(
    database, dataset_id, monkeypatch
) -> None:
    high = _measure(database, dataset_id, ("a",), [30, 30])
    measurement = Measurement(("a",), [30, 30], "gaussian", 1.0)
    _fit_and_save(database, dataset_id, [measurement], high)
    # Two fits that both read "latest = 0" (which the fit lock prevents) would collide.
    monkeypatch.setattr(model_service, "latest_version_number", lambda *_: None)
    with pytest.raises(model_service.ModelVersionExists) as refused:
        _fit_and_save(database, dataset_id, [measurement], high)
    assert refused.value.status == 409
    with database.read_only() as session:
        assert session.query(ModelVersion).filter_by(dataset_id=dataset_id).count() == 1


def test_current_model_is_cached_per_version(database, dataset_id) -> None:
    high = _measure(database, dataset_id, ("a",), [30, 30])
    measurement = Measurement(("a",), [30, 30], "gaussian", 1.0)
    _fit_and_save(database, dataset_id, [measurement], high)
    cache = ModelCache()
    with database.read_only() as session:
        first = model_service.current_model(session, dataset_id, cache=cache)
        second = model_service.current_model(session, dataset_id, cache=cache)
    assert first is second and cache.misses == 1 and cache.hits == 1
    _fit_and_save(database, dataset_id, [measurement], high)
    with database.read_only() as session:
        third = model_service.current_model(session, dataset_id, cache=cache)
    assert third is not first and third.version == 2 and cache.misses == 2


def _entry(dataset_id: str, version: int) -> LoadedModel:
    return LoadedModel(  # type: ignore[arg-type]
        dataset_id=dataset_id,
        version=version,
        model=None,
        schema=None,
        fitted_at=None,
        solver="admm",
        iterations=1,
        loss=0.0,
        seconds=0.0,
        cliques=(),
        high_water=0,
        measurements=(),
    )


def test_cache_evicts_the_least_recently_used() -> None:
    cache = ModelCache(max_entries=2)
    cache.put(_entry("d", 1))
    cache.put(_entry("d", 2))
    assert cache.get("d", 1) is not None  # 1 is now the most recently used
    cache.put(_entry("d", 3))
    assert cache.get("d", 2) is None and cache.get("d", 1) is not None
    assert len(cache) == 2


def test_concurrent_misses_load_a_version_once() -> None:
    cache = ModelCache()
    loads = []

    def load() -> LoadedModel:
        loads.append(1)
        time.sleep(0.05)
        return _entry("d", 7)

    results: list[LoadedModel] = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.get_or_load("d", 7, load)))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(loads) == 1 and len(results) == 8
    assert all(r is results[0] for r in results)
