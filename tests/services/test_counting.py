"""Counting true marginals: vectorised equals a plain count; a job reads only its columns."""

from __future__ import annotations

from collections import Counter
from itertools import product
from typing import Any

import numpy as np
import pytest
from conftest import ApiHelper, adult_domain, adult_slice
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database
from app.pgm.domain import Domain
from app.services import columns as column_service
from app.services.columns import ColumnCache, true_marginal
from app.worker import Worker


def plain_count(
    columns: dict[str, np.ndarray], domain: Domain, attrs: tuple[str, ...]
) -> np.ndarray:
    """The reference: count each row's tuple in a Python loop, then lay the counts out."""
    counter = Counter(zip(*(columns[a].tolist() for a in attrs), strict=True))
    cells = product(*(range(domain.size_of(a)) for a in attrs))
    return np.array([counter.get(cell, 0) for cell in cells], dtype=np.int64)


@pytest.mark.parametrize(
    "attrs", [("a",), ("c", "a"), ("a", "b", "c"), ("d", "b"), ("b", "d", "c", "a")]
)
def test_vectorised_counting_equals_a_plain_count(attrs: tuple[str, ...]) -> None:
    rng = np.random.default_rng(3)
    domain = Domain(("a", "b", "c", "d"), (3, 7, 2, 300))
    rows = 5000
    columns = {
        "a": rng.integers(0, 3, rows).astype(np.uint8),
        "b": rng.integers(0, 7, rows).astype(np.uint8),
        "c": np.zeros(rows, dtype=np.uint8),  # a value never seen (1) must count 0
        "d": rng.integers(0, 300, rows).astype(np.uint16),
    }
    counted = true_marginal(columns, domain, attrs)
    assert counted.dtype == np.int64 and counted.size == domain.cells(attrs)
    np.testing.assert_array_equal(counted, plain_count(columns, domain, attrs))
    assert counted.sum() == rows


def test_the_column_cache_loads_only_what_is_asked_and_not_cached(
    api: ApiHelper, database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = api.upload_dataset(adult_slice(300), adult_domain())
    asked: list[list[str]] = []
    real_load = column_service.load_columns

    def spy(session: Any, dataset_id: str, attributes: Any = None) -> Any:
        asked.append(sorted(attributes))
        return real_load(session, dataset_id, attributes)

    monkeypatch.setattr(column_service, "load_columns", spy)
    cache = ColumnCache()
    with database.read_only() as session:
        first = cache.get(session, dataset["id"], ["sex", "race", "sex"])
        second = cache.get(session, dataset["id"], ["race", "age"])
    assert list(first) == ["sex", "race"] and list(second) == ["race", "age"]
    assert asked == [["race", "sex"], ["age"]]
    assert second["race"] is first["race"]
    # A cache too small for a column still answers, without keeping it.
    tiny = ColumnCache(max_bytes=1)
    with database.read_only() as session:
        assert tiny.get(session, dataset["id"], ["age"])["age"].size == 300
        tiny.get(session, dataset["id"], ["age"])
    assert asked[-2:] == [["age"], ["age"]]


def test_a_measurement_job_reads_only_the_columns_it_counts(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant = api.create_tenant()
    dataset = api.upload_dataset(adult_slice(300), adult_domain())
    api.grant(dataset["id"], tenant["id"], 1)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/measurements",
        json={"marginals": [["sex", "race"], ["race"], ["age", "sex"]], "rho": 0.1},
        headers=tenant["headers"],
    )
    assert response.status_code == 202
    asked: list[list[str]] = []
    real_load = column_service.load_columns

    def spy(session: Any, dataset_id: str, attributes: Any = None) -> Any:
        asked.append(sorted(attributes))
        return real_load(session, dataset_id, attributes)

    monkeypatch.setattr(column_service, "load_columns", spy)
    assert Worker(database, settings, poll_seconds=0.01).run_until_idle() == 1
    assert asked == [["age", "race", "sex"]]
