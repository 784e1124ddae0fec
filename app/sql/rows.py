"""`Totals` → the result table: one row per group the WHERE clause can hold, the
aggregates' values (NULL where SQL gives NULL), then HAVING, ORDER BY and the page.

Columns are computed whole (numpy over the group cells); only HAVING and ORDER BY,
when the query has them, look at rows one by one.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from cachetools import LRUCache

from app.limits import COUNT_DECIMALS
from app.sql.compile import SqlPlan
from app.sql.cut_bounds import CutTotals, cut_bounds
from app.sql.factored import group_cells, support
from app.sql.predicates import AttributeCodes
from app.sql.quantiles import of_function
from app.sql.results import (
    BOUNDED,
    AggregateSpec,
    Row,
    Totals,
    aggregate_bounds,
    aggregate_values,
    holds,
    order_rows,
    page,
)

Cell = str | int | float | None
Interval = list[float] | list[int]


@dataclass(frozen=True)
class SqlTable:
    """Column names, rows of values, per value its standard error (None: none) and its
    guaranteed [least, greatest] (None: none); per column how its estimate was made
    (None where no number stands for a bin); per quantile column, the interval of the
    code each value lies in."""

    columns: list[str]
    rows: list[list[Cell]]
    errors: list[list[float | None]]
    # None when no column has bounds (no SUM/AVG/VAR/STDDEV, no bin cut by WHERE).
    bounds: list[list[list[float] | None]] | None
    estimates: list[str | None]
    # Per column (aligned with `columns`): None, or one entry per row.
    bins: list[list[Interval | None] | None]


def _quantiles(
    plan: SqlPlan, spec: AggregateSpec, totals: Totals, cells: np.ndarray, has_value: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A quantile aggregate per shown group cell: values, and its code's low and high
    ends (NaN where SQL gives NULL)."""
    attribute = spec.attribute
    if attribute is None:
        raise ValueError(f"{spec.function} needs an attribute")
    intervals = plan.codes[attribute].intervals
    counts = totals.values[attribute][cells]
    found = np.full((3, len(cells)), np.nan)
    for position, cell in enumerate(cells.tolist()):
        if not has_value[cell]:
            continue
        answer = of_function(spec.function, spec.fraction, counts[position], intervals)
        if answer is not None:
            found[:, position] = (answer.value, answer.low, answer.high)
    return found[0], found[1], found[2]


def _integers(values: list[Cell]) -> list[Cell]:
    return [v if v is None or isinstance(v, str) else round(v) for v in values]


def _shown(values: np.ndarray) -> list[float | None]:
    """Floats as JSON numbers; NaN (SQL NULL, or no standard error) as None."""
    return [value if value == value else None for value in values.tolist()]


def _kept_positions(
    plan: SqlPlan,
    group_codes: Sequence[np.ndarray],
    values: Sequence[np.ndarray],
    errors: Sequence[np.ndarray | None],
) -> np.ndarray:
    """The positions (among the group cells) of the rows shown, in their order: HAVING,
    then ORDER BY, then the page."""
    count = len(values[0]) if values else (len(group_codes[0]) if group_codes else 1)
    if plan.having is None and not plan.order:
        end = None if plan.limit is None else plan.offset + plan.limit
        return np.arange(count)[plan.offset : end]
    shown_values = [_shown(v) for v in values]
    shown_errors = [_shown(e) if e is not None else [None] * count for e in errors]
    codes_lists = [c.tolist() for c in group_codes]
    rows: list[Row] = []
    position_of: dict[int, int] = {}
    for position in range(count):
        codes = {name: codes_lists[k][position] for k, name in enumerate(plan.group)}
        row = Row(codes, [v[position] for v in shown_values], [e[position] for e in shown_errors])
        if plan.having is None or holds(plan.having, codes, row.values) is True:
            rows.append(row)
            position_of[id(row)] = position
    sort_code = {
        name: [plan.codes[name].sort_key(c) for c in range(plan.codes[name].size)]
        for name in plan.group
    }
    ordered = page(order_rows(rows, plan.order, sort_code), plan.limit, plan.offset)
    return np.asarray([position_of[id(row)] for row in ordered], dtype=np.int64)


@dataclass(frozen=True)
class _Column:
    """One output column over the rows shown: a grouped attribute's codes, or an
    aggregate's values (NaN: NULL) with its standard errors, bins and bounds."""

    name: str
    codes: AttributeCodes | None = None
    code_of_row: np.ndarray | None = None
    values: np.ndarray | None = None
    integer: bool = False  # a quantile of an integer attribute
    errors: np.ndarray | None = None
    ends: tuple[np.ndarray, np.ndarray] | None = None
    limits: tuple[np.ndarray, np.ndarray] | None = None
    estimate: str | None = None


def _bounds(
    plan: SqlPlan,
    spec: AggregateSpec,
    totals: Totals,
    estimate: np.ndarray,
    cells: np.ndarray,
    cut: CutTotals | None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """An aggregate's [least, greatest] per shown group cell (NaN where it has none);
    None for an aggregate without bounds. WHERE cutting a bin: `app.sql.cut_bounds`."""
    if cut is not None:
        return cut_bounds(plan, spec, cut, estimate, cells)
    if spec.attribute is None:
        return None
    low, high = plan.codes[spec.attribute].value_ranges
    shown = Totals(
        totals.count[cells],
        {name: table[cells] for name, table in totals.sums.items()},
        {name: table[cells] for name, table in totals.histograms.items()},
        {name: table[cells] for name, table in totals.edges.items()},
    )
    return aggregate_bounds(spec, shown, estimate, low, high)


def _estimate(plan: SqlPlan, aggregate: int) -> str | None:
    """How an aggregate column's numbers stand for its values (None: not a sum of values)."""
    spec = plan.aggregates[aggregate]
    if spec.attribute is None or spec.function not in BOUNDED:
        return None
    return plan.codes[spec.attribute].estimate


@dataclass(frozen=True)
class _Layout:
    """What a plan's rows are, whatever the model's numbers: the group cells shown (in
    order), their codes per grouped attribute, and per aggregate which group cells hold
    values of its attribute (read only)."""

    cells: np.ndarray
    group_codes: list[np.ndarray]
    has_value: list[np.ndarray]

    @property
    def nbytes(self) -> int:
        arrays = [self.cells, *self.group_codes, *self.has_value]
        return sum(array.nbytes for array in arrays)


# Layouts by plan token, bounded by the bytes they hold (a GROUP BY may have 10⁶ groups).
_LAYOUTS: LRUCache[object, _Layout] = LRUCache(
    maxsize=32 * 1024 * 1024, getsizeof=lambda layout: layout.nbytes
)
_LAYOUTS_LOCK = threading.Lock()


def _layout(plan: SqlPlan) -> _Layout:
    with _LAYOUTS_LOCK:
        kept = _LAYOUTS.get(plan.token)
    if kept is not None:
        return kept
    # Without GROUP BY there is one row, even over no rows at all (COUNT 0, SUM NULL).
    if plan.group:
        found = support(plan, None)
        if plan.approximate:  # a group the cut bins may hold rows of
            found |= support(plan.bound_plan(upper=True), None)
        cells = np.flatnonzero(found)
    else:
        cells = np.zeros(1, dtype=np.int64)
    everywhere = np.ones(group_cells(plan), dtype=bool)
    has_value = [
        support(plan, spec.attribute)
        if spec.attribute is not None and spec.function != "count"
        else everywhere
        for spec in plan.aggregates
    ]
    sizes = [plan.codes[name].size for name in plan.group]
    group_codes = list(np.unravel_index(cells, sizes)) if plan.group else []
    layout = _Layout(cells, group_codes, has_value)
    with _LAYOUTS_LOCK, contextlib.suppress(ValueError):  # larger than the whole cache
        _LAYOUTS[plan.token] = layout
    return layout


def _columns(
    plan: SqlPlan,
    totals: Totals,
    standard_errors: Mapping[int, np.ndarray] | None,
    cut: CutTotals | None,
) -> tuple[list[_Column], int]:
    """The output columns over the rows shown, and how many rows there are."""
    errors = standard_errors or {}
    layout = _layout(plan)
    cells = layout.cells
    values: list[np.ndarray] = []
    spreads: list[np.ndarray | None] = []
    ends: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for index, spec in enumerate(plan.aggregates):
        has_value = layout.has_value[index]
        if spec.is_quantile:
            value, low, high = _quantiles(plan, spec, totals, cells, has_value)
            values.append(value)
            ends[index] = (low, high)
        else:
            value = aggregate_values(spec, totals, has_value)[cells]
            # Counts to thousandths of a record, as GET /marginals gives them.
            values.append(np.round(value, COUNT_DECIMALS) if spec.function == "count" else value)
        spread = errors.get(index)
        spreads.append(spread[cells] if spread is not None else None)
    group_codes = layout.group_codes
    kept = _kept_positions(plan, group_codes, values, spreads)
    # Only the rows shown need bounds (a variance's bounds take a search each).
    limits: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for index, spec in enumerate(plan.aggregates):
        pair = _bounds(plan, spec, totals, values[index][kept], cells[kept], cut)
        if pair is not None:
            limits[index] = pair
    columns = []
    for output in plan.outputs:
        if output.group is not None:
            codes = group_codes[plan.group.index(output.group)][kept]
            columns.append(_Column(output.name, plan.codes[output.group], codes))
        elif output.aggregate is not None:
            index = output.aggregate
            spec = plan.aggregates[index]
            spread = spreads[index]
            span = ends.get(index)
            limit = limits.get(index)
            columns.append(
                _Column(
                    output.name,
                    values=values[index][kept],
                    integer=span is not None and plan.codes[spec.attribute or ""].intervals.integer,
                    errors=spread[kept] if spread is not None else None,
                    ends=(span[0][kept], span[1][kept]) if span is not None else None,
                    limits=limit,
                    estimate=_estimate(plan, index),
                )
            )
    return columns, len(kept)


def _pairs(low: list[Any], high: list[Any]) -> list[list[Any] | None]:
    return [None if a is None or b is None else [a, b] for a, b in zip(low, high, strict=True)]


def build_table(
    plan: SqlPlan,
    totals: Totals,
    standard_errors: Mapping[int, np.ndarray] | None = None,
    cut: CutTotals | None = None,
) -> SqlTable:
    """The rows of a plan from its totals; `standard_errors` by aggregate index, per group
    cell (NaN where there is none); `cut`, when WHERE cuts a bin, the totals of the lower
    and upper bound plans (`SqlPlan.bound_plan`)."""
    columns, count = _columns(plan, totals, standard_errors, cut)
    cells: list[list[Cell]] = []
    errors: list[list[float | None]] = []
    bins: list[list[Interval | None] | None] = []
    bounds: list[list[list[float] | None]] = []
    nothing: list[None] = [None] * count
    for column in columns:
        if column.codes is not None and column.code_of_row is not None:
            labels = column.codes.labels
            cells.append([labels[c] for c in column.code_of_row.tolist()])
        elif column.values is not None:
            shown: list[Cell] = list(_shown(column.values))
            cells.append(_integers(shown) if column.integer else shown)
        errors.append(_shown(column.errors) if column.errors is not None else list(nothing))
        if column.ends is None:
            bins.append(None)
        else:
            low: list[Any] = _shown(column.ends[0])
            high: list[Any] = _shown(column.ends[1])
            if column.integer:
                low, high = _integers(low), _integers(high)
            bins.append(_pairs(low, high))
        limits = column.limits
        bounds.append(
            list(nothing) if limits is None else _pairs(_shown(limits[0]), _shown(limits[1]))
        )
    bounded = any(column.limits is not None for column in columns)
    return SqlTable(
        [c.name for c in columns],
        _rows(cells, count),
        _rows(errors, count),
        _rows(bounds, count) if bounded else None,
        [c.estimate for c in columns],
        bins,
    )


def _rows(columns: Sequence[Sequence[object]], count: int) -> list[list[Any]]:
    """Columns → rows. A table of nulls only (no standard error, no interval) is one
    row shared by every row: it is only ever encoded, never changed."""
    if not columns:
        return [[] for _ in range(count)]
    if all(column[0] is None and column.count(None) == count for column in columns if count):
        return [[None] * len(columns)] * count
    return list(map(list, zip(*columns, strict=True)))


# ---- the same table as JSON, column by column -------------------------------------------

# Row templates by plan token (`SqlPlan.token`: a plan that is gone never matches
# another), bounded by the bytes they hold.
_TEMPLATES: LRUCache[tuple[object, int, int], tuple[bytes, bytes]] = LRUCache(
    maxsize=64 * 1024 * 1024, getsizeof=lambda templates: len(templates[0]) + len(templates[1])
)
_TEMPLATES_LOCK = threading.Lock()

_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def _encoded_numbers(values: np.ndarray, integer: bool = False) -> list[bytes]:
    """Each number as JSON (NaN as null), by orjson's numpy path: no Python float per
    value. Integers (quantiles of integer attributes) as integers."""
    if len(values) == 0:
        return []
    if integer:
        text = orjson.dumps([None if v != v else round(v) for v in values.tolist()])
    else:
        text = orjson.dumps(np.ascontiguousarray(values, dtype=np.float64), option=_NUMPY)
    return text[1:-1].split(b",")


def _encoded_pairs(low: list[bytes], high: list[bytes]) -> list[bytes]:
    return [
        b"null" if a == b"null" or b == b"null" else b"[" + a + b"," + b + b"]"
        for a, b in zip(low, high, strict=True)
    ]


def _joined_rows(columns: Sequence[Sequence[bytes]], count: int) -> bytes:
    """Rows of already-encoded cells as one JSON array of arrays."""
    if count == 0:
        return b"[]"
    if not columns:
        return b"[" + b",".join([b"[]"] * count) + b"]"
    return b"[[" + b"],[".join(map(b",".join, zip(*columns, strict=True))) + b"]]"


def _interleaved(columns: Sequence[Sequence[bytes]]) -> tuple[bytes, ...]:
    """Cells row by row: the arguments of a `_templates` template."""
    if len(columns) == 1:
        return tuple(columns[0])
    return tuple(itertools.chain.from_iterable(zip(*columns, strict=True)))


def _templates(
    plan: SqlPlan, columns: Sequence[_Column], leading: int, count: int
) -> tuple[bytes, bytes]:
    """The rows' JSON and the standard errors' JSON with the leading group labels (the
    same on every answer of the plan) written in, and a `%s` per other cell: kept per
    plan, so an answer only formats its numbers into them."""
    key = (plan.token, leading, count)
    with _TEMPLATES_LOCK:
        found = _TEMPLATES.get(key)
    if found is not None:
        return found
    labels = [
        [column.codes.labels_json[c] for c in column.code_of_row.tolist()]
        for column in columns[:leading]
        if column.codes is not None and column.code_of_row is not None
    ]
    slots = b",".join([b"%s"] * (len(columns) - leading))
    rows = [b",".join(row).replace(b"%", b"%%") + b"," + slots for row in zip(*labels, strict=True)]
    errors = b"null," * leading + slots
    templates = (b"[[" + b"],[".join(rows) + b"]]", b"[[" + b"],[".join([errors] * count) + b"]]")
    with _TEMPLATES_LOCK, contextlib.suppress(ValueError):  # larger than the whole cache
        _TEMPLATES[key] = templates
    return templates


def _static_prefixes(plan: SqlPlan, columns: Sequence[_Column]) -> int:
    """How many leading columns are grouped attributes whose encoded labels are the same
    on every answer of the plan (rows chosen without HAVING or ORDER BY)."""
    if plan.having is not None or plan.order:
        return 0
    leading = 0
    for column in columns:
        if column.codes is None:
            break
        leading += 1
    return leading if leading < len(columns) else 0


def build_table_json(
    plan: SqlPlan,
    totals: Totals,
    standard_errors: Mapping[int, np.ndarray] | None = None,
    cut: CutTotals | None = None,
) -> dict[str, Any]:
    """`build_table`'s table as JSON pieces (`columns` and `estimates`, then `rows`,
    `standard_errors`, `bounds` and `bins` as `orjson.Fragment`s), encoded column by
    column: what the HTTP answer sends, without a Python value per cell."""
    columns, count = _columns(plan, totals, standard_errors, cut)
    leading = _static_prefixes(plan, columns)
    cells: list[list[bytes]] = []
    errors: list[list[bytes]] = []
    bins: list[bytes] = []
    bounds: list[list[bytes]] = []
    nulls = [b"null"] * count
    templates = _templates(plan, columns, leading, count) if leading and count else None
    for position, column in enumerate(columns):
        if position < leading:
            bins.append(b"null")
            continue
        if column.codes is not None and column.code_of_row is not None:
            encoded = column.codes.labels_json
            cells.append([encoded[c] for c in column.code_of_row.tolist()])
        elif column.values is not None:
            cells.append(_encoded_numbers(column.values, column.integer))
        errors.append(_encoded_numbers(column.errors) if column.errors is not None else nulls)
        if column.ends is None:
            bins.append(b"null")
        else:
            low = _encoded_numbers(column.ends[0], column.integer)
            high = _encoded_numbers(column.ends[1], column.integer)
            bins.append(b"[" + b",".join(_encoded_pairs(low, high)) + b"]")
        if column.limits is None:
            bounds.append(nulls)
        else:
            bounds.append(_encoded_pairs(*(_encoded_numbers(end) for end in column.limits)))
    bounded = any(column.limits is not None for column in columns)
    # null as a whole when no value has one (NaN: none), as `answer_sql`'s plain table
    spread = any(
        column.errors is not None and bool((column.errors == column.errors).any())
        for column in columns
    )
    if templates is not None:
        rows = templates[0] % _interleaved(cells)
        # the bounds have the same layout as the errors
        spreads = templates[1] % _interleaved(errors) if spread else b"null"
        ranges = templates[1] % _interleaved(bounds) if bounded else b"null"
    else:
        rows = _joined_rows(cells, count)
        spreads = _joined_rows(errors, count) if spread else b"null"
        ranges = _joined_rows(bounds, count) if bounded else b"null"
    return {
        "columns": [c.name for c in columns],
        "rows": orjson.Fragment(rows),
        "standard_errors": orjson.Fragment(spreads),
        "bounds": orjson.Fragment(ranges),
        "estimates": [c.estimate for c in columns],
        "bins": orjson.Fragment(b"[" + b",".join(bins) + b"]"),
    }
