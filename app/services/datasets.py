"""Datasets: upload (parse, validate, encode, store), visibility, and reading columns back.

An upload is encoded completely (`app.ingest.encode_csv`, streaming, no database)
before the session is touched, so a bad file writes nothing and a large one does not
hold a database lock while it is parsed. The dataset row and its packed columns are
then added in the caller's one transaction.

A tenant sees a dataset only through a grant; every other id is NotFound, exactly
like a missing one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, BinaryIO

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import Dataset, DatasetColumn, Grant
from app.errors import InvalidRequest, NotFound, PrivqError
from app.ingest import IngestError, encode_csv, pack_column, unpack_column
from app.limits import MAX_COORDINATE, control_character, describe_character, format_limit
from app.schema import DatasetSchema, SchemaError, parse_schema

MAX_DATASET_NAME_LENGTH = 200


class UploadRefused(PrivqError):
    """The uploaded file was refused; nothing was stored."""

    status = 422
    code = "invalid_upload"

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
    are stored, listed and logged), and numeric bin edges within ±MAX_COORDINATE (a
    moment of a bin midpoint must stay a finite float).
    """
    try:
        schema = parse_schema(schema_obj)
    except SchemaError as error:
        raise InvalidRequest(f"invalid schema: {error}") from None
    except RecursionError:
        raise InvalidRequest("invalid schema: nested too deeply") from None
    for index, attribute in enumerate(schema.attributes):
        where = f"invalid schema: attribute {index}"
        for text in (attribute.name, *(attribute.values or ())):
            found = control_character(str(text))
            if found is not None:
                raise InvalidRequest(
                    f"{where}: names and values must not contain control characters "
                    f"(found {describe_character(found)})"
                )
        for edge in attribute.bins or ():
            if abs(edge) > MAX_COORDINATE:
                raise InvalidRequest(
                    f"{where}: bin edges must lie within ±{format_limit(MAX_COORDINATE)}"
                )
    return schema


def create_dataset(
    session: Session,
    *,
    name: str,
    schema: DatasetSchema,
    stream: BinaryIO,
    rho_total_units: int | None = None,
    max_bytes: int | None = None,
) -> Dataset:
    """Encode the CSV `stream` under `schema`; add the dataset and its columns; never commits."""
    name = name.strip()
    if not name or len(name) > MAX_DATASET_NAME_LENGTH:
        raise InvalidRequest(f"dataset name must be 1 to {MAX_DATASET_NAME_LENGTH} characters")
    found = control_character(name)
    if found is not None:
        raise InvalidRequest(
            f"dataset name must not contain control characters (found {describe_character(found)})"
        )
    try:
        table = encode_csv(stream, schema, max_bytes=max_bytes)
    except IngestError as error:
        raise _upload_error(error) from None
    if table.rows == 0:
        raise UploadRefused("the CSV has a header but no rows")

    dataset = Dataset(
        name=name, rows=table.rows, schema_json=schema.to_json(), rho_total_units=rho_total_units
    )
    session.add(dataset)
    session.flush()
    for position, attribute in enumerate(schema.attributes):
        session.add(
            DatasetColumn(
                dataset_id=dataset.id,
                position=position,
                name=attribute.name,
                data=pack_column(table.columns[attribute.name]),
            )
        )
    session.flush()
    return dataset


def get_dataset(session: Session, dataset_id: str, *, tenant_id: str | None = None) -> Dataset:
    """The dataset; with `tenant_id`, only if that tenant holds a grant on it (else NotFound)."""
    query = select(Dataset).where(Dataset.id == dataset_id)
    if tenant_id is not None:
        query = query.join(Grant, Grant.dataset_id == Dataset.id).where(
            Grant.tenant_id == tenant_id
        )
    dataset = session.scalars(query).one_or_none()
    if dataset is None:
        raise NotFound("dataset not found")
    return dataset


def list_datasets(session: Session, *, tenant_id: str | None = None) -> Sequence[Dataset]:
    """Every dataset, or those the tenant holds a grant on; oldest first."""
    query = select(Dataset)
    if tenant_id is not None:
        query = query.join(Grant, Grant.dataset_id == Dataset.id).where(
            Grant.tenant_id == tenant_id
        )
    return session.scalars(query.order_by(Dataset.created_at, Dataset.id)).all()


def dataset_schema(dataset: Dataset) -> DatasetSchema:
    return parse_schema(dataset.schema_json)


def load_columns(
    session: Session, dataset_id: str, attributes: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """The stored integer codes of the named attributes (all if None), by name."""
    query = select(DatasetColumn).where(DatasetColumn.dataset_id == dataset_id)
    wanted = None if attributes is None else set(attributes)
    if wanted is not None:
        query = query.where(DatasetColumn.name.in_(wanted))
    columns = {
        column.name: unpack_column(column.data)
        for column in session.scalars(query.order_by(DatasetColumn.position))
    }
    if wanted is not None and wanted - columns.keys():
        missing = ", ".join(sorted(wanted - columns.keys()))
        raise NotFound(f"dataset {dataset_id} has no stored column(s): {missing}")
    return columns
