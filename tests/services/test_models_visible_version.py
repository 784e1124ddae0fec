"""The free queries' one-statement visibility and latest-version check, without a session."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from app.db import Dataset, Grant
from app.errors import NotFound
from app.pgm.domain import Domain
from app.pgm.estimation import fit
from app.pgm.measurement import Measurement
from app.services import answers
from app.services import models as model_service
from app.services.models import NoModel

SCHEMA = {"attributes": [{"name": "a", "type": "categorical", "values": ["x", "y"]}]}


def _save_version(database, dataset_id: str, counts: list[int]) -> int:
    model, record = fit(
        Domain(("a",), (2,)),
        [Measurement(("a",), np.asarray(counts), "gaussian", 1.0)],
        max_iterations=50,
    )
    with database.unit_of_work() as session:
        return model_service.save_version(
            session,
            dataset_id=dataset_id,
            model=model,
            record=record,
            high_water=0,
            measurement_count=1,
        ).version


def _both(database, dataset_id: str, tenant_id: str | None) -> int | None:
    """The fast check's answer, asserted equal to the session-based one."""
    fast = model_service.visible_latest_version_on(database.engine, dataset_id, tenant_id=tenant_id)
    with database.read_only() as session:
        slow = model_service.visible_latest_version(session, dataset_id, tenant_id=tenant_id)
    assert fast == slow
    return fast


def test_visibility_and_latest_version_in_one_statement(database, seed) -> None:
    holder, outsider = seed.tenant(), seed.tenant()
    with database.unit_of_work() as session:
        dataset = Dataset(name="visible-test", rows=10, schema_json=SCHEMA)
        session.add(dataset)
        session.flush()
        session.add(Grant(tenant_id=holder.id, dataset_id=dataset.id, rho_limit_units=1))
        dataset_id = dataset.id

    assert _both(database, dataset_id, holder.id) is None  # visible, not fitted yet
    assert _both(database, dataset_id, None) is None  # the admin sees every dataset
    with pytest.raises(NoModel):
        answers.visible_ready_model(database, dataset_id, tenant_id=holder.id)
    # No grant, or no such dataset: the same NotFound.
    for missing, tenant_id in ((dataset_id, outsider.id), (str(uuid.uuid4()), holder.id)):
        with pytest.raises(NotFound) as refused:
            model_service.visible_latest_version_on(database.engine, missing, tenant_id=tenant_id)
        assert refused.value.code == "not_found"

    assert _save_version(database, dataset_id, [6, 4]) == 1
    assert _both(database, dataset_id, holder.id) == 1
    first = answers.visible_ready_model(database, dataset_id, tenant_id=holder.id)
    assert first.version == 1
    # A new version is answered by the very next call: nothing caches the number.
    assert _save_version(database, dataset_id, [2, 8]) == 2
    assert _both(database, dataset_id, holder.id) == 2
    second = answers.visible_ready_model(database, dataset_id, tenant_id=holder.id)
    assert second.version == 2 and second is not first
    assert answers.visible_ready_model(database, dataset_id, tenant_id=holder.id) is second
    # Both versions were calibrated where they were loaded, so either may be answered
    # on the event loop without that work.
    assert answers.ready_model(dataset_id, 1) is first
    assert answers.ready_model(dataset_id, 2) is second
    assert answers.ready_model(dataset_id, 3) is None


def test_a_cached_but_uncalibrated_version_is_not_ready(database) -> None:
    with database.unit_of_work() as session:
        dataset = Dataset(name="ready-test", rows=10, schema_json=SCHEMA)
        session.add(dataset)
        session.flush()
        dataset_id = dataset.id
    version = _save_version(database, dataset_id, [5, 5])
    with database.read_only() as session:  # loaded by another path: cached, not calibrated
        loaded = model_service.current_model(session, dataset_id, version=version)
    assert model_service.process_model_cache().get(dataset_id, version) is loaded
    assert answers.ready_model(dataset_id, version) is None
    assert answers.load_ready_model(database, dataset_id, version) is loaded
    assert answers.ready_model(dataset_id, version) is loaded
