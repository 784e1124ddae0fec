"""Datasets: upload (admin), list and read (admin: all, with row counts; tenant: granted ones)."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, File, Form, UploadFile, status

from app.api.deps import AdminAuth, PrincipalDep, ReadSessionDep, SessionDep, SettingsDep
from app.api.schemas import NO_SUCH_DATASET, DatasetOut, error_responses
from app.api.types import Name, ResourceId, SafeText
from app.services import datasets as dataset_service
from app.services.rho import rho_units

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])

SCHEMA_EXAMPLE = json.dumps(
    {
        "attributes": [
            {"name": "sex", "type": "categorical", "values": ["F", "M"]},
            {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
        ]
    }
)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetOut,
    response_model_exclude_none=True,
    responses=error_responses(
        {
            413: "The file exceeds PRIVQ_MAX_UPLOAD_BYTES.",
            422: "Bad schema, or a CSV value outside it.",
        }
    ),
)
def upload_dataset(
    file: Annotated[UploadFile, File(description="CSV with a header row.")],
    schema_text: Annotated[
        SafeText,
        Form(
            alias="schema",
            description='The public schema as JSON: {"attributes": [...]} or a size map '
            '{"age": 85, "sex": 2} (integer codes 0..size-1).',
            examples=[SCHEMA_EXAMPLE, '{"age": 85, "sex": 2}'],
        ),
    ],
    name: Annotated[Name, Form(examples=["adult"])],
    session: SessionDep,
    settings: SettingsDep,
    _admin: AdminAuth,
    rho_total: Annotated[
        str | None,
        Form(
            max_length=100,
            description="Optional cap on the ρ of all grants together: a number with "
            "0 < rho_total ≤ 1e6, any number of digits (rounded down to 1e-12).",
            examples=["2.0"],
        ),
    ] = None,
) -> DatasetOut:
    """Upload a CSV: validated against the schema row by row, encoded and stored; nothing
    is stored if any value is outside the schema (the error names the column and lines)."""
    # The JSON text itself, so the parser also catches duplicate keys.
    dataset_schema = dataset_service.parse_dataset_schema(schema_text)
    rho_total_units = (
        None
        if rho_total in (None, "")
        else rho_units(rho_total, field="rho_total", rounding="down")
    )
    dataset = dataset_service.create_dataset(
        session,
        name=name,
        schema=dataset_schema,
        stream=file.file,
        rho_total_units=rho_total_units,
        max_bytes=settings.max_upload_bytes,
    )
    return DatasetOut.of(dataset, for_admin=True)


@router.get("", response_model=list[DatasetOut], response_model_exclude_none=True)
def list_datasets(session: ReadSessionDep, principal: PrincipalDep) -> list[DatasetOut]:
    """The admin sees every dataset; a tenant those it holds a grant on (without row counts)."""
    tenant_id = principal.tenant_id
    return [
        DatasetOut.of(dataset, for_admin=principal.is_admin)
        for dataset in dataset_service.list_datasets(session, tenant_id=tenant_id)
    ]


@router.get(
    "/{dataset_id}",
    response_model=DatasetOut,
    response_model_exclude_none=True,
    responses=error_responses({404: NO_SUCH_DATASET}),
)
def read_dataset(
    dataset_id: ResourceId, session: ReadSessionDep, principal: PrincipalDep
) -> DatasetOut:
    """The dataset's public schema. Its exact row count is private: only the admin sees it."""
    tenant_id = principal.tenant_id
    dataset = dataset_service.get_dataset(session, dataset_id, tenant_id=tenant_id)
    return DatasetOut.of(dataset, for_admin=principal.is_admin)
