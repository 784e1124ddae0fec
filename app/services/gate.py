"""The gate: the one way a job reads its dataset's raw records, and it spends first.

Write-ahead spending. Before a job reads the records — a measurement job's noise
draws, a mechanism round's selection (which scores true marginals) and noise draw —
it opens the gate, which in one short transaction

1. checks that this worker still holds the job's lease (`jobs.require_lease`),
2. stops the job if its cancellation was asked for (`jobs.stop_if_cancelled`),
3. appends a `RecordAccess` row with the access's exact cost,

and commits; only then does it hand out the reader. Cancellation and the lease are
checked there and nowhere between the gate and storing what it produced: once a
record is written the access counts as used — refunds return only what no access
row records (`app.services.refunds`), and a retried job replays what was stored and
takes an access whose output was lost as spent, never redone.

The reader (`RecordGate.marginal`, `RecordGate.columns`) works only while the gate is
open; outside it raises `UngatedAccess`. This module is the only importer of the
record reader (`app.services.columns`), which an import-linter contract enforces,
so no new path can read records without passing here.

No database transaction is held while the records are read or noise is drawn: the
access row is committed first, the output is stored afterwards in a transaction of
its own (`store_fence`), so one tenant's large draw never holds a write lock that
others wait on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from fractions import Fraction

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Dataset, Job, MeasurementRecord, RecordAccess
from app.errors import InvariantViolated, PrivqError
from app.pgm.domain import Domain
from app.records.engine import CountingEngine, UnitCap, Validation
from app.schema import DatasetSchema
from app.services import jobs
from app.services.columns import ColumnCache, true_marginal
from app.services.refunds import units_up
from app.sources import Source, SourceFile

# The worker's cache of decoded columns; only the gate reads through it.
RecordCache = ColumnCache

PURPOSES = ("measure", "round")


class UngatedAccess(InvariantViolated, code="ungated_access"):
    """Raw records were asked for outside the gate: a bug, refused before any read."""


class AccessLost(PrivqError, status=409, code="access_lost"):
    """This job's noise was drawn but lost before it was stored (its worker stopped); that
    draw stays charged, and a second one would be a second release, so the job ends here."""


def fraction_text(value: Fraction) -> str:
    return f"{value.numerator}/{value.denominator}"


def _accesses(session: Session, job_id: str) -> Sequence[RecordAccess]:
    return session.scalars(
        select(RecordAccess).where(RecordAccess.job_id == job_id).order_by(RecordAccess.sequence)
    ).all()


def lost_accesses(session: Session, job_id: str) -> list[RecordAccess]:
    """Accesses recorded (so they ran, or may have) whose output no measurement holds."""
    produced = set(
        session.scalars(
            select(MeasurementRecord.access_id).where(
                MeasurementRecord.job_id == job_id, MeasurementRecord.access_id.is_not(None)
            )
        ).all()
    )
    return [a for a in _accesses(session, job_id) if a.id not in produced]


class RecordGate:
    """One job's gate to its dataset's records (one per attempt, on the worker).

    `runner` is the `jobs.JobRunner` running the job: its database, worker id,
    `check_lease` and `columns` (its `RecordCache`).
    """

    def __init__(self, runner: jobs.JobRunner, job: Job, domain: Domain) -> None:
        self.runner = runner
        self.job_id = job.id
        self.dataset_id = job.dataset_id
        self.domain = domain
        self._cache: jobs.RecordSource = runner.columns
        self._columns: dict[str, np.ndarray] = {}
        self._open: RecordAccess | None = None

    @property
    def access_id(self) -> int:
        """The open access's id, which the measurements it produces name."""
        return self._require_open().id

    @contextmanager
    def open(
        self,
        *,
        purpose: str,
        exact_rho: Fraction,
        round_index: int | None = None,
        precheck: Callable[[Session], None] | None = None,
    ) -> Iterator[RecordGate]:
        """Record the access as used (committed), then let the body read the records.

        JobCancelled or LeaseLost here, before anything is recorded or read, and never
        later: the body runs to the end and stores what it produced. `precheck` runs in
        the same transaction before the access is recorded: a check that needs no
        records, whose refusal leaves the access unrecorded (and so refunded).
        """
        if purpose not in PURPOSES:
            raise ValueError(f"unknown access purpose {purpose!r}")
        if not exact_rho > 0:
            raise InvariantViolated("an access to the records must cost something")
        if self._open is not None:
            raise InvariantViolated("an access to the records is already open")
        self.runner.check_lease()
        database = self.runner.database
        with database.unit_of_work() as session:
            jobs.get(session, self.job_id, for_update=True)  # serialise with claims and cancels
            jobs.require_lease(session, job_id=self.job_id, owner=self.runner.worker_id)
            jobs.stop_if_cancelled(session, self.job_id)
            if precheck is not None:
                precheck(session)
            sequence = session.scalar(
                select(func.count())
                .select_from(RecordAccess)
                .where(RecordAccess.job_id == self.job_id)
            )
            access = RecordAccess(
                job_id=self.job_id,
                dataset_id=self.dataset_id,
                sequence=int(sequence or 0),
                purpose=purpose,
                round_index=round_index,
                exact_rho=fraction_text(exact_rho),
                rho_units=units_up(exact_rho),
            )
            session.add(access)
            session.flush()
            session.expunge(access)
        self._open = access
        try:
            yield self
        finally:
            self._open = None

    def _require_open(self) -> RecordAccess:
        if self._open is None:
            raise UngatedAccess()
        return self._open

    def columns(self, attributes: Iterable[str]) -> dict[str, np.ndarray]:
        """The named attributes' codes (loaded once per job), inside the gate only."""
        self._require_open()
        wanted = list(dict.fromkeys(attributes))
        missing = [a for a in wanted if a not in self._columns]
        if missing:
            with self.runner.database.read_only() as session:
                self._columns.update(self._cache.get(session, self.dataset_id, missing))
        return {a: self._columns[a] for a in wanted}

    def marginal(self, attrs: Sequence[str], *, preload: Iterable[str] = ()) -> np.ndarray:
        """Exact counts over `attrs`, inside the gate only; `preload` names attributes to
        load in the same read (a mechanism's whole workload on its first access)."""
        self._require_open()
        if any(a not in self._columns for a in attrs):
            self.columns([*preload, *attrs])
        return true_marginal(self._columns, self.domain, tuple(attrs))

    @contextmanager
    def store_fence(self) -> Iterator[Session]:
        """The transaction that stores the open access's output: it still needs this
        worker's lease (the job's row locked, so a new owner cannot slip in), and
        nothing else — a cancel asked for meanwhile is honoured at the next gate."""
        self._require_open()
        with self.runner.database.unit_of_work() as session:
            jobs.get(session, self.job_id, for_update=True)
            jobs.require_lease(session, job_id=self.job_id, owner=self.runner.worker_id)
            yield session


# -- registered sources ------------------------------------------------------------------


def source_of(dataset: Dataset) -> Source:
    """The registered source of a dataset, with the files fingerprinted at registration."""
    if dataset.source_uri is None or dataset.source_fingerprint is None:
        raise InvariantViolated("the dataset has no registered source")
    files = tuple(SourceFile(**f) for f in dataset.source_fingerprint["files"])
    return Source(uri=dataset.source_uri, files=files)


def unit_cap_of(dataset: Dataset) -> UnitCap | None:
    """The privacy unit's cap as the engines apply it, or None (a unit is one row)."""
    if dataset.unit_column is None:
        return None
    if dataset.source_secret is None:
        raise InvariantViolated("a registered source with a privacy unit has no secret")
    return UnitCap(dataset.unit_column, dataset.unit_max_rows, dataset.source_secret)


def record_engine(settings: Settings) -> CountingEngine:
    """The engine the operator chose (PRIVQ_RECORD_ENGINE), imported only when used."""
    if settings.record_engine == "spark":
        from app.records.spark import SparkEngine

        if settings.spark_remote is None:
            raise InvariantViolated("PRIVQ_RECORD_ENGINE=spark needs PRIVQ_SPARK_REMOTE")
        return SparkEngine(settings.spark_remote)
    from app.records.local import LocalEngine

    return LocalEngine()


def validate_source(
    engine: CountingEngine, dataset: Dataset, schema: DatasetSchema, files: Sequence[SourceFile]
) -> Validation:
    """The registration scan: every value of the source against the schema (no ρ: nothing
    is released to a tenant; a refusal names values, for the curator's eyes only)."""
    source = Source(uri=dataset.source_uri or "", files=tuple(files))
    return engine.validate(source, schema, unit_cap_of(dataset))
