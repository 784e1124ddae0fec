"""SQL over the model (API v1.2): a SELECT compiled by `app.sql` to factored queries and
answered from the dataset's latest model — free, post-processing like `POST /queries`.

`read_sql` checks the text against the grammar (no model needed); `prepare_sql`
compiles it over the model's schema and sizes the work under the same limits as the
other free answers (`TooManyCells` past the response cap, `QueryTooLarge` past the
inference cap); `answer_sql` runs the factored queries and builds the table, with the
attributes no measurement touched and, for COUNT and SUM, a standard error per value
where measurements cover the marginal the value adds up (AIM §5, Theorem 1's
estimator, as GET /marginals reports it).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from cachetools import LRUCache
from sqlalchemy import select
from sqlalchemy.orm import Session

from app import sql
from app.db import Dataset
from app.errors import NotFound
from app.pgm.elimination import InferenceTooLarge
from app.services.answers.bin_values import bin_values
from app.services.answers.common import (
    MAX_INFERENCE_CELLS,
    MAX_QUERIES_PER_REQUEST,
    TooManyCells,
    WorkSize,
    too_large,
    untouched_note,
)
from app.services.answers.marginals import standard_error
from app.services.models import LoadedModel
from app.sql import SqlPlan, Statement, TermQuery


@dataclass(frozen=True)
class PreparedSql:
    """A compiled query, its factored queries, and the size of the work answering takes."""

    plan: SqlPlan
    queries: tuple[TermQuery, ...]
    size: WorkSize
    # When WHERE cuts a bin: the counts queries of the lower and the upper bound.
    bound_queries: tuple[tuple[TermQuery, ...], tuple[TermQuery, ...]] | None = None


def read_sql(text: str) -> Statement:
    """Parse and check the text against the grammar (bad_sql, unsupported_sql, …)."""
    return sql.read(text)


# Names of datasets (fixed at upload) by id: FROM may name the dataset or its id.
_names: LRUCache[str, str] = LRUCache(maxsize=4096)
_names_lock = threading.Lock()


def table_names(session: Session, dataset_id: str) -> tuple[str, str]:
    """What FROM may say for this dataset: its name, then its id."""
    with _names_lock:
        name = _names.get(dataset_id)
    if name is None:
        found = session.execute(select(Dataset.name).where(Dataset.id == dataset_id)).scalar()
        if found is None:
            raise NotFound("no such dataset")
        name = str(found)
        with _names_lock:
            _names[dataset_id] = name
    return name, dataset_id


def cached_table_names(dataset_id: str) -> tuple[str, str] | None:
    """`table_names` without a database read, when this process has read them before."""
    with _names_lock:
        name = _names.get(dataset_id)
    return None if name is None else (name, dataset_id)


# Compiled queries by (dataset, model version, text, FROM names, cell cap): a version is
# immutable, so its plan and factored queries are a pure function of the key; a query
# asked again (a dashboard's refresh) skips compiling and sizing. Refusals are not kept.
_PreparedKey = tuple[str, int, str, tuple[str, ...], int]
_prepared: LRUCache[_PreparedKey, PreparedSql] = LRUCache(maxsize=512)
_prepared_lock = threading.Lock()


def prepare_text(
    loaded: LoadedModel, text: str, *, table_names: Sequence[str], max_cells: int
) -> PreparedSql:
    """`prepare_sql(read_sql(text))`, kept per model version and text."""
    key = (loaded.dataset_id, loaded.version, text, tuple(table_names), max_cells)
    with _prepared_lock:
        prepared = _prepared.get(key)
    if prepared is None:
        prepared = prepare_sql(loaded, read_sql(text), table_names=table_names, max_cells=max_cells)
        with _prepared_lock:
            _prepared[key] = prepared
    return prepared


def prepare_sql(
    loaded: LoadedModel,
    statement: Statement,
    *,
    table_names: Sequence[str],
    max_cells: int,
) -> PreparedSql:
    """Compile a checked statement over the model and size it (every refusal a 422)."""
    schema, model = loaded.schema, loaded.model
    plan = _with_bin_values(
        loaded, sql.compile_statement(statement, schema, model.domain, table_names)
    )
    queries = sql.build_queries(plan, model.domain)
    bound_queries = None
    if plan.approximate:
        bound_queries = (
            sql.build_queries(plan.bound_plan(upper=False), model.domain),
            sql.build_queries(plan.bound_plan(upper=True), model.domain),
        )
    every = queries + (bound_queries[0] + bound_queries[1] if bound_queries else ())
    cells = sql.group_cells(plan)
    if cells > max_cells:
        raise TooManyCells(
            f"query: GROUP BY {', '.join(plan.group)} has {cells} groups, more than the "
            f"limit of {max_cells}; group by fewer or smaller attributes",
            parameter="query",
            cells=cells,
            max_cells=max_cells,
        )
    if len(every) > MAX_QUERIES_PER_REQUEST:
        raise sql.TooManyTerms(
            f"query: answering needs {len(every)} factored queries, more than the limit "
            f"of {MAX_QUERIES_PER_REQUEST}; aggregate fewer attributes or simplify WHERE",
            parameter="query",
            max_queries=MAX_QUERIES_PER_REQUEST,
        )
    largest = 0
    work = 0
    for item in every:
        try:
            tree_plan = model.query_plan(item.query, max_cells=MAX_INFERENCE_CELLS)
        except InferenceTooLarge as error:
            raise too_large(error, "query") from None
        largest = max(largest, tree_plan.max_intermediate_cells)
        work += tree_plan.work
    # The numbers computed per group, as a marginal counts its cells (labels not counted).
    size = WorkSize(cells * max(len(plan.aggregates), 1), largest, work)
    return PreparedSql(plan, queries, size, bound_queries)


def _with_bin_values(loaded: LoadedModel, plan: SqlPlan) -> SqlPlan:
    """The plan with each aggregated attribute's representative values (`bin_values`),
    and, where within-bin means are measured, a quantile's or a cut bin's spread within
    each bin matched to its mean (`app.sql.spread`)."""
    codes = dict(plan.codes)
    pieces = dict(plan.pieces)
    names = dict.fromkeys([*plan.moment_attributes, *plan.quantile_attributes, *plan.pieces])
    for name in names:
        if codes[name].kind == "categorical":  # COUNT(a) only counts its values
            continue
        values = bin_values(loaded, name)
        if name not in plan.moment_attributes and values.method != "within-bin means":
            continue
        codes[name] = dataclasses.replace(codes[name], values=values)
        if name in pieces:
            pieces[name] = pieces[name].respread(codes[name].intervals)
    return dataclasses.replace(plan, codes=codes, pieces=pieces, cache={})


# Standard errors by plan token (a plan is kept per model version and text), bounded by
# the bytes they hold: a GROUP BY may have 10⁶ groups.
_errors: LRUCache[object, dict[int, np.ndarray]] = LRUCache(
    maxsize=32 * 1024 * 1024,
    getsizeof=lambda errors: sum(array.nbytes for array in errors.values()) + 64,
)
_errors_lock = threading.Lock()


def _standard_errors(loaded: LoadedModel, plan: SqlPlan) -> dict[int, np.ndarray]:
    """Per aggregate, each group's standard error where measurements cover it (read only)."""
    with _errors_lock:
        kept = _errors.get(plan.token)
    if kept is not None:
        return kept
    errors: dict[int, np.ndarray] = {}
    for index, spec in enumerate(plan.aggregates):
        weights = sql.error_weights(plan, spec)
        if weights is None:
            continue
        attributes, sums = weights
        per_cell = standard_error(loaded, attributes).value
        if per_cell is not None:
            errors[index] = per_cell * np.sqrt(sums)
    with _errors_lock, contextlib.suppress(ValueError):  # larger than the whole cache
        _errors[plan.token] = errors
    return errors


def answer_sql(
    loaded: LoadedModel, prepared: PreparedSql, *, encoded: bool = False
) -> dict[str, Any]:
    """The result table: `{"columns", "rows", "standard_errors", "bins", "bounds",
    "estimates", "approximate", "model_version", "unmeasured", "note", "terms",
    "factored_queries"}`. `encoded`: the table's parts as JSON already
    (`orjson.Fragment`s), for `sql_json`."""
    plan = prepared.plan
    lower, upper = prepared.bound_queries or ((), ())
    every = prepared.queries + lower + upper
    answers = loaded.model.answer_many(
        [item.query for item in every], max_cells=MAX_INFERENCE_CELLS
    )
    estimate = len(prepared.queries)
    totals = sql.totals(plan, prepared.queries, answers[:estimate])
    count_bounds = None
    if prepared.bound_queries is not None:
        low_plan, high_plan = plan.bound_plan(upper=False), plan.bound_plan(upper=True)
        low = sql.totals(low_plan, lower, answers[estimate : estimate + len(lower)])
        high = sql.totals(high_plan, upper, answers[estimate + len(lower) :])
        count_bounds = sql.CutTotals(low, high)
    errors = _standard_errors(loaded, plan)
    table: dict[str, Any]
    if encoded:
        table = sql.build_table_json(plan, totals, errors, count_bounds)
    else:
        built = sql.build_table(plan, totals, errors, count_bounds)
        table = {
            "columns": built.columns,
            "rows": built.rows,
            # None as a whole when no value has one, as the bounds
            "standard_errors": (
                built.errors if any(e is not None for row in built.errors for e in row) else None
            ),
            "bounds": built.bounds,
            "estimates": built.estimates,
            "bins": built.bins,
        }
    unmeasured, note = untouched_note(loaded, plan.mentioned)
    return {
        **table,
        "approximate": plan.approximate,
        "model_version": loaded.version,
        "unmeasured": unmeasured,
        "note": note,
        "terms": len(plan.terms),
        "factored_queries": len(prepared.queries),
    }


def sql_json(result: dict[str, Any]) -> bytes:
    """The result as JSON bytes (orjson; `answer_sql(…, encoded=True)`'s parts are JSON
    already). Every number in a result is finite (NULL and "no error" are null)."""
    return orjson.dumps(result)


def sql_csv(result: dict[str, Any]) -> str:
    """The result table as CSV: a header of column names; NULL is an empty cell. Each
    column with bounds (SUM/AVG/VAR/STDDEV) adds two columns at the end of the row,
    `<column>_low` and `<column>_high`, in column order."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = result["columns"]
    bounds = result.get("bounds") or [[None] * len(columns) for _ in result["rows"]]
    estimates = result.get("estimates") or [None] * len(columns)
    bounded = [
        i
        for i, method in enumerate(estimates)
        if method is not None or any(pairs[i] is not None for pairs in bounds)
    ]
    writer.writerow(
        [*columns, *(f"{columns[i]}_{end}" for i in bounded for end in ("low", "high"))]
    )
    for row, pairs in zip(result["rows"], bounds, strict=True):
        ends = ["" if pairs[i] is None else pairs[i][end] for i in bounded for end in (0, 1)]
        writer.writerow([*("" if value is None else value for value in row), *ends])
    return out.getvalue()


def sql_answer(
    loaded: LoadedModel, text: str, *, table_names: Sequence[str], max_cells: int
) -> dict[str, Any]:
    """Read, compile and answer a query in one call (tests, benchmarks, scripts)."""
    return answer_sql(
        loaded, prepare_text(loaded, text, table_names=table_names, max_cells=max_cells)
    )


def resolve_dataset(session: Session, dataset: str) -> str:
    """The id of a dataset named by its id or its (unique) name, as the operator's
    command line names it; NotFound if none, or if several datasets share the name."""
    by_id = session.execute(
        select(Dataset.id).where(Dataset.id == dataset, Dataset.deleted_at.is_(None))
    ).scalar()
    if by_id is not None:
        return str(by_id)
    found = (
        session.execute(
            select(Dataset.id).where(Dataset.name == dataset, Dataset.deleted_at.is_(None))
        )
        .scalars()
        .all()
    )
    if len(found) == 1:
        return str(found[0])
    if found:
        raise NotFound(f"{len(found)} datasets are named {dataset!r}; give the id")
    raise NotFound(f"no dataset with the id or name {dataset!r}")
