"""The record reader: the stored columns decoded, exact marginals of them, and the cache of
decoded columns a worker keeps (one entry per dataset and attribute, bounded in bytes).

Only `app.services.gate` imports this module (an import-linter contract says so): every
read of raw records passes the gate, which records its cost as used before it reads.
`true_marginal` is the one place a measurement counts the data, so it can move (chunked
columns, a GROUP BY pushed down to the database) without touching anything else.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence

import numpy as np
from cachetools import LRUCache
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.db import Dataset, DatasetColumn
from app.errors import NotFound, RecordsPurged
from app.ingest import FRACTION_PREFIX, unpack_column
from app.pgm.domain import Domain


def load_columns(
    session: Session, dataset_id: str, attributes: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """The stored integer codes of the named columns (every attribute's if None), by name.

    A binned attribute's places within its bins are stored beside its codes
    (`app.ingest.fractions`): named, they are loaded like a column; None leaves them out."""
    query = select(DatasetColumn).where(DatasetColumn.dataset_id == dataset_id)
    wanted = None if attributes is None else set(attributes)
    if wanted is not None:
        query = query.where(DatasetColumn.name.in_(wanted))
    else:
        query = query.where(DatasetColumn.name.not_like(f"{FRACTION_PREFIX}%"))
    columns = {
        column.name: unpack_column(column.data)
        for column in session.scalars(query.order_by(DatasetColumn.position))
    }
    if wanted is not None and wanted - columns.keys():
        missing = ", ".join(sorted(wanted - columns.keys()))
        raise NotFound(f"dataset {dataset_id} has no stored column(s): {missing}")
    return columns


def true_marginal(
    columns: dict[str, np.ndarray], domain: Domain, attrs: Sequence[str]
) -> np.ndarray:
    """Exact counts over `attrs` (row-major in that order) by one bincount over the columns.

    The one place the data is read for a measurement, so it can move (chunked columns,
    a GROUP BY pushed down to the database) without touching anything else.
    """
    shape = domain.shape(attrs)
    if len(attrs) == 1:
        flat = columns[attrs[0]].astype(np.intp, copy=False)
    else:
        flat = np.ravel_multi_index([columns[a].astype(np.intp, copy=False) for a in attrs], shape)
    return np.bincount(flat, minlength=math.prod(shape)).astype(np.int64)


# Columns a worker keeps decoded: 2M rows × 40 one-byte columns are 80 MB; 10⁷ rows, 400 MB.
COLUMN_CACHE_BYTES = 1 << 30


class ColumnCache:
    """A worker's decoded columns, one entry per (dataset, attribute) (datasets never change
    once uploaded), the most recently used up to `max_bytes` in a `cachetools.LRUCache`
    behind a lock. A job loads only the attributes it counts over, in one query."""

    def __init__(self, max_bytes: int = COLUMN_CACHE_BYTES) -> None:
        self._columns: LRUCache[tuple[str, str], np.ndarray] = LRUCache(
            maxsize=max_bytes, getsizeof=lambda column: max(int(column.nbytes), 1)
        )
        self._lock = threading.Lock()

    def get(
        self, session: Session, dataset_id: str, attributes: Iterable[str]
    ) -> dict[str, np.ndarray]:
        """The named attributes' codes, loading from the database only those not cached;
        RecordsPurged (and the dataset forgotten here) once the records are destroyed.

        The check is one small read per use: a worker must not measure from a copy of
        records the curator destroyed, nor keep that copy in memory.
        """
        if records_gone(session, dataset_id):
            self.forget(dataset_id)
            raise RecordsPurged()
        wanted = list(dict.fromkeys(attributes))
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for name in wanted:
                column = self._columns.get((dataset_id, name))
                if column is not None:
                    found[name] = column
        missing = [name for name in wanted if name not in found]
        if missing:
            loaded = load_columns(session, dataset_id, missing)
            found.update(loaded)
            with self._lock:
                for name, column in loaded.items():
                    if column.nbytes <= self._columns.maxsize:
                        self._columns[(dataset_id, name)] = column
        return {name: found[name] for name in wanted}

    def holds(self, dataset_id: str) -> bool:
        """Whether any of the dataset's columns are cached here."""
        with self._lock:
            return any(key[0] == dataset_id for key in self._columns)

    def forget(self, dataset_id: str) -> None:
        with self._lock:
            for key in [key for key in self._columns if key[0] == dataset_id]:
                self._columns.pop(key, None)

    def forget_retired(self, session: Session) -> None:
        """Drop the cached columns of datasets whose records were purged or deleted since."""
        with self._lock:
            cached = sorted({dataset_id for dataset_id, _ in self._columns})
        if not cached:
            return
        retired = session.scalars(
            select(Dataset.id).where(
                Dataset.id.in_(cached),
                or_(Dataset.records_purged_at.is_not(None), Dataset.deleted_at.is_not(None)),
            )
        ).all()
        for dataset_id in retired:
            self.forget(dataset_id)


def records_gone(session: Session, dataset_id: str) -> bool:
    """Whether the dataset's raw records were destroyed (purged, or the dataset deleted)."""
    row = session.execute(
        select(Dataset.records_purged_at, Dataset.deleted_at).where(Dataset.id == dataset_id)
    ).first()
    return row is None or row[0] is not None or row[1] is not None
