"""`Totals` → the result table: one row per group the WHERE clause can hold, the
aggregates' values (NULL where SQL gives NULL), then HAVING, ORDER BY and the page."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from app.sql.compile import SqlPlan
from app.sql.factored import group_cells, support
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


@dataclass(frozen=True)
class SqlTable:
    """Column names, rows of values, per value its standard error (None: none) and its
    guaranteed [least, greatest] (None: none), and per column how its estimate was made
    (None where no number stands for a bin)."""

    columns: list[str]
    rows: list[list[Cell]]
    errors: list[list[float | None]]
    bounds: list[list[list[float] | None]] = field(default_factory=list)
    estimates: list[str | None] = field(default_factory=list)


def _shown(values: np.ndarray) -> list[float | None]:
    """Floats as JSON numbers; NaN (SQL NULL, or no standard error) as None."""
    return [value if value == value else None for value in values.tolist()]


def build_table(
    plan: SqlPlan, totals: Totals, standard_errors: Mapping[int, np.ndarray] | None = None
) -> SqlTable:
    """The rows of a plan from its totals; `standard_errors` by aggregate index, per group
    cell (NaN where there is none)."""
    errors = standard_errors or {}
    # Without GROUP BY there is one row, even over no rows at all (COUNT 0, SUM NULL).
    cells = np.flatnonzero(support(plan, None)) if plan.group else np.zeros(1, dtype=np.int64)
    values: list[list[float | None]] = []
    spreads: list[list[float | None]] = []
    ranges: list[list[tuple[float, float] | None]] = []
    for index, spec in enumerate(plan.aggregates):
        needs_values = spec.attribute is not None and spec.function != "count"
        has_value = (
            support(plan, spec.attribute)
            if needs_values
            else np.ones(group_cells(plan), dtype=bool)
        )
        estimate = aggregate_values(spec, totals, has_value)
        values.append(_shown(estimate[cells]))
        spread = errors.get(index)
        spreads.append(_shown(spread[cells]) if spread is not None else [None] * len(cells))
        ranges.append(_ranges(plan, spec, totals, estimate, cells))
    sizes = [plan.codes[name].size for name in plan.group]
    group_codes = [c.tolist() for c in np.unravel_index(cells, sizes)] if plan.group else []
    rows: list[Row] = []
    for position in range(len(cells)):
        codes = {name: group_codes[k][position] for k, name in enumerate(plan.group)}
        row = Row(
            codes,
            [v[position] for v in values],
            [e[position] for e in spreads],
            [r[position] for r in ranges],
        )
        if plan.having is None or holds(plan.having, codes, row.values) is True:
            rows.append(row)
    sort_code = {
        name: [plan.codes[name].sort_key(c) for c in range(plan.codes[name].size)]
        for name in plan.group
    }
    rows = page(order_rows(rows, plan.order, sort_code), plan.limit, plan.offset)
    labels = {name: plan.codes[name].labels for name in plan.group}
    table_rows: list[list[Cell]] = []
    table_errors: list[list[float | None]] = []
    table_bounds: list[list[list[float] | None]] = []
    for row in rows:
        shown: list[Cell] = []
        shown_errors: list[float | None] = []
        shown_bounds: list[list[float] | None] = []
        for output in plan.outputs:
            if output.group is not None:
                shown.append(labels[output.group][row.codes[output.group]])
                shown_errors.append(None)
                shown_bounds.append(None)
            elif output.aggregate is not None:
                shown.append(row.values[output.aggregate])
                shown_errors.append(row.errors[output.aggregate])
                pair = row.bounds[output.aggregate]
                shown_bounds.append(list(pair) if pair is not None else None)
        table_rows.append(shown)
        table_errors.append(shown_errors)
        table_bounds.append(shown_bounds)
    estimates = [_estimate(plan, output.aggregate) for output in plan.outputs]
    return SqlTable(
        [o.name for o in plan.outputs], table_rows, table_errors, table_bounds, estimates
    )


def _ranges(
    plan: SqlPlan, spec: AggregateSpec, totals: Totals, estimate: np.ndarray, cells: np.ndarray
) -> list[tuple[float, float] | None]:
    """Per shown group cell, the aggregate's [least, greatest], None where it has none."""
    found = None
    if spec.attribute is not None:
        low, high = plan.codes[spec.attribute].intervals
        # Only the groups shown need bounds (a variance's bounds take a search each).
        shown = Totals(
            totals.count[cells],
            {name: table[cells] for name, table in totals.sums.items()},
            {name: table[cells] for name, table in totals.histograms.items()},
            {name: table[cells] for name, table in totals.edges.items()},
        )
        found = aggregate_bounds(spec, shown, estimate[cells], low, high)
    if found is None:
        return [None] * len(cells)
    least, greatest = found
    return [
        (float(a), float(b)) if np.isfinite(a) and np.isfinite(b) else None
        for a, b in zip(least, greatest, strict=True)
    ]


def _estimate(plan: SqlPlan, aggregate: int | None) -> str | None:
    """How an aggregate column's numbers stand for its values (None: not a sum of values)."""
    if aggregate is None:
        return None
    spec = plan.aggregates[aggregate]
    if spec.attribute is None or spec.function not in BOUNDED:
        return None
    return plan.codes[spec.attribute].estimate
