"""Datasets: upload (parse, validate, encode, store), visibility, and retiring them.

An upload (CSV or Parquet) is encoded completely (`app.ingest.encode_upload`,
streaming, no database; with a privacy unit, at most k random rows per unit are kept)
before the session is touched, so a bad file writes nothing and a large one does not
hold a database lock while it is parsed. The dataset row and its packed columns are
then added in the caller's one transaction.

A tenant sees a dataset only through a grant in force; every other id is NotFound,
exactly like a missing one.

Retiring a dataset: `purge_records` destroys its raw records (the packed columns; for
a source registered by reference, its location, fingerprint and unit-cap key: the
source itself is the curator's) while the model keeps answering every free query;
`delete_dataset` removes records, measurements and models and leaves a tombstone row,
so the ledger's lines keep pointing somewhere. Neither runs while a job of the dataset
is queued or running. Deleted rows leave their bytes in the database's files: whoever
commits either calls `app.services.scrub.scrub_storage` once the transaction has
committed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, BinaryIO

from sqlalchemy import Select, delete, select, update
from sqlalchemy.orm import Session

from app.db import (
    Dataset,
    DatasetColumn,
    FitLock,
    Grant,
    MeasurementRecord,
    ModelVersion,
    utcnow,
)
from app.errors import (
    DatasetNotReady,
    InvalidRequest,
    JobsPending,
    NotFound,
    PrivqError,
    RecordsPurged,
)
from app.ingest import (
    IngestError,
    PrivacyUnit,
    encode_upload,
    fraction_column,
    pack_columns,
    parse_privacy_unit,
)
from app.limits import MAX_COORDINATE, control_character, describe_character, format_limit
from app.schema import DatasetSchema, SchemaError, parse_schema
from app.services import jobs, private_bins
from app.services.pages import Page, page

MAX_DATASET_NAME_LENGTH = 200


class UploadRefused(PrivqError, status=422, code="invalid_upload"):
    """The uploaded file was refused; nothing was stored."""

    def __init__(
        self,
        message: str | None = None,
        *,
        status: int | None = None,
        code: str | None = None,
        **details: Any,
    ) -> None:
        super().__init__(message, **details)
        # Keep the ingest layer's own status and code (413 too large, 422 bad value, …).
        if status is not None:
            self.status = status  # type: ignore[misc]
        if code is not None:
            self.code = code  # type: ignore[misc]


def _upload_error(error: IngestError) -> UploadRefused:
    return UploadRefused(
        error.message, status=error.status, code=error.code, **(error.details or {})
    )


def parse_dataset_schema(schema_obj: Any) -> DatasetSchema:
    """The curator's schema (either API.md form, as JSON text or parsed); 422 if invalid.

    Beyond the schema's own rules: names and values without control characters (they
    are stored, listed and logged), and numeric bin edges and integer bounds within
    ±MAX_COORDINATE (a moment of a code's value must stay a finite float).
    """
    try:
        schema = parse_schema(schema_obj)
    except SchemaError as error:
        raise InvalidRequest(f"invalid schema: {error}") from None
    except RecursionError:
        raise InvalidRequest("invalid schema: nested too deeply") from None
    for index, attribute in enumerate(schema.attributes):
        where = f"invalid schema: attribute {index}"
        for text in (attribute.name, *(attribute.values or ()), *attribute.missing_values):
            found = control_character(str(text))
            if found is not None:
                raise InvalidRequest(
                    f"{where}: names and values must not contain control characters "
                    f"(found {describe_character(found)})"
                )
        if attribute.kind == "integer" and max(map(abs, attribute.integer_range[:2])) > (
            MAX_COORDINATE
        ):
            raise InvalidRequest(
                f"{where}: min and max must lie within ±{format_limit(MAX_COORDINATE)}"
            )
        for edge in attribute.bins or ():
            if abs(edge) > MAX_COORDINATE:
                raise InvalidRequest(
                    f"{where}: bin edges must lie within ±{format_limit(MAX_COORDINATE)}"
                )
    return schema


def parse_privacy_unit_field(text: object | None, schema: DatasetSchema) -> PrivacyUnit | None:
    """The upload's `privacy_unit` field (JSON text, or the object of a registration's
    JSON body), checked against the schema; 422 `bad_privacy_unit` naming what is wrong.
    None without the field (a unit is a row)."""
    if text is None:
        return None
    try:
        return parse_privacy_unit(text, schema)
    except IngestError as error:
        raise _upload_error(error) from None


def checked_name(name: str) -> str:
    """The dataset's name stripped; 422 if empty, too long or with control characters."""
    name = name.strip()
    if not name or len(name) > MAX_DATASET_NAME_LENGTH:
        raise InvalidRequest(f"dataset name must be 1 to {MAX_DATASET_NAME_LENGTH} characters")
    found = control_character(name)
    if found is not None:
        raise InvalidRequest(
            f"dataset name must not contain control characters (found {describe_character(found)})"
        )
    return name


def create_dataset(
    session: Session,
    *,
    name: str,
    schema: DatasetSchema,
    stream: BinaryIO,
    rho_total_units: int | None = None,
    max_bytes: int | None = None,
    unit: PrivacyUnit | None = None,
    content_type: str | None = None,
) -> Dataset:
    """Encode the CSV or Parquet `stream` under `schema` (with `unit`: at most
    `unit.max_rows` random rows per unit, the ids never kept); add the dataset and its
    columns, and the curator's charge for the schema's private bins if it has them
    (`app.services.private_bins`); never commits."""
    name = checked_name(name)
    private_bins.private_bins_units(schema, rho_total_units)  # 422 before any work
    try:
        table = encode_upload(
            stream, schema, max_bytes=max_bytes, unit=unit, content_type=content_type
        )
    except IngestError as error:
        raise _upload_error(error) from None
    if table.rows == 0:
        raise UploadRefused("the file has no rows")

    dataset = Dataset(
        name=name, rows=table.rows, schema_json=schema.to_json(), rho_total_units=rho_total_units
    )
    if unit is not None:
        # The column's name and k only: the ids themselves went with the encoding.
        dataset.unit_column = unit.column
        dataset.unit_max_rows = unit.max_rows
    session.add(dataset)
    session.flush()
    private_bins.charge_private_bins(session, dataset, schema)
    # The codes, then the binned attributes' places within their bins (raw records too:
    # `app.ingest.fractions`), after them so that the codes keep their positions.
    names = [attribute.name for attribute in schema.attributes]
    arrays = [table.columns[name] for name in names]
    for name, fractions in table.fractions.items():
        names.append(fraction_column(name))
        arrays.append(fractions)
    blobs = pack_columns(arrays)
    for position, (name, blob) in enumerate(zip(names, blobs, strict=True)):
        session.add(DatasetColumn(dataset_id=dataset.id, position=position, name=name, data=blob))
    session.flush()
    return dataset


def _visible(query: Select[Dataset], tenant_id: str | None) -> Select[Dataset]:
    """Datasets not deleted; with `tenant_id`, only those it holds a grant in force on."""
    query = query.where(Dataset.deleted_at.is_(None))
    if tenant_id is not None:
        query = query.join(Grant, Grant.dataset_id == Dataset.id).where(
            Grant.tenant_id == tenant_id, Grant.revoked_at.is_(None)
        )
    return query


def get_dataset(
    session: Session, dataset_id: str, *, tenant_id: str | None = None, for_update: bool = False
) -> Dataset:
    """The dataset; with `tenant_id`, only if that tenant holds a grant on it (else NotFound,
    as for a dataset that does not exist or was deleted)."""
    query = _visible(select(Dataset).where(Dataset.id == dataset_id), tenant_id)
    if for_update:
        # FOR NO KEY UPDATE: a charge holding its grant's row can still write the rows
        # that point at the dataset, so a delete waiting for that grant never deadlocks.
        query = query.with_for_update(of=Dataset, key_share=True)
    dataset = session.scalars(query).one_or_none()
    if dataset is None:
        raise NotFound("dataset not found")
    return dataset


def list_datasets(
    session: Session, *, tenant_id: str | None = None, limit: int, cursor: str | None = None
) -> Page[Dataset]:
    """One page of every dataset, or of those the tenant holds a grant on; oldest first."""
    return page(
        session,
        _visible(select(Dataset), tenant_id),
        keys=(Dataset.created_at, Dataset.id),
        kinds=(datetime, str),
        limit=limit,
        cursor=cursor,
        key_of=lambda dataset: (dataset.created_at, dataset.id),
    )


def require_records(dataset: Dataset) -> None:
    """RecordsPurged (409) if the dataset's raw records were destroyed (or its source's
    reference forgotten), DatasetNotReady (409) while its source's registration has not
    succeeded: nothing to measure either way."""
    if dataset.records_purged_at is not None:
        raise RecordsPurged()
    if dataset.status != "ready":
        raise DatasetNotReady(
            "the dataset's registration is still running: wait for its job"
            if dataset.status == "registering"
            else "the dataset's registration was rejected: nothing can be measured on it",
            dataset_status=dataset.status,
        )


def _refuse_unfinished_jobs(session: Session, dataset_id: str, doing: str) -> None:
    pending = jobs.unfinished(session, dataset_id=dataset_id)
    if pending:
        raise JobsPending(
            f"the dataset has {len(pending)} job(s) queued or running; cancel them "
            f"(POST /v1/jobs/{{id}}/cancel) or wait for them before {doing}",
            job_ids=[job.id for job in pending[:20]],
        )


def _locked_with_its_jobs(session: Session, dataset_id: str) -> Dataset:
    """The dataset's row, locked after the rows of its unfinished jobs.

    A running job's gate and its stores lock the job's row, then the dataset's; a purge
    or delete takes them in the same order, so beside a running job it waits for the
    gate's short transaction and is then refused (409 `jobs_pending`) instead of
    deadlocking with it (PostgreSQL would abort one of the two).
    """
    jobs.unfinished(session, dataset_id=dataset_id)
    return get_dataset(session, dataset_id, for_update=True)


def _refuse_charges_in_flight(session: Session, dataset_id: str, doing: str) -> None:
    """Lock the dataset's grants, then look for unfinished jobs once more.

    A charge holds its grant's row until it has committed its job, so the look after this
    lock sees the job of a charge that was in flight; a charge that comes after it finds
    the grant revoked (a delete) or the records purged (`measurements.submit`).
    """
    session.scalars(select(Grant.id).where(Grant.dataset_id == dataset_id).with_for_update()).all()
    _refuse_unfinished_jobs(session, dataset_id, doing)


def _destroy_columns(session: Session, dataset: Dataset) -> None:
    # On SQLite every connection zeroes what it deletes (`secure_delete`, app.db); what
    # the WAL, PostgreSQL's dead tuples and free space still hold, the scrub after the
    # commit overwrites (`app.services.scrub`).
    session.execute(delete(DatasetColumn).where(DatasetColumn.dataset_id == dataset.id))
    # A source registered by reference: forget where it is and its unit cap's key, so no
    # access can reach it again. The source itself is the curator's and is not touched.
    dataset.source_uri = None
    dataset.source_fingerprint = None
    dataset.source_secret = None


def purge_records(session: Session, dataset_id: str) -> Dataset:
    """Destroy the dataset's raw records; the model and its free answers stay; never commits.

    JobsPending (409) while a job of the dataset is queued or running (it may need the
    records); purging again changes nothing. Measuring is refused from then on
    (`require_records`). After the commit, the caller runs `scrub.scrub_storage`.
    """
    dataset = _locked_with_its_jobs(session, dataset_id)
    if dataset.records_purged_at is not None:
        return dataset
    _refuse_unfinished_jobs(session, dataset_id, "purging its records")
    _refuse_charges_in_flight(session, dataset_id, "purging its records")
    _destroy_columns(session, dataset)
    dataset.records_purged_at = utcnow()
    session.flush()
    return dataset


def delete_dataset(session: Session, dataset_id: str) -> Dataset:
    """Delete a dataset: records, measurements and models go; the row stays as a tombstone.

    The ledger keeps every line (they point at the dataset and its grants, which are
    revoked). JobsPending (409) while a job of the dataset is queued or running. The
    dataset is then NotFound to everyone, the admin included. After the commit, the
    caller runs `scrub.scrub_storage`.
    """
    dataset = _locked_with_its_jobs(session, dataset_id)
    _refuse_unfinished_jobs(session, dataset_id, "deleting it")
    _refuse_charges_in_flight(session, dataset_id, "deleting it")
    now = utcnow()
    _destroy_columns(session, dataset)
    for table in (MeasurementRecord, ModelVersion, FitLock):
        session.execute(delete(table).where(table.dataset_id == dataset_id))
    session.execute(
        update(Grant)
        .where(Grant.dataset_id == dataset_id, Grant.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    dataset.records_purged_at = dataset.records_purged_at or now
    dataset.deleted_at = now
    session.flush()
    return dataset


def dataset_schema(dataset: Dataset) -> DatasetSchema:
    return parse_schema(dataset.schema_json)
