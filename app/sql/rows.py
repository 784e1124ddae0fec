"""`Totals` → the result table: one row per group the WHERE clause can hold, the
aggregates' values (NULL where SQL gives NULL), then HAVING, ORDER BY and the page.

Columns are computed whole (numpy over the group cells); only HAVING and ORDER BY,
when the query has them, look at rows one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from app.sql.compile import SqlPlan
from app.sql.factored import group_cells, support
from app.sql.results import Row, Totals, aggregate_values, holds, order_rows, page

Cell = str | int | float | None


@dataclass(frozen=True)
class SqlTable:
    """Column names, rows of values, and per value its standard error (None: none)."""

    columns: list[str]
    rows: list[list[Cell]]
    errors: list[list[float | None]]


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


def build_table(
    plan: SqlPlan, totals: Totals, standard_errors: Mapping[int, np.ndarray] | None = None
) -> SqlTable:
    """The rows of a plan from its totals; `standard_errors` by aggregate index, per group
    cell (NaN where there is none)."""
    errors = standard_errors or {}
    # Without GROUP BY there is one row, even over no rows at all (COUNT 0, SUM NULL).
    cells = np.flatnonzero(support(plan, None)) if plan.group else np.zeros(1, dtype=np.int64)
    values: list[np.ndarray] = []
    spreads: list[np.ndarray | None] = []
    for index, spec in enumerate(plan.aggregates):
        needs_values = spec.attribute is not None and spec.function != "count"
        has_value = (
            support(plan, spec.attribute)
            if needs_values
            else np.ones(group_cells(plan), dtype=bool)
        )
        values.append(aggregate_values(spec, totals, has_value)[cells])
        spread = errors.get(index)
        spreads.append(spread[cells] if spread is not None else None)
    sizes = [plan.codes[name].size for name in plan.group]
    group_codes = list(np.unravel_index(cells, sizes)) if plan.group else []
    kept = _kept_positions(plan, group_codes, values, spreads)
    columns: list[list[Cell]] = []
    error_columns: list[list[float | None]] = []
    nothing: list[float | None] = [None] * len(kept)
    for output in plan.outputs:
        if output.group is not None:
            labels = plan.codes[output.group].labels
            codes = group_codes[plan.group.index(output.group)][kept]
            columns.append([labels[c] for c in codes.tolist()])
            error_columns.append(nothing)
        elif output.aggregate is not None:
            columns.append(list(_shown(values[output.aggregate][kept])))
            spread = spreads[output.aggregate]
            error_columns.append(_shown(spread[kept]) if spread is not None else nothing)
    return SqlTable(
        [o.name for o in plan.outputs],
        [list(row) for row in zip(*columns, strict=True)] if columns else [[] for _ in kept],
        [list(row) for row in zip(*error_columns, strict=True)]
        if error_columns
        else [[] for _ in kept],
    )
