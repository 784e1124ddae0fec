"""Which model version answers a request: visible to the caller, loaded and calibrated;
and what GET /model says about it."""

from __future__ import annotations

import threading
import weakref
from typing import Any

from sqlalchemy.orm import Session

from app.db import Database
from app.services import models as model_service
from app.services.models import LoadedModel


def visible_model(session: Session, dataset_id: str, *, tenant_id: str | None) -> LoadedModel:
    """The dataset's latest model, if the caller may see the dataset.

    `tenant_id` None is the admin. A tenant without a grant gets NotFound exactly as
    for a missing dataset; a visible dataset without a model gets NoModel (404).
    """
    version = model_service.visible_latest_version(session, dataset_id, tenant_id=tenant_id)
    if version is None:
        raise model_service.NoModel()
    return model_service.current_model(session, dataset_id, version=version)


# Loaded models whose lazy inference state (the calibrated junction tree) has been
# built by `load_ready_model`: answering from them never does that work first.
_ready_models: weakref.WeakSet[LoadedModel] = weakref.WeakSet()
_ready_lock = threading.Lock()


def ready_model(dataset_id: str, version: int) -> LoadedModel | None:
    """This process's copy of a version, if it is loaded and calibrated already."""
    cached = model_service.process_model_cache().get(dataset_id, version)
    if cached is None:
        return None
    with _ready_lock:
        return cached if cached in _ready_models else None


def load_ready_model(database: Database, dataset_id: str, version: int) -> LoadedModel:
    """Load (or take from the cache) one version and calibrate it: the slow first use of
    a version, for a worker thread. The caller has checked the dataset is visible."""
    with database.read_only() as session:
        loaded = model_service.current_model(session, dataset_id, version=version)
    loaded.model.calibrated_tree  # noqa: B018 — belief propagation, once per version
    with _ready_lock:
        _ready_models.add(loaded)
    return loaded


def visible_ready_model(
    database: Database, dataset_id: str, *, tenant_id: str | None
) -> LoadedModel:
    """`visible_model` for a request: the visibility and latest-version check is one
    statement on a pooled connection (no session, never cached); a session is opened
    only when this process has not loaded that version yet."""
    version = model_service.visible_latest_version_on(
        database.hot_read_engine, dataset_id, tenant_id=tenant_id
    )
    if version is None:
        raise model_service.NoModel()
    return ready_model(dataset_id, version) or load_ready_model(database, dataset_id, version)


def model_description(loaded: LoadedModel) -> dict[str, Any]:
    """What GET /model shows: version, structure, fit figures, measurements covered."""
    measurements = []
    for m in loaded.measurements:
        scale_key = "sigma" if m.noise == "gaussian" else "scale"
        measurements.append(
            {
                "id": m.number,  # the API's id: the number in the dataset, not the key
                "attributes": list(m.attributes),
                "noise": m.noise,
                scale_key: m.scale,
            }
        )
    return {
        "version": loaded.version,
        "cliques": [list(c) for c in loaded.cliques],
        "fitted_at": loaded.fitted_at.isoformat(),
        "estimator": loaded.estimator,
        "solver": loaded.solver,
        "iterations": loaded.iterations,
        "loss": loaded.loss,
        "fit_seconds": loaded.seconds,
        "measurement_count": len(loaded.measurements),
        "measurements": measurements,
        "within_bin_means": [
            {"attribute": name, "releases": sums.releases, "rho": sums.rho}
            for name, sums in sorted(loaded.within_bins.items())
        ],
    }
