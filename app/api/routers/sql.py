"""POST /v1/datasets/{id}/sql: SQL over the dataset's latest model (free, API v1.2).

The text is checked against the grammar first (no model needed), then compiled over
the model's schema to factored queries and answered like `POST /queries`: small work
on the event loop, larger in an answer thread. `Accept: text/csv` returns the table as
CSV. Never touches the ledger or the records.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.answering import answer, model_for
from app.api.deps import DatabaseDep, DatasetAccessDep, ReadsDep, SettingsDep
from app.api.schemas import RequestBody, error_responses
from app.api.unmeasured import DOCUMENTED, mark_unmeasured
from app.services import answers
from app.sql import MAX_SQL_CHARACTERS

router = APIRouter(prefix="/v1/datasets/{dataset_id}", tags=["answers (free)"])


class SqlIn(RequestBody):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "query": "SELECT sex, COUNT(*) AS n, AVG(age) FROM adult "
                    'WHERE "hours-per-week" >= 40 GROUP BY sex ORDER BY n DESC'
                }
            ]
        },
    )
    # Longer texts reach the service's own check, which names the limit (sql_too_complex).
    query: str = Field(
        max_length=MAX_SQL_CHARACTERS * 10,
        description=f"One SELECT statement, at most {MAX_SQL_CHARACTERS} characters.",
    )


class SqlOut(BaseModel):
    columns: list[str]
    rows: list[list[Any]] = Field(description="One list of values per row; NULL is null.")
    standard_errors: list[list[float | None]] | None = Field(
        description="Per value: its standard error where measurements cover what it adds "
        "up (COUNT and SUM), else null; null as a whole when no value has one."
    )
    bins: list[list[list[float] | None] | None] = Field(
        description="Per column: for MEDIAN, PERCENTILE_CONT, MIN and MAX, per row the "
        "interval [low, high] of the bin (or the integers) the value lies in; else null."
    )
    bounds: list[list[list[float] | None]] | None = Field(
        description="Per value: [least, greatest] the bins' edges allow given the model's "
        "counts (SUM, AVG, VAR_*, STDDEV_* of a numeric or integer attribute; equal to the "
        "value when each code is one integer; COUNT when the WHERE clause cuts a bin, the "
        "cut bins counted not at all and whole), else null; null as a whole when no "
        "column has bounds."
    )
    estimates: list[str | None] = Field(
        description='Per column: how its numbers stand for the values in a bin ("midpoint", '
        '"within-bin means" or "exact") for SUM/AVG/VAR/STDDEV columns, else null.'
    )
    approximate: bool = Field(
        description="WHERE cuts a bin: its records are spread uniformly within it."
    )
    model_version: int
    unmeasured: list[str] = Field(description="Attributes of the query no measurement touched.")
    note: str | None
    terms: int = Field(description="Inclusion–exclusion terms of the WHERE clause.")
    factored_queries: int = Field(description="Factored queries the answer took.")


def _wants_csv(request: Request) -> bool:
    return "text/csv" in request.headers.get("accept", "").lower()


@router.post(
    "/sql",
    response_model=None,
    responses={
        200: {"model": SqlOut, "content": {"text/csv": {}}, "headers": DOCUMENTED},
        **error_responses(
            {
                404: "No such dataset (or no grant on it); or `no_model` before the first fit.",
                422: "`bad_sql` (syntax, unknown name or value, with its position), "
                "`unsupported_sql` (a construct outside the grammar, named, with its "
                "position), `sql_too_complex`, `query_too_large`, `too_many_cells`.",
            }
        ),
    },
)
async def answer_sql(
    request: Request,
    body: SqlIn,
    database: DatabaseDep,
    access: DatasetAccessDep,
    settings: SettingsDep,
    reads: ReadsDep,
) -> Response:
    """A SQL SELECT answered from the model (free): grouped COUNT/SUM/AVG/VAR/STDDEV."""
    answers.read_sql(body.query)  # refusals of the text come before any model is needed
    loaded = await model_for(database, access)
    names = answers.cached_table_names(access.dataset_id)
    if names is None:
        names = await reads.run(partial(answers.table_names, dataset_id=access.dataset_id))
    prepared = answers.prepare_text(
        loaded, body.query, table_names=names, max_cells=settings.max_marginal_cells
    )
    wants_csv = _wants_csv(request)
    result = await answer(
        prepared.size, lambda: answers.answer_sql(loaded, prepared, encoded=not wants_csv)
    )
    if wants_csv:
        csv = Response(
            answers.sql_csv(result),
            media_type="text/csv; charset=utf-8",
            headers={"X-Model-Version": str(result["model_version"])},
        )
        return mark_unmeasured(csv, result["unmeasured"])
    body_json = answers.sql_json(result)
    return mark_unmeasured(Response(body_json, media_type="application/json"), result["unmeasured"])
