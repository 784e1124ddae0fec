"""Registering a dataset by reference: `POST /v1/datasets` with a JSON body (admin).

The same path and method as the upload (`datasets.py`), told apart by the body's media
type (`app.api.media_routes`). This route is hidden from the OpenAPI document; its body
and its 202 answer are documented on the upload's operation (`REGISTRATION_OPENAPI`),
as a second request body.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, status
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from sqlalchemy.orm import Session

from app.api.concurrency import write_endpoint
from app.api.deps import AdminAuth, SettingsDep
from app.api.media_routes import JsonBodyRoute
from app.api.schemas import RequestBody
from app.api.types import MAX_DECIMAL_TEXT, RHO_TOTAL, Name
from app.services import datasets as dataset_service
from app.services import sources as source_service
from app.services.rho import rho_units

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], route_class=JsonBodyRoute)

# A URI as long as any object store allows a key, and then some.
MAX_URI_LENGTH = 4096


def _rho_total(value: Any) -> Any:
    """A JSON number in range, or the exact decimal text of one (as the upload's field)."""
    if isinstance(value, str):
        return RHO_TOTAL.check_decimal_text(value)
    return None if value is None else RHO_TOTAL.check(value)


class SourceIn(RequestBody):
    format: Literal["parquet"] = Field(description="The files' format: only Parquet.")
    uri: str = Field(
        min_length=1,
        max_length=MAX_URI_LENGTH,
        description="A Parquet file or a folder of them (walked recursively, hive-style "
        "partition folders included; names starting with _ or . skipped): file:///… or "
        "s3://bucket/prefix/, within the operator's PRIVQ_SOURCE_ROOTS. Credentials come "
        "from the environment of privq's processes, never from the request.",
        examples=["file:///srv/lake/visits/"],
    )


class DatasetRegistration(RequestBody):
    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {
                    "name": "visits",
                    "schema": {
                        "attributes": [
                            {"name": "sex", "type": "categorical", "values": ["F", "M"]},
                            {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
                        ]
                    },
                    "source": {"format": "parquet", "uri": "file:///srv/lake/visits/"},
                    "privacy_unit": {"column": "person_id", "max_rows": 3},
                    "rho_total": 2.0,
                }
            ]
        },
    )
    name: Name
    schema_: dict[str, Any] = Field(
        alias="schema",
        description='The public schema, as for an upload: {"attributes": [...]} or a size map.',
    )
    source: SourceIn
    privacy_unit: dict[str, Any] | None = Field(
        default=None,
        description='Optional: {"column": "person_id", "max_rows": k}. Rows sharing an id are '
        "one unit; each access counts at most k of them (the same rows every time, chosen by "
        "a keyed hash).",
    )
    rho_total: Annotated[
        float | str | None,
        BeforeValidator(_rho_total),
        Field(
            description="Optional cap on the ρ of all grants together: a number with "
            f"{RHO_TOTAL.text} (or its decimal text, at most {MAX_DECIMAL_TEXT} characters).",
        ),
    ] = None


class RegistrationOut(BaseModel):
    id: str
    name: str
    status: Literal["registering"] = Field(
        description="The dataset is registering until its job has scanned the source."
    )
    job_id: str = Field(description="The registration job: GET /v1/jobs/{job_id}.")


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RegistrationOut,
    include_in_schema=False,
)
@write_endpoint
def register_dataset(
    body: DatasetRegistration, session: Session, settings: SettingsDep, _admin: AdminAuth
) -> RegistrationOut:
    """Register a Parquet source by reference; a job scans it (see the upload's operation)."""
    schema = dataset_service.parse_dataset_schema(body.schema_)
    unit = dataset_service.parse_privacy_unit_field(body.privacy_unit, schema)
    rho_total_units = (
        None
        if body.rho_total is None
        else rho_units(body.rho_total, field="rho_total", rounding="down")
    )
    dataset, job = source_service.register(
        session,
        name=body.name,
        schema=schema,
        source_format=body.source.format,
        uri=body.source.uri,
        roots=settings.source_root_list,
        rho_total_units=rho_total_units,
        unit=unit,
    )
    return RegistrationOut(id=dataset.id, name=dataset.name, status="registering", job_id=job.id)


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A model's JSON schema with its `$defs` put in place (the document has no room for
    them under a hidden route's operation)."""
    definitions = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            reference = node.get("$ref")
            if isinstance(reference, str) and reference.startswith("#/$defs/"):
                return resolve(definitions[reference.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    return resolve(schema)  # type: ignore[no-any-return]


# The upload operation's second request body and its answer (`openapi_extra`).
REGISTRATION_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "content": {
            "application/json": {
                "schema": _inlined(DatasetRegistration.model_json_schema(by_alias=True))
            }
        }
    },
    "responses": {
        "202": {
            "description": "A JSON body registered a Parquet source by reference, copying no "
            "row: the dataset is `registering` until the job `job_id` has scanned every value "
            "against the schema, then `ready`, or `rejected` with the reason "
            "(GET /v1/datasets/{id}, admin: `error`)",
            "content": {
                "application/json": {
                    "schema": _inlined(RegistrationOut.model_json_schema()),
                }
            },
        }
    },
}
