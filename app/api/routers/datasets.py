"""Datasets: upload or register by reference (admin; the JSON body's route is in
`registrations.py`), list and read (admin: all, with row counts; tenant: granted
ones), and the admin's settings (PATCH: the estimator, which queues a refit)."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, File, Form, Response, UploadFile, status
from pydantic import BeforeValidator
from sqlalchemy.orm import Session

from app.api.concurrency import read_endpoint, write_endpoint
from app.api.deps import AdminAuth, DatabaseDep, PrincipalDep, SettingsDep
from app.api.media_routes import NotJsonBodyRoute
from app.api.openapi import refusals
from app.api.pagination import PAGED, PageDep
from app.api.routers.registrations import REGISTRATION_OPENAPI
from app.api.schemas import NO_SUCH_DATASET, DatasetOut, DatasetPatch, error_responses
from app.api.types import MAX_DECIMAL_TEXT, RHO_TOTAL, JsonText, Name, ResourceId
from app.errors import InvalidRequest, JobsPending, NotFound
from app.ingest import PARQUET_CONTENT_TYPE
from app.services import datasets as dataset_service
from app.services import refits, scrub
from app.services.rho import rho_units

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])

# A schema sent as a file part: at most 256 attributes of at most 1000 short values each.
MAX_SCHEMA_BYTES = 4 << 20

SCHEMA_EXAMPLE = json.dumps(
    {
        "attributes": [
            {"name": "sex", "type": "categorical", "values": ["F", "M"]},
            {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
        ]
    }
)


@write_endpoint
def upload_dataset(
    file: Annotated[
        UploadFile,
        File(
            description="CSV with a header row, or Parquet (by its magic bytes or "
            f"Content-Type {PARQUET_CONTENT_TYPE})."
        ),
    ],
    schema_text: Annotated[
        JsonText | UploadFile,
        Form(
            alias="schema",
            description="The public schema as JSON (pretty-printed or not), a string field "
            'or a file part: {"attributes": [...]} or a size map {"age": 85, "sex": 2} '
            "(integers 0..size-1).",
            examples=[SCHEMA_EXAMPLE, '{"age": 85, "sex": 2}'],
        ),
    ],
    name: Annotated[Name, Form(examples=["adult"])],
    session: Session,
    settings: SettingsDep,
    _admin: AdminAuth,
    rho_total: Annotated[
        str | None,
        BeforeValidator(RHO_TOTAL.check_decimal_text),
        Form(
            max_length=MAX_DECIMAL_TEXT,
            description="Optional cap on the ρ of all grants together: a number with "
            f"{RHO_TOTAL.text}, any number of digits (rounded down to 1e-12).",
            examples=["2.0"],
        ),
    ] = None,
    privacy_unit: Annotated[
        JsonText | None,
        Form(
            description='Optional: {"column": "person_id", "max_rows": k}. Rows sharing an '
            "id are one unit; each keeps at most k of its rows (chosen at random); the id "
            "column is never stored.",
            examples=['{"column": "person_id", "max_rows": 3}'],
        ),
    ] = None,
) -> DatasetOut:
    """Upload a CSV or Parquet file: validated against the schema row by row, encoded and
    stored; nothing is stored if any value is outside the schema (the error names the
    column and lines or rows).

    With a JSON body instead (`{"name", "schema", "source": {"format": "parquet",
    "uri"}, "privacy_unit"?, "rho_total"?}`) the dataset is registered by reference: 202
    `{"id", "name", "status": "registering", "job_id"}`; privq copies no row, and the job
    scans the source against the schema (docs: sources)."""
    # The JSON text itself, so the parser also catches duplicate keys.
    dataset_schema = dataset_service.parse_dataset_schema(_schema_text(schema_text))
    unit = dataset_service.parse_privacy_unit_field(privacy_unit, dataset_schema)
    # In range already (a 422 naming the field and the range otherwise); still refused
    # here if it rounds down to no unit at all.
    rho_total_units = (
        None if rho_total is None else rho_units(rho_total, field="rho_total", rounding="down")
    )
    dataset = dataset_service.create_dataset(
        session,
        name=name,
        schema=dataset_schema,
        stream=file.file,
        rho_total_units=rho_total_units,
        max_bytes=settings.max_upload_bytes,
        unit=unit,
        content_type=file.content_type,
    )
    return DatasetOut.of(dataset, for_admin=True)


# Added by hand for its route class: a JSON body on the same path and method is a
# registration by reference (`registrations.py`), documented here as a second body.
router.add_api_route(
    "",
    upload_dataset,
    methods=["POST"],
    route_class_override=NotJsonBodyRoute,
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetOut,
    response_model_exclude_none=True,
    summary="Upload a dataset (multipart), or register a Parquet source by reference (JSON)",
    responses=error_responses(
        {
            413: "The file exceeds PRIVQ_MAX_UPLOAD_BYTES.",
            422: "Bad schema, or a CSV value outside it; a registration's source outside "
            "PRIVQ_SOURCE_ROOTS (`source_not_allowed`) or missing (`source_not_found`).",
        }
    ),
    openapi_extra=REGISTRATION_OPENAPI,
)


def _schema_text(schema: str | UploadFile) -> str | bytes:
    """The schema's JSON, from a string field or a file part (at most MAX_SCHEMA_BYTES)."""
    if isinstance(schema, str):
        return schema
    data = schema.file.read(MAX_SCHEMA_BYTES + 1)
    if len(data) > MAX_SCHEMA_BYTES:
        raise InvalidRequest(f"invalid schema: the schema file is over {MAX_SCHEMA_BYTES} bytes")
    return data


@router.get(
    "",
    response_model=list[DatasetOut],
    response_model_exclude_none=True,
    responses=PAGED,
)
@read_endpoint
def list_datasets(
    session: Session,
    principal: PrincipalDep,
    page: PageDep,
) -> list[DatasetOut]:
    """The admin sees every dataset; a tenant those it holds a grant on (without row counts)."""
    found = dataset_service.list_datasets(
        session, tenant_id=principal.tenant_id, limit=page.limit, cursor=page.cursor
    )
    page.link_next(found.next_cursor)
    return [DatasetOut.of(dataset, for_admin=principal.is_admin) for dataset in found.items]


@router.get(
    "/{dataset_id}",
    response_model=DatasetOut,
    response_model_exclude_none=True,
    responses=error_responses({404: NO_SUCH_DATASET}),
)
@read_endpoint
def read_dataset(dataset_id: ResourceId, session: Session, principal: PrincipalDep) -> DatasetOut:
    """The dataset's public schema. Its exact row count is private: only the admin sees it."""
    tenant_id = principal.tenant_id
    dataset = dataset_service.get_dataset(session, dataset_id, tenant_id=tenant_id)
    return DatasetOut.of(dataset, for_admin=principal.is_admin)


@router.patch(
    "/{dataset_id}",
    response_model=DatasetOut,
    response_model_exclude_none=True,
    responses=error_responses(
        {404: NO_SUCH_DATASET, 422: "An unknown estimator or field, or no field at all."}
    ),
)
@write_endpoint
def update_dataset(
    dataset_id: ResourceId, body: DatasetPatch, session: Session, _admin: AdminAuth
) -> DatasetOut:
    """Set the dataset's estimator. If it changed and anything is measured, a refit job
    (`refit_job_id`) fits the next model version from the same measurements: no noise is
    drawn and nothing is charged. `GET /model` names the estimator of each version."""
    change = refits.set_estimator(session, dataset_id, body.estimator)
    out = DatasetOut.of(change.dataset, for_admin=True)
    out.refit_job_id = change.job.id if change.job is not None else None
    return out


@router.delete(
    "/{dataset_id}/records",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Destroy a dataset's raw records; its model keeps answering (admin)",
    responses=refusals(NotFound, JobsPending, not_found="No such dataset."),
)
@write_endpoint
def purge_records(dataset_id: ResourceId, database: DatabaseDep, _admin: AdminAuth) -> Response:
    """The uploaded records are deleted from the database, and the database's files are
    scrubbed of them before the answer; every free answer (marginals, counts, queries,
    synthetic data) keeps working from the model, and measuring gets 409
    `records_purged` from then on. 409 `jobs_pending` while a job of the dataset is
    queued or running. Purging again changes nothing but scrubs the files again."""
    with database.unit_of_work() as session:
        dataset_service.purge_records(session, dataset_id)
    # Committed: the purge stands even if the scrub fails (it logs why).
    scrub.scrub_storage(database)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete(
    "/{dataset_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a dataset: records, measurements and models (admin)",
    responses=refusals(NotFound, JobsPending, not_found="No such dataset."),
)
@write_endpoint
def delete_dataset(dataset_id: ResourceId, database: DatabaseDep, _admin: AdminAuth) -> Response:
    """Records, measurements and model versions are deleted (the database's files scrubbed
    of the records before the answer) and every grant on it revoked; the dataset is then
    a 404 to everyone. The ledger keeps its lines for the audit
    (`GET /v1/ledger?dataset_id=`). 409 `jobs_pending` while a job is queued or running."""
    with database.unit_of_work() as session:
        dataset_service.delete_dataset(session, dataset_id)
    scrub.scrub_storage(database)  # committed: the delete stands even if this fails
    return Response(status_code=status.HTTP_204_NO_CONTENT)
