"""The model store: persisted model versions of a dataset and a per-process cache of them.

A model version is what a fit of all of a dataset's measurements produced: the
serialised `GraphicalModel`, its cliques, the solver's figures, and `high_water`, the
largest measurement id the fit included. Versions are numbered 1, 2, … per dataset
and never change once written, so every process may keep a deserialised copy of a
version for as long as it likes: `ModelCache` keeps a few, keyed (dataset, version),
and `current_model` answers "what answers queries on this dataset now" with one
small query (the latest version number) when that version is cached.

- The worker calls `save_version` while it holds the dataset's fit lock, so version
  numbers do not race; the primary key (dataset_id, version) still refuses a duplicate.
- The API calls `current_model` (NotFound `no_model` before the first fit) in a
  read-only session; nothing here takes a write lock unless it writes.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

from cachetools import LRUCache
from sqlalchemy import Engine, bindparam, exists, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, load_only

from app.db import Dataset, Grant, MeasurementRecord, ModelVersion
from app.errors import Conflict, NotFound, PrivqError
from app.pgm.estimation import FitRecord
from app.pgm.measurement import noise_variance
from app.pgm.model import GraphicalModel
from app.schema import DatasetSchema, parse_schema
from app.services.bounds import BoundContext, load_context
from app.services.precompiled import PrecompiledSelect
from app.services.within_bin_means import FractionSums, released_fraction_sums

# Deserialised versions kept per process. Versions of one dataset supersede each
# other, so a few entries cover the datasets in active use; an Adult-sized model is
# well under a megabyte of potentials (plus its calibrated tree once queried).
DEFAULT_CACHE_ENTRIES = 16


class NoModel(NotFound, code="no_model"):
    """no model yet: measure something first"""


class ModelVersionExists(Conflict, code="model_version_exists"):
    """This model version was already saved by another fit."""


class StoredModelCorrupt(PrivqError, code="model_corrupt"):
    """A stored model version could not be read back."""


@dataclass(frozen=True)
class CoveredMeasurement:
    """A measurement a model version includes: which marginal, and its noise (public)."""

    id: int
    number: int  # its id in the API: its number in the dataset
    attributes: tuple[str, ...]
    noise: str  # "gaussian" (scale is σ) or "laplace" (scale is b)
    scale: float

    @property
    def noise_variance(self) -> float:
        """Variance of the noise on each measured cell: σ², or 2b² for Laplace."""
        return noise_variance(self.noise, self.scale)


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """One deserialised model version and what a query needs to know about it."""

    dataset_id: str
    version: int
    model: GraphicalModel
    schema: DatasetSchema
    fitted_at: datetime
    solver: str
    iterations: int
    loss: float
    seconds: float
    cliques: tuple[tuple[str, ...], ...]
    high_water: int
    measurements: tuple[CoveredMeasurement, ...]
    bounds: BoundContext = field(default_factory=BoundContext)
    estimator: str = "mle"
    # The within-bin means releases the version covers (id ≤ high_water), by attribute.
    within_bins: dict[str, FractionSums] = field(default_factory=dict)

    @property
    def measured_attributes(self) -> frozenset[str]:
        """Every attribute some covered measurement touched."""
        return frozenset(a for m in self.measurements for a in m.attributes)


class ModelCache:
    """The most recently used `LoadedModel`s keyed (dataset_id, version): a
    `cachetools.LRUCache` behind a lock, shared by request and worker threads.

    Concurrent misses on one key load it once: the first caller loads while the
    others wait on that key's lock, then find it cached.
    """

    def __init__(self, max_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("a model cache holds at least one entry")
        self.max_entries = max_entries
        self._entries: LRUCache[tuple[str, int], LoadedModel] = LRUCache(maxsize=max_entries)
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, int], threading.Lock] = {}
        self.hits = 0
        self.misses = 0

    def get(self, dataset_id: str, version: int) -> LoadedModel | None:
        with self._lock:
            entry = self._entries.get((dataset_id, version))
            if entry is not None:
                self.hits += 1
            return entry

    def put(self, entry: LoadedModel) -> None:
        with self._lock:
            self._entries[(entry.dataset_id, entry.version)] = entry

    def get_or_load(
        self, dataset_id: str, version: int, load: Callable[[], LoadedModel]
    ) -> LoadedModel:
        entry = self.get(dataset_id, version)
        if entry is not None:
            return entry
        key = (dataset_id, version)
        with self._lock:
            key_lock = self._loading.setdefault(key, threading.Lock())
        with key_lock:
            entry = self.get(dataset_id, version)
            if entry is not None:
                return entry
            with self._lock:
                self.misses += 1
            try:
                entry = load()
                self.put(entry)
            finally:
                with self._lock:
                    self._loading.pop(key, None)
        return entry

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


@lru_cache(maxsize=1)
def process_model_cache() -> ModelCache:
    """The cache every request and worker task of this process shares."""
    return ModelCache()


# ---- writing ------------------------------------------------------------------------


def _finite_loss(record: FitRecord) -> float:
    """The loss to store: the final model's own loss, else the last reported one."""
    if math.isfinite(record.final_loss):
        return float(record.final_loss)
    for value in reversed(record.losses):
        if math.isfinite(value):
            return float(value)
    raise ValueError("the fit reported no finite loss; refusing to store the model")


def save_version(
    session: Session,
    *,
    dataset_id: str,
    model: GraphicalModel,
    record: FitRecord,
    high_water: int,
    measurement_count: int,
) -> ModelVersion:
    """Add the next version of the dataset's model (latest + 1); flushes, never commits.

    The caller holds the dataset's fit lock, so no other fit picks the same number;
    if one did anyway, the primary key refuses it (ModelVersionExists, 409).
    """
    latest = latest_version_number(session, dataset_id)
    row = ModelVersion(
        dataset_id=dataset_id,
        version=(latest or 0) + 1,
        data=model.to_bytes(),
        cliques=[list(clique) for clique in model.cliques],
        high_water=int(high_water),
        measurement_count=int(measurement_count),
        solver=record.solver,
        estimator=record.estimator,
        iterations=int(record.iterations),
        loss=_finite_loss(record),
        seconds=float(record.seconds),
    )
    try:
        with session.begin_nested():
            session.add(row)
            session.flush()
    except IntegrityError:
        raise ModelVersionExists(
            f"version {row.version} of this dataset's model was saved by another fit"
        ) from None
    return row


# ---- reading ------------------------------------------------------------------------


def latest_version_number(session: Session, dataset_id: str) -> int | None:
    """The newest version number of the dataset's model, or None before the first fit."""
    return session.scalar(
        select(ModelVersion.version)
        .where(ModelVersion.dataset_id == dataset_id)
        .order_by(ModelVersion.version.desc())
        .limit(1)
    )


_SUMMARY_COLUMNS = (
    ModelVersion.dataset_id,
    ModelVersion.version,
    ModelVersion.cliques,
    ModelVersion.high_water,
    ModelVersion.measurement_count,
    ModelVersion.solver,
    ModelVersion.estimator,
    ModelVersion.iterations,
    ModelVersion.loss,
    ModelVersion.seconds,
    ModelVersion.fitted_at,
)


def latest_version_row(session: Session, dataset_id: str) -> ModelVersion | None:
    """The newest version's row without its model bytes (`data` is not loaded)."""
    return session.scalars(
        select(ModelVersion)
        .options(load_only(*_SUMMARY_COLUMNS, raiseload=True))
        .where(ModelVersion.dataset_id == dataset_id)
        .order_by(ModelVersion.version.desc())
        .limit(1)
    ).one_or_none()


def load_model(session: Session, dataset_id: str, version: int) -> GraphicalModel:
    """Deserialise one stored version (NotFound if there is no such version)."""
    data = session.scalar(
        select(ModelVersion.data).where(
            ModelVersion.dataset_id == dataset_id, ModelVersion.version == version
        )
    )
    if data is None:
        raise NotFound(f"model version {version} not found")
    try:
        return GraphicalModel.from_bytes(data)
    except ValueError as error:
        raise StoredModelCorrupt(f"model version {version} could not be read: {error}") from None


def covered_measurements(
    session: Session, dataset_id: str, high_water: int
) -> tuple[CoveredMeasurement, ...]:
    """The dataset's active measurements with id ≤ high_water (what a version was fitted on).

    Reads only the public description of each measurement, never its noisy values.
    """
    rows = session.execute(
        select(
            MeasurementRecord.id,
            MeasurementRecord.number,
            MeasurementRecord.attributes,
            MeasurementRecord.noise,
            MeasurementRecord.scale,
        )
        .where(
            MeasurementRecord.dataset_id == dataset_id,
            MeasurementRecord.id <= high_water,
            MeasurementRecord.status == "active",
            MeasurementRecord.kind == "marginal",
        )
        .order_by(MeasurementRecord.id)
    ).all()
    return tuple(
        CoveredMeasurement(
            id=int(row.id),
            number=int(row.number),
            attributes=tuple(row.attributes),
            noise=row.noise,
            scale=float(row.scale),
        )
        for row in rows
    )


def load_version(session: Session, dataset_id: str, version: int) -> LoadedModel:
    """Everything about one version, deserialised: what the cache holds."""
    row = session.scalars(
        select(ModelVersion)
        .options(load_only(*_SUMMARY_COLUMNS, raiseload=True))
        .where(ModelVersion.dataset_id == dataset_id, ModelVersion.version == version)
    ).one_or_none()
    if row is None:
        raise NotFound(f"model version {version} not found")
    schema_json = session.scalar(select(Dataset.schema_json).where(Dataset.id == dataset_id))
    if schema_json is None:
        raise NotFound("dataset not found")
    schema = parse_schema(schema_json)
    model = load_model(session, dataset_id, version)
    if model.domain != schema.domain():
        raise StoredModelCorrupt(f"model version {version} does not match the dataset's schema")
    return LoadedModel(
        dataset_id=dataset_id,
        version=row.version,
        model=model,
        schema=schema,
        fitted_at=row.fitted_at,
        solver=row.solver,
        estimator=row.estimator,
        iterations=row.iterations,
        loss=row.loss,
        seconds=row.seconds,
        cliques=tuple(tuple(clique) for clique in row.cliques),
        high_water=row.high_water,
        measurements=covered_measurements(session, dataset_id, row.high_water),
        within_bins=released_fraction_sums(session, dataset_id, up_to=row.high_water),
        bounds=load_context(
            session,
            dataset_id,
            version=row.version,
            model=model,
            high_water=row.high_water,
            load_model=lambda reference: load_model(session, dataset_id, reference),
        ),
    )


# The hot path of every free query: whether the caller may see the dataset and its
# latest version, in one round trip. Built once (ORM statement construction costs
# more than the query itself) and run straight on a pooled driver connection.
_LATEST_OF_DATASET = (
    select(ModelVersion.version)
    .where(ModelVersion.dataset_id == Dataset.id)
    .order_by(ModelVersion.version.desc())
    .limit(1)
    .scalar_subquery()
)
_VISIBLE_LATEST_VERSION = select(Dataset.id, _LATEST_OF_DATASET).where(
    Dataset.id == bindparam("dataset_id"), Dataset.deleted_at.is_(None)
)
_VISIBLE_LATEST_VERSION_FOR_TENANT = _VISIBLE_LATEST_VERSION.where(
    exists().where(
        Grant.dataset_id == Dataset.id,
        Grant.tenant_id == bindparam("tenant_id"),
        Grant.revoked_at.is_(None),
    )
)


_VISIBLE_LATEST_VERSION_QUERY = PrecompiledSelect(_VISIBLE_LATEST_VERSION)
_VISIBLE_LATEST_VERSION_FOR_TENANT_QUERY = PrecompiledSelect(_VISIBLE_LATEST_VERSION_FOR_TENANT)


def _latest_of_visible(found: Any) -> int | None:
    if found is None:
        raise NotFound("dataset not found")
    return None if found[1] is None else int(found[1])


def visible_latest_version(
    session: Session, dataset_id: str, *, tenant_id: str | None
) -> int | None:
    """The latest version of a dataset the caller may see (None before the first fit).

    `tenant_id` None is the admin (sees every dataset). A tenant without a grant on the
    dataset gets NotFound, exactly as for a dataset that does not exist.
    """
    if tenant_id is None:
        row = session.connection().execute(_VISIBLE_LATEST_VERSION, {"dataset_id": dataset_id})
    else:
        row = session.connection().execute(
            _VISIBLE_LATEST_VERSION_FOR_TENANT,
            {"dataset_id": dataset_id, "tenant_id": tenant_id},
        )
    return _latest_of_visible(row.first())


def visible_latest_version_on(
    engine: Engine, dataset_id: str, *, tenant_id: str | None
) -> int | None:
    """`visible_latest_version` as one statement on a pooled connection, without a session.

    The same query and answer, never cached: a version saved a moment ago is seen by
    the next request.
    """
    if tenant_id is None:
        found = _VISIBLE_LATEST_VERSION_QUERY.first(engine, {"dataset_id": dataset_id})
    else:
        found = _VISIBLE_LATEST_VERSION_FOR_TENANT_QUERY.first(
            engine, {"dataset_id": dataset_id, "tenant_id": tenant_id}
        )
    return _latest_of_visible(found)


def current_model(
    session: Session,
    dataset_id: str,
    *,
    cache: ModelCache | None = None,
    version: int | None = None,
) -> LoadedModel:
    """The dataset's latest model version (or `version`), deserialised once per process.

    NoModel (404, `no_model`) before the first fit. The caller has already checked
    that whoever asks may see the dataset.
    """
    if version is None:
        version = latest_version_number(session, dataset_id)
    if version is None:
        raise NoModel()
    cache = process_model_cache() if cache is None else cache
    wanted = version
    return cache.get_or_load(dataset_id, wanted, lambda: load_version(session, dataset_id, wanted))
