"""Database: the tables (SQLAlchemy 2.0 models) and how sessions are made.

Alembic owns the schema (`alembic/`, run by `app.migrations`); these models are what it
compares with.
`Database` wraps one engine and its session factory:

- `Database.unit_of_work()` — a session that commits once at the end (rolls back on
  error). Services only flush; whoever opened the unit of work commits.
- `Database.read_only()` — a session for reads, always rolled back. On SQLite it
  begins a DEFERRED transaction so it does not hold the write lock.

On SQLite every other transaction begins IMMEDIATE (it takes the database's write
lock at BEGIN), the file runs in WAL mode and writers wait `busy_timeout` for the
lock: that is what makes `ledger.charge`'s read-check-write atomic on SQLite. On
PostgreSQL the same code takes explicit row locks (`SELECT … FOR UPDATE`).

ρ amounts are stored as BigInteger counts of pico-ρ (see `app.services.rho`).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# The engine and its sessions live in app.database; their names are imported from here too.
from app.database import SQLITE_BEGIN_OPTION as SQLITE_BEGIN_OPTION
from app.database import Database as Database
from app.database import is_sqlite_url as is_sqlite_url
from app.database import make_engine as make_engine


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return str(uuid.uuid4())


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on both backends (SQLite stores it naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use datetime.now(UTC)")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# A 64-bit autoincrementing key: SQLite only autoincrements "INTEGER PRIMARY KEY".
BigIntegerKey = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    # Deterministic constraint names, so later migrations (and SQLite batch
    # rebuilds) can refer to them on both backends.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class Tenant(Base):
    """An analyst (or team) holding API keys and grants on datasets."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Set: every key of the tenant is refused (401 tenant_disabled) until it is cleared.
    disabled_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ApiKey(Base):
    """One of a tenant's API keys; several at once make rotation possible without downtime."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(String(36), ForeignKey("tenants.id"), index=True)
    # SHA-256 hex of the key: keys are 256-bit random, so a fast hash suffices.
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    key_prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Updated at most once a minute per key, so authenticating rarely writes.
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # Set: the key is refused from the next request on; the row stays for the audit.
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class ServiceSecret(Base):
    """Hashes of secrets the service generated itself (the embedded admin key)."""

    __tablename__ = "service_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Dataset(Base):
    """An uploaded table: its public schema and private row count."""

    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    rows: Mapped[int] = mapped_column(BigInteger)
    schema_json: Mapped[dict[str, Any]] = mapped_column(JSON)
    # The curator's cap on the sum of all grants' limits; NULL means no cap.
    rho_total_units: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # How models are fitted: "mle", "cgm-em" or "stein" (app.pgm.estimation.ESTIMATOR_NAMES).
    estimator: Mapped[str] = mapped_column(String(16), default="mle", server_default="mle")
    # The privacy unit: rows sharing a value of this column (its name only; the values
    # are never stored) are one unit; NULL means a unit is one row.
    unit_column: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # k: at most this many rows of a unit were kept at upload; every cost's sensitivity.
    unit_max_rows: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # "ready" (uploaded, or a registered source scanned and valid), "registering" (its
    # registration job has not finished) or "rejected" (`source_error` says why).
    status: Mapped[str] = mapped_column(String(16), default="ready", server_default="ready")
    # A dataset registered by reference (app.records): where its records live. NULL for an
    # uploaded dataset, whose records are its dataset_columns.
    source_format: Mapped[str | None] = mapped_column(String(16), nullable=True)
    source_uri: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Each file's path, size and version (mtime or ETag) at registration: {"files": [...]}.
    source_fingerprint: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    # The per-dataset key of the unit cap's row key (app.records.engine); never shown.
    source_secret: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # Why the registration was rejected: the curator's eyes only.
    source_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Set: the raw records (dataset_columns) were destroyed; the model still answers.
    records_purged_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # Set: records, measurements and models are gone; the row stays for the ledger's lines.
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class DatasetColumn(Base):
    """One attribute's integer codes, packed (`app.ingest.pack_column`)."""

    __tablename__ = "dataset_columns"

    dataset_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("datasets.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    data: Mapped[bytes] = mapped_column(LargeBinary)


class Grant(Base):
    """A tenant's ρ limit on one dataset; the ledger's entries are charged against it.

    A revoked grant keeps its row (the ledger's lines point at it); a tenant holds at
    most one grant on a dataset that is not revoked, and may be granted again later.
    """

    __tablename__ = "grants"
    __table_args__ = (
        Index(
            "uq_grants_active_tenant_dataset",
            "tenant_id",
            "dataset_id",
            unique=True,
            sqlite_where=text("revoked_at IS NULL"),
            postgresql_where=text("revoked_at IS NULL"),
        ),
        CheckConstraint("rho_limit_units > 0", name="rho_limit_positive"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(String(36), ForeignKey("tenants.id"), index=True)
    dataset_id: Mapped[str] = mapped_column(String(36), ForeignKey("datasets.id"), index=True)
    rho_limit_units: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class LedgerEntry(Base):
    """An append-only ρ movement on a grant: a charge (positive) or a refund (negative)."""

    __tablename__ = "ledger_entries"
    __table_args__ = (
        UniqueConstraint("grant_id", "idempotency_key"),
        UniqueConstraint("grant_id", "number"),
        CheckConstraint("kind IN ('charge', 'refund')", name="kind"),
        CheckConstraint(
            "(kind = 'charge' AND rho_units > 0) OR (kind = 'refund' AND rho_units < 0)",
            name="sign",
        ),
    )

    id: Mapped[int] = mapped_column(BigIntegerKey, primary_key=True, autoincrement=True)
    # What the API calls the line's id: its number on its grant, 1, 2, … (`ledger.charge`
    # takes it under the grant's row lock). `id` counts every line of every tenant and
    # dataset: shown, it would tell a tenant how much others spend elsewhere.
    number: Mapped[int] = mapped_column(Integer)
    grant_id: Mapped[str] = mapped_column(String(36), ForeignKey("grants.id"), index=True)
    tenant_id: Mapped[str] = mapped_column(String(36), ForeignKey("tenants.id"))
    dataset_id: Mapped[str] = mapped_column(String(36), ForeignKey("datasets.id"), index=True)
    rho_units: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(16))
    # No foreign key: the charge is written before the job row in the same transaction.
    job_id: Mapped[str | None] = mapped_column(String(36), nullable=True, index=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    request_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Job(Base):
    """A unit of work for the worker (a measurement, a mechanism run, a model fit)."""

    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_status_created_at", "status", "created_at"),
        CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')", name="status"
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    dataset_id: Mapped[str] = mapped_column(String(36), ForeignKey("datasets.id"), index=True)
    tenant_id: Mapped[str | None] = mapped_column(
        String(36), ForeignKey("tenants.id"), nullable=True
    )
    kind: Mapped[str] = mapped_column(String(32))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="queued")
    progress: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    model_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    request_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # Set while running: the worker stops at its next safe point and refunds what is unused.
    cancel_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class QueueTurn(Base):
    """When a claim last took a job of a queue: a tenant's id, or "" for tenant-less jobs."""

    __tablename__ = "queue_turns"
    queue: Mapped[str] = mapped_column(String(36), primary_key=True)
    served_at: Mapped[datetime] = mapped_column(UTCDateTime())


class MeasurementRecord(Base):
    """One released noisy marginal: drawn once, stored before anything uses it.

    `values` are the noisy integer counts (int64, row-major over `attributes` in the
    order stored), packed with `app.ingest.pack_column`. A plain measurement job has
    one row per requested marginal (`position` 0..k−1); a mechanism job one row per
    round, with the round's selection details in `details`.

    `status` is "active", or "quarantined" when a model fit could not use it
    (`quarantine_reason` says why): it stays a release — listed, and charged in the
    ledger — but no later fit includes it.
    """

    __tablename__ = "measurements"
    __table_args__ = (
        UniqueConstraint("job_id", "position"),
        UniqueConstraint("dataset_id", "number"),
        CheckConstraint("noise IN ('gaussian', 'laplace')", name="noise"),
        CheckConstraint("status IN ('active', 'quarantined')", name="status"),
        CheckConstraint("kind IN ('marginal', 'within_bin_means')", name="kind"),
    )

    id: Mapped[int] = mapped_column(BigIntegerKey, primary_key=True, autoincrement=True)
    # What the API calls the measurement's id: its number in its dataset, 1, 2, … in the
    # order of `id` (`measurements.store` takes it under the dataset's row lock). `id`
    # counts every dataset's measurements: shown, it would tell a tenant how many were
    # made on datasets it cannot see.
    number: Mapped[int] = mapped_column(Integer)
    dataset_id: Mapped[str] = mapped_column(String(36), ForeignKey("datasets.id"), index=True)
    job_id: Mapped[str] = mapped_column(String(36), ForeignKey("jobs.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    # "marginal": noisy counts, which models fit. "within_bin_means": one binned
    # attribute's noisy per-bin sums of fractions within the bins
    # (`app.services.within_bin_means`), which answers use and no fit reads.
    kind: Mapped[str] = mapped_column(String(32), default="marginal", server_default="marginal")
    attributes: Mapped[list[str]] = mapped_column(JSON)
    noise: Mapped[str] = mapped_column(String(16))
    # σ (Gaussian) or b (Laplace) of the noise on the counts: public.
    scale: Mapped[float] = mapped_column(Float)
    rho_units: Mapped[int] = mapped_column(BigInteger)
    values: Mapped[bytes] = mapped_column(LargeBinary)
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    status: Mapped[str] = mapped_column(String(16), default="active", server_default="active")
    quarantine_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The write-ahead record of the access that produced it (None only for rows stored
    # before accesses were recorded).
    access_id: Mapped[int | None] = mapped_column(
        BigIntegerKey, ForeignKey("record_accesses.id"), nullable=True
    )


class RecordAccess(Base):
    """One access to a dataset's raw records, recorded as used BEFORE it ran (write-ahead).

    `app.services.gate` writes the row, commits, and only then lets the job read the
    records: a measurement job's noise draws (`purpose` "measure", one row for the
    job), or one round of a mechanism (`purpose` "round": its selection, which scores
    true marginals, and its noise draw). `exact_rho` is the exact rational cost
    ("p/q"); `rho_units` the same rounded up to the ledger's unit. What a job has
    used is the sum of its rows, whatever became of the output: a refund returns only
    what no row records, and a row whose output was never stored (`measurements.
    access_id` names none of it) stays charged.
    """

    __tablename__ = "record_accesses"
    __table_args__ = (
        UniqueConstraint("job_id", "sequence"),
        CheckConstraint("purpose IN ('measure', 'round')", name="purpose"),
    )

    id: Mapped[int] = mapped_column(BigIntegerKey, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(36), ForeignKey("jobs.id"), index=True)
    dataset_id: Mapped[str] = mapped_column(String(36), ForeignKey("datasets.id"), index=True)
    sequence: Mapped[int] = mapped_column(Integer)
    purpose: Mapped[str] = mapped_column(String(16))
    # The measurement position (round index) the access pays for; None for "measure".
    round_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    exact_rho: Mapped[str] = mapped_column(Text)
    rho_units: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ModelVersion(Base):
    """A fitted model of a dataset: version N+1 covers every measurement up to `high_water`."""

    __tablename__ = "model_versions"

    dataset_id: Mapped[str] = mapped_column(String(36), ForeignKey("datasets.id"), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    cliques: Mapped[list[list[str]]] = mapped_column(JSON)
    # The largest measurement id the fit included, and how many measurements that was.
    high_water: Mapped[int] = mapped_column(BigInteger)
    measurement_count: Mapped[int] = mapped_column(Integer)
    solver: Mapped[str] = mapped_column(String(32))
    # The dataset's estimator when this version was fitted (app.pgm.estimation).
    estimator: Mapped[str] = mapped_column(String(16), default="mle", server_default="mle")
    iterations: Mapped[int] = mapped_column(Integer)
    loss: Mapped[float] = mapped_column(Float)
    seconds: Mapped[float] = mapped_column(Float)
    fitted_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class FitLock(Base):
    """Who is fitting a dataset's model now: one fit per dataset at a time, leased."""

    __tablename__ = "fit_locks"

    dataset_id: Mapped[str] = mapped_column(String(36), ForeignKey("datasets.id"), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
