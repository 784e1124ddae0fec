"""State metrics read from the database when `/metrics` is scraped.

The queue and the models are shared by every replica and worker, so their state is
read from the one place that knows it, not counted by any one process:

- `privq_jobs{status}` — jobs queued and running now;
- `privq_job_queue_oldest_age_seconds` — how long the oldest queued job has waited;
- `privq_model_cells{dataset_id}` — cells of each dataset's latest model version.

Each scrape costs two indexed aggregate queries, plus one small read per dataset
whose latest model version this process has not sized yet.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app.db import Database, Dataset, Job, ModelVersion, utcnow
from app.schema import parse_schema

logger = logging.getLogger("privq.metrics")

ACTIVE_STATUSES = ("queued", "running")


class DatabaseGauges:
    """A prometheus-client collector over one `Database`."""

    def __init__(self, database: Database) -> None:
        self.database = database
        # (dataset_id, version) → cells: versions never change once written.
        self._cells: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        try:
            metrics = self._read()
        except SQLAlchemyError:
            logger.warning("metrics: cannot read the queue and models", exc_info=True)
            return
        yield from metrics

    def _read(self) -> list[Metric]:
        jobs = GaugeMetricFamily("privq_jobs", "Jobs queued and running now.", labels=["status"])
        oldest = GaugeMetricFamily(
            "privq_job_queue_oldest_age_seconds",
            "Seconds the oldest queued job has waited (0 when the queue is empty).",
        )
        cells = GaugeMetricFamily(
            "privq_model_cells",
            "Cells of the latest model version, by dataset.",
            labels=["dataset_id"],
        )
        with self.database.read_only() as session:
            counts = dict(
                session.execute(
                    select(Job.status, func.count())
                    .where(Job.status.in_(ACTIVE_STATUSES))
                    .group_by(Job.status)
                ).all()
            )
            oldest_created = session.scalar(
                select(func.min(Job.created_at)).where(Job.status == "queued")
            )
            latest = dict(
                session.execute(
                    select(ModelVersion.dataset_id, func.max(ModelVersion.version)).group_by(
                        ModelVersion.dataset_id
                    )
                ).all()
            )
            sizes = {
                dataset_id: self._model_cells(session, dataset_id, version)
                for dataset_id, version in latest.items()
            }
        for status in ACTIVE_STATUSES:
            jobs.add_metric([status], float(counts.get(status, 0)))
        age = 0.0
        if oldest_created is not None:
            if oldest_created.tzinfo is None:  # SQLite aggregates may come back naive (UTC)
                oldest_created = oldest_created.replace(tzinfo=UTC)
            age = max(0.0, (utcnow() - oldest_created).total_seconds())
        oldest.add_metric([], age)
        for dataset_id, size in sorted(sizes.items()):
            if size is not None:
                cells.add_metric([dataset_id], float(size))
        with self._lock:  # forget versions that are no longer the latest
            for key in [k for k in self._cells if latest.get(k[0]) != k[1]]:
                del self._cells[key]
        return [jobs, oldest, cells]

    def _model_cells(self, session: Session, dataset_id: str, version: int) -> int | None:
        key = (dataset_id, version)
        with self._lock:
            known = self._cells.get(key)
        if known is not None:
            return known
        cliques = session.scalar(
            select(ModelVersion.cliques).where(
                ModelVersion.dataset_id == dataset_id, ModelVersion.version == version
            )
        )
        schema_json = session.scalar(select(Dataset.schema_json).where(Dataset.id == dataset_id))
        if cliques is None or schema_json is None:
            return None
        domain = parse_schema(schema_json).domain()
        size = sum(domain.cells(tuple(clique)) for clique in cliques)
        with self._lock:
            self._cells[key] = size
        return size
