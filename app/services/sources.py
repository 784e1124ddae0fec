"""Datasets registered by reference: the registration request and the job that scans.

`register` (the admin's `POST /v1/datasets` with a JSON body, and `privq datasets
register`) checks everything that needs no row before anything is written — the
schema, the privacy unit, rho_total, the format, the URI against the operator's roots
(`app.sources.check_uri`) and that the location lists at least one file — then adds
the dataset (`registering`, no rows, a fresh unit-cap key) and its "register" job in
the caller's one transaction.

The job (`run_job`) lists the source's files (their fingerprint), checks each is a
Parquet file, and has the gate's engine scan every row against the schema
(`gate.validate_source`); the files are listed again afterwards, so a source written
to while it was scanned is refused rather than fingerprinted half-way. On success the
dataset becomes `ready` with its row count and fingerprint; a refusal raises
`RegistrationRejected`, which fails the job, and the job's failure marks the dataset
`rejected` with the reason (`jobs._end_registration`): a registration that cannot
succeed is a failed job, as a refused measurement is. Nothing of the source's rows is
stored: only the count of them.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import Dataset, Job, new_id
from app.errors import InvalidRequest, PrivqError, SourceChanged, SourceNotAllowed
from app.ingest import IngestError, PrivacyUnit
from app.schema import DatasetSchema
from app.services import datasets as dataset_service
from app.services import gate, jobs, private_bins
from app.sources import (
    SourceFile,
    SourceUnreadable,
    changed,
    check_uri,
    fingerprint_json,
    list_files,
)

JOB_KIND = jobs.REGISTRATION_KIND
FORMATS = ("parquet",)
PARQUET_MAGIC = b"PAR1"
_CHANGED_WHILE_SCANNED = (
    "the source's files changed while it was scanned; register it again once it is complete"
)
# How much of a reader's own message a rejection quotes (the curator's eyes only).
READER_MESSAGE_LENGTH = 300


class RegistrationRejected(PrivqError, status=422, code="source_rejected"):
    """The registered source was refused (a value outside the schema, a file that is not
    Parquet, a location that cannot be read): the dataset is rejected."""


def new_secret() -> int:
    """A per-dataset key for the unit cap's row key: 64 random bits as a signed BIGINT."""
    value = secrets.randbits(64)
    return value - (1 << 64) if value >= 1 << 63 else value


def register(
    session: Session,
    *,
    name: str,
    schema: DatasetSchema,
    source_format: str,
    uri: str,
    roots: Sequence[str],
    rho_total_units: int | None = None,
    unit: PrivacyUnit | None = None,
) -> tuple[Dataset, Job]:
    """Check the request (422 naming what is wrong, nothing written), then add the dataset
    (`registering`) and its registration job; never commits."""
    name = dataset_service.checked_name(name)
    if source_format not in FORMATS:
        raise InvalidRequest(
            f"source.format must be one of {', '.join(FORMATS)}, not {source_format!r}",
            field="source.format",
        )
    private_bins.private_bins_units(schema, rho_total_units)
    location = check_uri(uri, roots)
    list_files(location.uri, roots=roots)  # the location exists and holds a file
    dataset = Dataset(
        name=name,
        rows=0,
        schema_json=schema.to_json(),
        rho_total_units=rho_total_units,
        status="registering",
        source_format=source_format,
        source_uri=location.uri,
        source_secret=new_secret(),
    )
    if unit is not None:
        dataset.unit_column = unit.column
        dataset.unit_max_rows = unit.max_rows
    session.add(dataset)
    session.flush()
    private_bins.charge_private_bins(session, dataset, schema)
    job = jobs.create(
        session,
        job_id=new_id(),
        dataset_id=dataset.id,
        tenant_id=None,
        kind=JOB_KIND,
        params={"uri": location.uri, "format": source_format},
    )
    return dataset, job


def run_job(worker: jobs.JobRunner, job: Job) -> dict[str, Any]:
    """Scan the source once and mark the dataset ready (see the module's docstring).

    Its one safe point is before the scan: a cancelled registration stops there."""
    with worker.database.read_only() as session:
        jobs.stop_if_cancelled(session, job.id)
        dataset = dataset_service.get_dataset(session, job.dataset_id)
        session.expunge(dataset)
    if dataset.status != "registering" or dataset.source_uri is None:
        raise RegistrationRejected(f"the dataset is {dataset.status}, not registering")
    roots = worker.settings.source_root_list
    worker.progress(job, {"stage": "listing"})
    files = _listed(dataset.source_uri, roots)
    worker.check_lease()
    worker.progress(job, {"stage": "scanning", "files": len(files)})
    schema = dataset_service.dataset_schema(dataset)
    rows = _scanned(worker, dataset, schema, files)
    if changed(files, _listed(dataset.source_uri, roots)):
        raise RegistrationRejected(_CHANGED_WHILE_SCANNED)
    with worker.database.unit_of_work() as session:
        jobs.get(session, job.id, for_update=True)
        jobs.require_lease(session, job_id=job.id, owner=worker.worker_id)
        row = session.scalars(
            select(Dataset).where(Dataset.id == dataset.id).with_for_update()
        ).one()
        row.rows = rows
        row.source_fingerprint = fingerprint_json(files)
        row.status = "ready"
        row.source_error = None
    return {"model_version": None, "files": len(files)}


def _listed(uri: str, roots: Sequence[str]) -> tuple[SourceFile, ...]:
    """The source's files, its URI checked again (the roots may have changed since)."""
    try:
        location = check_uri(uri, roots)
        return list_files(location.uri, roots=roots)
    except (SourceNotAllowed, SourceUnreadable) as error:
        raise RegistrationRejected(error.message) from None


def _scanned(
    worker: jobs.JobRunner, dataset: Dataset, schema: DatasetSchema, files: Sequence[SourceFile]
) -> int:
    """Every row of the files against the schema; the number of rows."""
    from pyarrow import ArrowException

    try:
        _require_parquet(dataset.source_uri or "", files)
        engine = gate.counting_engine(worker.settings)  # the process's one engine
        validation = gate.validate_source(engine, dataset, schema, files)
    except IngestError as error:
        raise RegistrationRejected(error.message, **(error.details or {})) from None
    except SourceUnreadable as error:
        raise RegistrationRejected(error.message) from None
    except SourceChanged:
        raise RegistrationRejected(_CHANGED_WHILE_SCANNED) from None
    except (ArrowException, OSError) as error:
        reason = " ".join(str(error).split())[:READER_MESSAGE_LENGTH]
        raise RegistrationRejected(f"the source could not be read as Parquet: {reason}") from None
    if validation.rows == 0:
        raise RegistrationRejected("the source has no rows")
    return validation.rows


def _require_parquet(uri: str, files: Sequence[SourceFile]) -> None:
    """RegistrationRejected naming the first file that does not end in Parquet's magic
    bytes (four bytes read from its end; no row)."""
    from pyarrow import fs

    filesystem, _path = fs.FileSystem.from_uri(uri)
    for source_file in files:
        try:
            if source_file.size < 2 * len(PARQUET_MAGIC):
                tail = b""
            else:
                with filesystem.open_input_file(source_file.path) as handle:
                    tail = handle.read_at(len(PARQUET_MAGIC), source_file.size - len(PARQUET_MAGIC))
        except OSError:
            raise SourceUnreadable(f"the file {source_file.path!r} cannot be read") from None
        if tail != PARQUET_MAGIC:
            raise RegistrationRejected(f"the file {source_file.path!r} is not a Parquet file")
