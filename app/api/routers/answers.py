"""Free answers from a dataset's model: model, marginals, count, queries, synthetic.

All of them are post-processing of the latest model version: they never touch the
ledger. Which version answers is one read-only statement per request (never a
cached answer: a new version is served as soon as it exists); on SQLite it neither
waits for nor holds the write lock. No database connection is held while inference
runs. Answers are built as plain JSON values by `app.services.answers` and
sent as they are; the pydantic models below document them in OpenAPI only.

Marginals, counts and factored queries are `async`: small ones (see `app.api.answering`) are
answered on the event loop itself, because handing them to the thread pool — two
thread switches under the GIL — costs more CPU than answering them. Anything larger,
the first use of a model version (loading, belief propagation), and the version check
on PostgreSQL (a network round trip) run in a worker thread, so the loop keeps
serving other requests meanwhile. `/model` answers on the loop once the version is
loaded; `/synthetic` runs in a thread.

A tenant sees a dataset's answers only with a grant on it (else 404, as for a missing
dataset); the admin may read every dataset's answers, as it may read the dataset.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
)
from starlette.concurrency import run_in_threadpool

from app.api import answering
from app.api.answering import answer, model_for
from app.api.concurrency import run_answer
from app.api.deps import (
    DatabaseDep,
    DatasetAccessDep,
    PrincipalDep,
    SettingsDep,
    loop_read_engine,
)
from app.api.responses import SafeJSONResponse
from app.api.schemas import RequestBody, error_responses
from app.api.types import (
    AttributeName,
    Coordinate,
    LabelText,
    NumberRange,
    QueryWeight,
    ResourceId,
    SafeText,
    check_label,
)
from app.api.unmeasured import DOCUMENTED as UNMEASURED_DOC
from app.api.unmeasured import mark_unmeasured, unmeasured_headers
from app.services import answers
from app.services import models as model_service
from app.services.answers.common import unmeasured_attributes
from app.services.models import LoadedModel

router = APIRouter(prefix="/v1/datasets/{dataset_id}", tags=["answers (free)"])

NOT_FOUND = error_responses(
    {404: "No such dataset (or no grant on it); or `no_model` before the first fit."}
)
INVALID = error_responses(
    {422: "The request names something the schema does not have, or is too large."}
)


MOMENT_ORDER = NumberRange("moment", ge=1, le=answers.MAX_MOMENT_ORDER, whole=True)
SYNTHETIC_ROWS = NumberRange("rows", ge=0, le=answers.MAX_SYNTHETIC_ROWS, whole=True)
SEED = NumberRange("seed", ge=0, le=2**63 - 1, whole=True)


def _loaded_model(database: DatabaseDep, principal: PrincipalDep, dataset_id: str) -> LoadedModel:
    """The visible latest version, loaded and calibrated (blocking: for worker threads)."""
    return answers.visible_ready_model(database, dataset_id, tenant_id=principal.tenant_id)


async def _ready_model(
    request: Request, database: DatabaseDep, principal: PrincipalDep, dataset_id: str
) -> LoadedModel:
    """The visible latest version, checked on the loop when that is a local read."""
    tenant_id = principal.tenant_id
    engine = loop_read_engine(request)
    if engine is None:
        return await run_in_threadpool(_loaded_model, database, principal, dataset_id)
    version = model_service.visible_latest_version_on(engine, dataset_id, tenant_id=tenant_id)
    if version is None:
        raise model_service.NoModel()
    loaded = answers.ready_model(dataset_id, version)
    if loaded is None:
        loaded = await run_in_threadpool(answers.load_ready_model, database, dataset_id, version)
    return loaded


# ---- request bodies -----------------------------------------------------------------

# A value as the schema names it: a label (`"F"`, `"[18, 30)"`) or a number.
Label = Annotated[StrictStr | StrictInt | StrictFloat, BeforeValidator(check_label)]
# In a value list, null is the missing value of an attribute with "missing": true.
LabelOrNull = Label | None
MomentOrder = Annotated[
    int, MOMENT_ORDER.field("Highest power of the value."), BeforeValidator(MOMENT_ORDER.check)
]
# Per query: at most this many attributes named in each of where/by/weights/moments.
MAX_ATTRIBUTES_PER_CLAUSE = 1000
MAX_VALUES_PER_LIST = 1_000_000


class RangeIn(RequestBody):
    """A range on original values (numeric and integer attributes): from `ge`
    (included) up to `lt` (excluded) or `le` (included). Bins are [eᵢ, eᵢ₊₁), the last
    [eₙ₋₁, eₙ]: `le` at the top edge eₙ takes the last bin whole."""

    ge: Coordinate | None = None
    lt: Coordinate | None = None
    le: Coordinate | None = None


class GroupsIn(RequestBody):
    """Named groups of values: one answer row per group."""

    groups: dict[LabelText, list[LabelOrNull]] = Field(
        min_length=1, max_length=MAX_ATTRIBUTES_PER_CLAUSE
    )


class FactoredQueryIn(RequestBody):
    """One factored query (Private-PGM appendix B); unmentioned attributes are summed out."""

    where: dict[
        AttributeName,
        Annotated[list[LabelOrNull], Field(max_length=MAX_VALUES_PER_LIST)] | RangeIn,
    ] = Field(
        default_factory=dict,
        max_length=MAX_ATTRIBUTES_PER_CLAUSE,
        description='Evidence: a set of values, or {"ge", "lt" or "le"} on original values.',
    )
    by: dict[AttributeName, Literal["value", "cdf"] | GroupsIn] = Field(
        default_factory=dict,
        max_length=MAX_ATTRIBUTES_PER_CLAUSE,
        description="Answer axes: every value, cumulative counts, or named groups.",
    )
    weights: dict[
        AttributeName, Annotated[list[QueryWeight], Field(max_length=MAX_VALUES_PER_LIST)]
    ] = Field(
        default_factory=dict,
        max_length=MAX_ATTRIBUTES_PER_CLAUSE,
        description="Any row vector over an attribute's codes.",
    )
    moments: dict[AttributeName, MomentOrder] = Field(
        default_factory=dict,
        max_length=MAX_ATTRIBUTES_PER_CLAUSE,
        description="Σ value^k for k = 1..K (each code's representative value: bin "
        "midpoints, or within-bin means where measured), with bounds.",
    )

    def to_spec(self) -> answers.QuerySpec:
        return answers.QuerySpec(
            where={
                name: answers.ValueRange(c.ge, c.lt, c.le) if isinstance(c, RangeIn) else c
                for name, c in self.where.items()
            },
            by={
                name: answers.Grouping(how.groups) if isinstance(how, GroupsIn) else how
                for name, how in self.by.items()
            },
            weights=self.weights,
            moments=self.moments,
        )


class QueriesIn(RequestBody):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "queries": [
                        {"where": {"sex": ["F"], "age": {"ge": 30, "lt": 45}}},
                        {"by": {"race": "value"}, "moments": {"age": 2}},
                    ]
                }
            ]
        },
    )
    queries: list[FactoredQueryIn] = Field(min_length=1, max_length=answers.MAX_QUERIES_PER_REQUEST)


# ---- response documentation ---------------------------------------------------------


class ModelMeasurementOut(BaseModel):
    id: int
    attributes: list[str]
    noise: Literal["gaussian", "laplace"]
    sigma: float | None = Field(default=None, description="Gaussian noise std (Gaussian only).")
    scale: float | None = Field(default=None, description="Laplace scale b (Laplace only).")


class ModelWithinBinOut(BaseModel):
    attribute: str
    releases: int = Field(description="How many releases of it are combined.")
    rho: float = Field(description="What they cost, together.")


class ModelOut(BaseModel):
    version: int
    cliques: list[list[str]]
    fitted_at: str
    solver: str
    iterations: int
    loss: float
    fit_seconds: float
    measurement_count: int
    measurements: list[ModelMeasurementOut]
    within_bin_means: list[ModelWithinBinOut] = Field(
        default_factory=list,
        description="The within-bin means releases this version's answers use, by attribute.",
    )


class MarginalOut(BaseModel):
    attributes: list[str]
    values: list[list[str]] = Field(description="Cell labels, row-major over `attributes`.")
    counts: list[float] = Field(description="The model's counts N̂·p, one per cell.")
    model_version: int
    measured: bool = Field(description="Some measurement covers all these attributes.")
    covered_by: int = Field(description="How many measurements cover them.")
    standard_error: float | None = Field(
        description="Per-cell standard error of the covering measurements combined "
        "(inverse-variance weighted, AIM §5 Theorem 1); null if none covers them."
    )
    error_bound: dict[str, Any] | None = Field(description="Reserved: 95% L1 error bound.")
    unmeasured_attributes: list[str]
    note: str | None


class CountOut(BaseModel):
    count: float
    bounds: list[float] = Field(
        description="[low, high]: bins a range cuts counted not at all and whole (the "
        "count itself when no range cuts a bin)."
    )
    approximate: bool = Field(
        description="A range cuts a bin: its records are spread uniformly within it."
    )
    model_version: int
    note: str | None


class QuantileOut(BaseModel):
    p: float
    value: float | None = Field(description="The p-quantile; an integer for integer attributes.")
    bin: list[float] | None = Field(description="[low, high]: the bin (or integers) it lies in.")


class ExtremeOut(BaseModel):
    value: float
    bin: list[float]


class QuantilesOut(BaseModel):
    attribute: str
    quantiles: list[QuantileOut]
    min: ExtremeOut | None = Field(
        description="Low edge of the lowest bin whose estimated count is at least `min_max_count`."
    )
    max: ExtremeOut | None = Field(
        description="High edge of the highest bin whose estimated count is at least "
        "`min_max_count`."
    )
    count: float = Field(description="The model's count of records with a value.")
    min_max_count: float
    model_version: int
    note: str | None


class AnswerOut(BaseModel):
    attributes: list[str] = Field(description="The `by` and `moments` axes, in order.")
    labels: list[list[str]] = Field(description="Cell labels, row-major over the axes.")
    values: list[float] = Field(description="One value per cell; one value if no axes.")
    bounds: list[list[float]] | None = Field(
        description="Per cell, [least, greatest]: with `moments`, what the bins' edges allow "
        "given the model's counts (equal to the value for integer attributes); when a "
        "`where` range cuts a bin (no weights or moments), the cut bins counted not at all "
        "and whole; else null (a cut with weights or moments: the note says why)."
    )
    estimates: dict[str, str] = Field(
        description='Per `moments` attribute: how a code\'s value was chosen ("midpoint", '
        '"within-bin means" or "exact").'
    )
    note: str | None
    approximate: bool = Field(
        description="A `where` range cuts a bin: its records are spread uniformly within it."
    )


class AnswersOut(BaseModel):
    answers: list[AnswerOut]
    model_version: int


# ---- endpoints ----------------------------------------------------------------------


@router.get("/model", response_model=None, responses={200: {"model": ModelOut}, **NOT_FOUND})
async def read_model(database: DatabaseDep, access: DatasetAccessDep) -> SafeJSONResponse:
    """The latest model version: cliques, fit figures and the measurements it covers."""
    loaded = await model_for(database, access)
    return SafeJSONResponse(answers.model_description(loaded))


@router.get(
    "/marginals",
    response_model=None,
    responses={200: {"model": MarginalOut, "headers": UNMEASURED_DOC}, **NOT_FOUND, **INVALID},
)
async def read_marginals(
    database: DatabaseDep,
    access: DatasetAccessDep,
    settings: SettingsDep,
    attrs: Annotated[
        SafeText,
        Query(description="Attribute names, comma-separated: `age,sex`.", examples=["age,sex"]),
    ],
) -> Response:
    """The model's marginal over `attrs` (free: answered from the model, no budget spent)."""
    loaded = await model_for(database, access)
    names = answers.parse_attribute_list(loaded.schema, attrs)
    max_cells = settings.max_marginal_cells
    size = answers.marginal_size(loaded, names, max_cells=max_cells)
    body = await answer(size, lambda: answers.marginal_json(loaded, names, max_cells=max_cells))
    return Response(
        body,
        media_type="application/json",
        headers=unmeasured_headers(unmeasured_attributes(loaded, names)),
    )


@router.get(
    "/count",
    response_model=None,
    responses={200: {"model": CountOut, "headers": UNMEASURED_DOC}, **NOT_FOUND, **INVALID},
)
async def read_count(
    database: DatabaseDep,
    access: DatasetAccessDep,
    where: Annotated[
        list[SafeText],
        Query(
            description="Repeatable filter: `sex:F,M` (values) or `age:30..45` (half-open "
            "range on original values; either end may be left out; a range that cuts a "
            "bin spreads its records uniformly within it).",
            examples=[["sex:F", "age:30..45"]],
        ),
    ] = [],  # noqa: B006 — FastAPI copies query defaults
) -> SafeJSONResponse:
    """The model's count of records matching every filter (free)."""
    loaded = await model_for(database, access)
    count = answers.count_query(loaded, where)
    size = answers.count_size(loaded, count)
    response = await answer(size, lambda: SafeJSONResponse(answers.count_result(loaded, count)))
    return mark_unmeasured(response, unmeasured_attributes(loaded, count.attributes))


@router.get(
    "/quantiles",
    response_model=None,
    responses={200: {"model": QuantilesOut, "headers": UNMEASURED_DOC}, **NOT_FOUND, **INVALID},
)
async def read_quantiles(
    database: DatabaseDep,
    access: DatasetAccessDep,
    attr: Annotated[
        SafeText,
        Query(description="A numeric or integer attribute.", examples=["age"]),
    ],
    p: Annotated[
        SafeText | None,
        Query(
            description="Fractions from 0 to 1, comma-separated (default 0.25,0.5,0.75).",
            examples=["0.5,0.9"],
        ),
    ] = None,
) -> SafeJSONResponse:
    """Quantiles, MIN and MAX of one attribute from the model, each with its bin (free)."""
    fractions = answers.parse_fractions(p)
    loaded = await model_for(database, access)
    size = answers.quantiles_size(loaded, attr)
    response = await answer(
        size, lambda: SafeJSONResponse(answers.quantiles_answer(loaded, attr, fractions))
    )
    return mark_unmeasured(response, unmeasured_attributes(loaded, [attr]))


@router.post(
    "/queries",
    response_model=None,
    responses={200: {"model": AnswersOut, "headers": UNMEASURED_DOC}, **NOT_FOUND, **INVALID},
)
async def answer_queries(
    dataset_id: ResourceId,
    request: Request,
    body: QueriesIn,
    database: DatabaseDep,
    principal: PrincipalDep,
    settings: SettingsDep,
) -> SafeJSONResponse:
    """Factored linear queries answered by variable elimination on the model (free)."""
    loaded = await _ready_model(request, database, principal, dataset_id)
    specs = [query.to_spec() for query in body.queries]
    max_cells = settings.max_marginal_cells
    if len(specs) > answering.INLINE_MAX_QUERIES:
        response = await run_answer(
            lambda: SafeJSONResponse(answers.queries_answer(loaded, specs, max_cells=max_cells))
        )
    else:
        batch = answers.prepare_queries(loaded, specs, max_cells=max_cells)
        response = await answer(
            batch.size, lambda: SafeJSONResponse(answers.answer_prepared(loaded, batch))
        )
    mentioned = [
        name
        for q in body.queries
        for clause in (q.where, q.by, q.weights, q.moments)
        for name in clause
    ]
    return mark_unmeasured(response, unmeasured_attributes(loaded, mentioned))


@router.get(
    "/synthetic",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/csv": {}}, "headers": UNMEASURED_DOC},
        **NOT_FOUND,
        **INVALID,
    },
)
def read_synthetic(
    dataset_id: ResourceId,
    database: DatabaseDep,
    principal: PrincipalDep,
    rows: Annotated[
        int | None,
        SYNTHETIC_ROWS.field("Rows to make; default the model's estimated total."),
        BeforeValidator(lambda value: None if value is None else SYNTHETIC_ROWS.check_text(value)),
        Query(),
    ] = None,
    seed: Annotated[
        int | None,
        SEED.field("Seed, for reproducible records (the same bytes)."),
        BeforeValidator(lambda value: None if value is None else SEED.check_text(value)),
        Query(),
    ] = None,
    method: Annotated[
        Literal["round", "sample"],
        Query(
            description="round: every clique marginal of the records is the model's, up to "
            "rounding; sample: records drawn i.i.d. from the model."
        ),
    ] = "round",
) -> StreamingResponse:
    """Synthetic records from the model, streamed as CSV in the schema's values (numeric
    attributes as numbers inside their bins)."""
    loaded = _loaded_model(database, principal, dataset_id)
    count = answers.synthetic_rows(loaded, rows)
    return StreamingResponse(
        answers.synthetic_csv(loaded, count, seed, method=method),
        media_type="text/csv; charset=utf-8",
        headers={
            "Content-Disposition": (f'attachment; filename="synthetic-v{loaded.version}.csv"'),
            "X-Model-Version": str(loaded.version),
            "X-Rows": str(count),
            "X-Synthetic-Method": method,
            **unmeasured_headers(unmeasured_attributes(loaded, loaded.schema.names)),
        },
    )
