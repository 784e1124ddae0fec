"""The gate: the one way a job reads its dataset's raw records, and it spends first.

Write-ahead spending. Before a job reads the records — a measurement job's noise
draws, a mechanism round's selection (which scores true marginals) and noise draw —
it opens the gate, which in one short transaction

1. checks that this worker still holds the job's lease (`jobs.require_lease`),
2. stops the job if its cancellation was asked for (`jobs.stop_if_cancelled`),
3. checks that the records may be read: not purged or deleted (`RecordsPurged`), the
   dataset `ready` (`DatasetNotReady`), and a registered source still within the
   operator's roots (`SourceNotAllowed`) with its files what they were at registration
   (`SourceChanged`; listed just before the transaction),
4. appends a `RecordAccess` row with the access's exact cost,

and commits; only then does it hand out the reader. Cancellation, the lease and the
records' state are checked there and nowhere between the gate and storing what it
produced: once a record is written the access counts as used — refunds return only
what no access row records (`app.services.refunds`), and a retried job replays what
was stored and takes an access whose output was lost as spent, never redone.

The reader (`RecordGate.marginals`, `RecordGate.marginal`, and for within-bin means
`RecordGate.fraction_sums`) works only while the gate is open; outside it raises
`UngatedAccess`. It counts once per access: every marginal the access needs (and
those a mechanism names for its later rounds) in one scan — one bincount of each
maximal set over the stored columns (`app.services.columns`), or one engine scan of a
registered source (`app.records`) — and sums smaller marginals from the counts it
keeps (`app.services.record_reader`). This module is the only importer of the
columns and the engines, which an import-linter contract enforces, so no new path can
read records without passing here.

No database transaction is held while the records are read or noise is drawn: the
access row is committed first, the output is stored afterwards in a transaction of
its own (`store_fence`), so one tenant's large draw never holds a write lock that
others wait on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Dataset, Job, MeasurementRecord, RecordAccess
from app.errors import (
    DatasetNotReady,
    InvariantViolated,
    PrivqError,
    RecordsPurged,
    SourceChanged,
    SourceNotAllowed,
)
from app.ingest import fraction_column
from app.pgm.domain import Domain
from app.records.engine import CountingEngine, UnitCap, Validation
from app.schema import DatasetSchema, parse_schema
from app.schema.within_bins import fraction_sums
from app.services import jobs
from app.services.columns import ColumnCache, true_marginal
from app.services.record_reader import CountedMarginals, Marginal, marginals_of
from app.services.refunds import units_up
from app.sources import (
    Source,
    SourceFile,
    SourceUnreadable,
    changed,
    check_uri,
    files_of,
    list_files,
)

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


@dataclass(frozen=True)
class Listing:
    """A registered source's files as listed before an access: None if it could not be
    listed, or if its location is no longer within the operator's roots (`not_allowed`
    says why)."""

    uri: str
    files: tuple[SourceFile, ...] | None
    not_allowed: str | None = None


@dataclass(frozen=True)
class RegisteredRecords:
    """What an engine needs to count a registered source: the files fingerprinted at
    registration (and found unchanged at the gate), the schema and the unit's cap."""

    source: Source
    schema: DatasetSchema
    unit: UnitCap | None


class RecordGate:
    """One job's gate to its dataset's records (one per attempt, on the worker).

    `runner` is the `jobs.JobRunner` running the job: its database, settings, worker id,
    `check_lease` and `columns` (its `RecordCache`). The counts the job's reads made are
    kept here for its later rounds (at most `settings.max_model_cells` cells), readable
    only while an access is open.
    """

    def __init__(self, runner: jobs.JobRunner, job: Job, domain: Domain) -> None:
        self.runner = runner
        self.job_id = job.id
        self.dataset_id = job.dataset_id
        self.domain = domain
        self._cache: jobs.RecordSource = runner.columns
        self._counts = CountedMarginals(domain, max_cells=runner.settings.max_model_cells)
        # None for a stored dataset; set by `open` (checked there) for a registered one.
        self._registered: RegisteredRecords | None = None
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
        later: the body runs to the end and stores what it produced. So are the records'
        own refusals: RecordsPurged (purged or deleted), DatasetNotReady (a registration
        not finished or rejected), SourceNotAllowed (a registered source now outside the
        roots), SourceChanged (its files differ from their fingerprint, or are gone).
        `precheck` runs in the same transaction before the access is recorded: a check
        that needs no records, whose refusal leaves the access unrecorded (and so
        refunded).
        """
        if purpose not in PURPOSES:
            raise ValueError(f"unknown access purpose {purpose!r}")
        if not exact_rho > 0:
            raise InvariantViolated("an access to the records must cost something")
        if self._open is not None:
            raise InvariantViolated("an access to the records is already open")
        self.runner.check_lease()
        # Listing a lake's files can be slow (an object store): done before the
        # transaction, compared with the fingerprint inside it.
        listing = self._list_source()
        database = self.runner.database
        with database.unit_of_work() as session:
            jobs.get(session, self.job_id, for_update=True)  # serialise with claims and cancels
            jobs.require_lease(session, job_id=self.job_id, owner=self.runner.worker_id)
            jobs.stop_if_cancelled(session, self.job_id)
            registered = records_at_gate(session, self.dataset_id, listing)
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
        self._registered = registered
        self._open = access
        try:
            yield self
        finally:
            self._open = None

    def _list_source(self) -> Listing | None:
        """The registered source's files now (None for a stored dataset)."""
        with self.runner.database.read_only() as session:
            uri = session.scalar(select(Dataset.source_uri).where(Dataset.id == self.dataset_id))
        if uri is None:
            return None
        return listing_of(uri, self.runner.settings.source_root_list)

    def _require_open(self) -> RecordAccess:
        if self._open is None:
            raise UngatedAccess()
        return self._open

    def marginals(self, requests: Iterable[Sequence[str]]) -> dict[Marginal, np.ndarray]:
        """Exact counts (flat int64, row-major in each marginal's order) of every requested
        marginal, inside the gate only: one scan for those no earlier read counted."""
        self._require_open()
        wanted = marginals_of(requests)
        self._count(wanted, ())
        return {m: self._counts.get(m) for m in wanted}

    def marginal(
        self, attrs: Sequence[str], *, preload: Sequence[Sequence[str]] = ()
    ) -> np.ndarray:
        """Exact counts over `attrs`, inside the gate only. `preload` names the marginals
        the job will ask for later (a mechanism's workload: its candidates are their
        subsets); the first read counts them with `attrs` in one scan, and later reads
        covered by them are summed from those counts without reading the records."""
        self._require_open()
        (wanted,) = marginals_of([attrs])
        self._count([wanted], marginals_of(preload))
        return self._counts.get(wanted)

    def _count(self, needed: Sequence[Marginal], preload: Sequence[Marginal]) -> None:
        plan = self._counts.plan(needed, preload)
        if plan:
            self._counts.add(self._scan(plan))

    def _scan(self, plan: Sequence[Marginal]) -> dict[Marginal, np.ndarray]:
        """One read of the records counting every marginal of `plan` (maximal sets)."""
        registered = self._registered
        if registered is None:
            attributes = list(dict.fromkeys(a for m in plan for a in m))
            with self.runner.database.read_only() as session:
                columns = self._cache.get(session, self.dataset_id, attributes)
            return {m: true_marginal(columns, self.domain, m) for m in plan}
        engine = counting_engine(self.runner.settings)
        try:
            counted = engine.count(registered.source, registered.schema, plan, registered.unit)
        except (SourceUnreadable, FileNotFoundError):
            counted = None
        # Listed again: a file written while it was read would make the counts of neither
        # the registered source nor the new one.
        after = listing_of(registered.source.uri, self.runner.settings.source_root_list)
        if counted is None or after.files is None or changed(registered.source.files, after.files):
            # Seen after the access was recorded: it stays charged, and nothing is released.
            raise SourceChanged(
                "the dataset's source changed while it was being counted; the access is "
                "spent, and the dataset is frozen (new data is a new dataset)"
            )
        for m in plan:
            if m not in counted or counted[m].size != self.domain.cells(m):
                raise InvariantViolated(f"the {engine.name} engine did not count {list(m)}")
        return {m: counted[m] for m in plan}

    def fraction_sums(self, attributes: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per binned attribute, per code, inside the gate only: its exact count of rows and
        the exact sum of their places within the bin in units of 1/GRID
        (`app.schema.within_bins`), in one read — the stored fractions of an upload
        (`app.ingest.fractions`), or one engine scan of a registered source."""
        self._require_open()
        sizes = {name: self.domain.size_of(name) for name in attributes}
        registered = self._registered
        if registered is None:
            wanted = [n for name in attributes for n in (name, fraction_column(name))]
            with self.runner.database.read_only() as session:
                columns = self._cache.get(session, self.dataset_id, wanted)
            out = {}
            for name, size in sizes.items():
                codes = columns[name]
                counts = np.bincount(codes.astype(np.intp), minlength=size).astype(np.int64)
                out[name] = (counts, fraction_sums(size, codes, columns[fraction_column(name)]))
            return out
        engine = counting_engine(self.runner.settings)
        try:
            counted = engine.fraction_sums(
                registered.source, registered.schema, list(attributes), registered.unit
            )
        except (SourceUnreadable, FileNotFoundError):
            counted = None
        after = listing_of(registered.source.uri, self.runner.settings.source_root_list)
        if counted is None or after.files is None or changed(registered.source.files, after.files):
            raise SourceChanged(
                "the dataset's source changed while it was being read; the access is "
                "spent, and the dataset is frozen (new data is a new dataset)"
            )
        for name, size in sizes.items():
            if name not in counted or any(part.size != size for part in counted[name]):
                raise InvariantViolated(f"the {engine.name} engine did not sum {name!r}")
        return {name: counted[name] for name in attributes}

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


def records_at_gate(
    session: Session, dataset_id: str, listing: Listing | None
) -> RegisteredRecords | None:
    """Whether the dataset's records may be read now (inside the gate's transaction, before
    the access is recorded): RecordsPurged, DatasetNotReady, SourceNotAllowed or
    SourceChanged if not. Returns what an engine needs for a registered source, None for
    stored records."""
    dataset = session.get(Dataset, dataset_id)
    if dataset is None or dataset.deleted_at is not None or dataset.records_purged_at is not None:
        raise RecordsPurged()
    if dataset.status != "ready":
        raise DatasetNotReady()
    if dataset.source_uri is None:
        return None
    source = source_of(dataset)
    if listing is not None and listing.not_allowed is not None:
        raise SourceNotAllowed(listing.not_allowed)
    # The fingerprint is the dataset: a file added, removed or rewritten, or the source gone.
    if (
        listing is None
        or listing.uri != source.uri
        or listing.files is None
        or changed(source.files, listing.files)
    ):
        raise SourceChanged()
    return RegisteredRecords(source, parse_schema(dataset.schema_json), unit_cap_of(dataset))


def listing_of(uri: str, roots: Sequence[str]) -> Listing:
    """The source's files now, its location checked against the roots again (the operator
    may have narrowed them, or a link inside may now lead out of them)."""
    try:
        location = check_uri(uri, roots)
        return Listing(uri, list_files(location.uri, roots=roots))
    except SourceNotAllowed as refused:
        return Listing(uri, None, not_allowed=refused.message)
    except SourceUnreadable:
        return Listing(uri, None)


def source_of(dataset: Dataset) -> Source:
    """The registered source of a dataset, with the files fingerprinted at registration."""
    if dataset.source_uri is None or dataset.source_fingerprint is None:
        raise InvariantViolated("the dataset has no registered source")
    return Source(uri=dataset.source_uri, files=files_of(dataset.source_fingerprint))


def unit_cap_of(dataset: Dataset) -> UnitCap | None:
    """The privacy unit's cap as the engines apply it, or None (a unit is one row)."""
    if dataset.unit_column is None:
        return None
    if dataset.source_secret is None:
        raise InvariantViolated("a registered source with a privacy unit has no secret")
    return UnitCap(dataset.unit_column, dataset.unit_max_rows, dataset.source_secret)


# One engine per worker process and configuration: a Spark session is costly to start, and
# the process's job slots share it. Keyed by the factory too, so a stand-in engine put in
# place of `record_engine` (tests) is used at once.
_ENGINES: dict[tuple[object, str, str | None], CountingEngine] = {}
_ENGINES_LOCK = threading.Lock()


def counting_engine(settings: Settings) -> CountingEngine:
    """The process's engine for the operator's choice, built on first use."""
    key = (record_engine, settings.record_engine, settings.spark_remote)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = record_engine(settings)
    return engine


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
