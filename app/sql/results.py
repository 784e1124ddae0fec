"""A compiled query's rows from the model's totals: aggregates, HAVING, ORDER BY, LIMIT.

`Totals` holds, per group cell (row-major over the GROUP BY attributes), the model's
count and each aggregated attribute's Σ 1, Σ x, Σ x² over the rows where it has a
value. Everything here is arithmetic on those numbers — no inference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from app.pgm.bin_bounds import variance_range, widen

# ---- the parts of a compiled query this module reads --------------------------------

QUANTILE_FUNCTIONS = ("median", "percentile_cont", "min", "max")


@dataclass(frozen=True)
class AggregateSpec:
    """COUNT(*) (attribute None), COUNT(a), SUM(a), AVG(a), VAR_*(a), STDDEV_*(a), and
    the quantiles MEDIAN(a), PERCENTILE_CONT(fraction), MIN(a), MAX(a)."""

    function: str
    attribute: str | None
    fraction: float | None = None  # PERCENTILE_CONT's p (MEDIAN: 0.5)

    @property
    def is_quantile(self) -> bool:
        return self.function in QUANTILE_FUNCTIONS

    @property
    def moments(self) -> tuple[int, ...]:
        """Which sums over the attribute's values it needs: 0 → Σ 1, 1 → Σ x, 2 → Σ x²
        (none for quantiles: they read the counts over the attribute's codes)."""
        if self.attribute is None or self.is_quantile:
            return ()
        return {
            "count": (0,),
            "sum": (1,),
            "avg": (0, 1),
        }.get(self.function, (0, 1, 2))


@dataclass(frozen=True)
class Output:
    """One result column: a grouped attribute or an aggregate."""

    name: str
    group: str | None
    aggregate: int | None


@dataclass(frozen=True)
class AggRef:
    index: int


@dataclass(frozen=True)
class GroupTest:
    """A HAVING predicate on a grouped attribute: true / false on these codes."""

    attribute: str
    true: int
    false: int


@dataclass(frozen=True)
class ValueCompare:
    left: AggRef | float
    op: str
    right: AggRef | float


@dataclass(frozen=True)
class ValueIn:
    operand: AggRef
    values: tuple[float, ...]
    has_null: bool


@dataclass(frozen=True)
class ValueIsNull:
    operand: AggRef


@dataclass(frozen=True)
class HavingNot:
    condition: Having


@dataclass(frozen=True)
class HavingAll:
    conditions: tuple[Having, ...]


@dataclass(frozen=True)
class HavingAny:
    conditions: tuple[Having, ...]


@dataclass(frozen=True)
class HavingConstant:
    value: bool


Having = (
    GroupTest
    | ValueCompare
    | ValueIn
    | ValueIsNull
    | HavingNot
    | HavingAll
    | HavingAny
    | HavingConstant
)


@dataclass(frozen=True)
class SortKey:
    group: str | None
    aggregate: int | None
    descending: bool
    nulls_first: bool


# ---- aggregates ---------------------------------------------------------------------


@dataclass(frozen=True)
class Totals:
    """Per group cell: the count, per aggregated attribute its sums (cells × 3), for
    binned attributes whose VAR/STDDEV is asked, its bin counts (cells × bins), and per
    attribute a quantile reads, its counts over the attribute's codes (cells × codes)."""

    count: np.ndarray
    sums: dict[str, np.ndarray]
    histograms: dict[str, np.ndarray] = field(default_factory=dict)
    # Per binned attribute whose SUM/AVG is asked: Σ low and Σ high (cells × 2); in a
    # bound plan (`SqlPlan.bound_plan`) also Σ min(low, 0) and Σ max(high, 0) (cells × 4).
    edges: dict[str, np.ndarray] = field(default_factory=dict)
    values: dict[str, np.ndarray] = field(default_factory=dict)


def aggregate_values(spec: AggregateSpec, totals: Totals, has_value: np.ndarray) -> np.ndarray:
    """One aggregate over every group cell, NaN where SQL gives NULL.

    `has_value`: the WHERE region holds rows with a value of the attribute in that
    group (else SUM, AVG, … are NULL, as over no rows)."""
    if spec.attribute is None:
        counts: np.ndarray = np.maximum(totals.count, 0.0)
        return counts
    sums = totals.sums[spec.attribute]
    n, s1, s2 = sums[:, 0], sums[:, 1], sums[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        if spec.function == "count":
            present: np.ndarray = np.maximum(n, 0.0)
            return present
        if spec.function == "sum":
            result = s1.copy()
        elif spec.function == "avg":
            result = np.where(n > 0, s1 / n, np.nan)
        elif spec.function in ("var_pop", "stddev_pop"):
            result = np.where(n > 0, np.maximum(s2 / n - (s1 / n) ** 2, 0.0), np.nan)
        else:
            result = np.where(n > 1, np.maximum((s2 - s1 * s1 / n) / (n - 1), 0.0), np.nan)
        if spec.function.startswith("stddev"):
            result = np.sqrt(result)
    result[~has_value] = np.nan
    result[~np.isfinite(result)] = np.nan
    return result


BOUNDED = ("sum", "avg", "var_pop", "var_samp", "stddev_pop", "stddev_samp")


def aggregate_bounds(
    spec: AggregateSpec,
    totals: Totals,
    estimate: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
) -> tuple[np.ndarray, np.ndarray] | None:
    """What the bins' edges allow for one aggregate (`app.pgm.bin_bounds`), per group
    cell: SUM in [Σ n·low, Σ n·high] (the edge sums), AVG that over Σ n, VAR and STDDEV
    between the least and the greatest spread of values kept in their bins (from the
    bin counts). NaN where the estimate is NULL; None for aggregates without bounds. An
    attribute without them (one value per code) has bounds equal to its estimate."""
    if spec.attribute is None or spec.function not in BOUNDED:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        if spec.function in ("sum", "avg"):
            edges = totals.edges.get(spec.attribute)
            if edges is None:
                return estimate.copy(), estimate.copy()
            least, greatest = widen(edges[:, 0], edges[:, 1])
            if spec.function == "avg":
                n = totals.sums[spec.attribute][:, 0]
                least, greatest = least / n, greatest / n
        else:
            histogram = totals.histograms.get(spec.attribute)
            if histogram is None:
                return estimate.copy(), estimate.copy()
            counts = np.maximum(histogram, 0.0)
            n = counts.sum(axis=1)
            least, greatest = variance_range(counts, low, high)
            if spec.function.endswith("_samp"):
                scale = np.where(n > 1, n / (n - 1), np.nan)
                least, greatest = least * scale, greatest * scale
            if spec.function.startswith("stddev"):
                least, greatest = np.sqrt(least), np.sqrt(greatest)
    # The estimate lies inside mathematically; rounding must not say otherwise.
    known = np.isfinite(estimate) & np.isfinite(least) & np.isfinite(greatest)
    least = np.where(known, np.minimum(least, estimate), np.nan)
    greatest = np.where(known, np.maximum(greatest, estimate), np.nan)
    return least, greatest


# ---- HAVING, ORDER BY, LIMIT ----------------------------------------------------------


def _value(operand: AggRef | float, values: Sequence[float | None]) -> float | None:
    return values[operand.index] if isinstance(operand, AggRef) else operand


def _compare(op: str, left: float, right: float) -> bool:
    return {
        "=": left == right,
        "<>": left != right,
        "<": left < right,
        "<=": left <= right,
        ">": left > right,
        ">=": left >= right,
    }[op]


def holds(condition: Having, codes: dict[str, int], values: Sequence[float | None]) -> bool | None:
    """SQL's three-valued truth of a HAVING condition on one result row."""
    if isinstance(condition, GroupTest):
        bit = 1 << codes[condition.attribute]
        return True if condition.true & bit else (False if condition.false & bit else None)
    if isinstance(condition, ValueCompare):
        left, right = _value(condition.left, values), _value(condition.right, values)
        return None if left is None or right is None else _compare(condition.op, left, right)
    if isinstance(condition, ValueIn):
        value = _value(condition.operand, values)
        if value is None:
            return None
        if value in condition.values:
            return True
        return None if condition.has_null else False
    if isinstance(condition, ValueIsNull):
        return _value(condition.operand, values) is None
    if isinstance(condition, HavingNot):
        inner = holds(condition.condition, codes, values)
        return None if inner is None else not inner
    if isinstance(condition, HavingAll):
        results = [holds(c, codes, values) for c in condition.conditions]
        if any(r is False for r in results):
            return False
        return None if any(r is None for r in results) else True
    if isinstance(condition, HavingAny):
        results = [holds(c, codes, values) for c in condition.conditions]
        if any(r is True for r in results):
            return True
        return None if any(r is None for r in results) else False
    return condition.value


@dataclass
class Row:
    """One result row before it is shown: its group codes and aggregate values."""

    codes: dict[str, int]
    values: list[float | None]
    errors: list[float | None]
    bounds: list[tuple[float, float] | None] = field(default_factory=list)


def order_rows(
    rows: list[Row], keys: Sequence[SortKey], sort_code: dict[str, list[str | int]]
) -> list[Row]:
    """ORDER BY: stable sorts from the last key to the first; NULLs placed as asked."""
    ordered = list(rows)
    for key in reversed(keys):

        def value(row: Row, key: SortKey = key) -> str | int | float | None:
            if key.group is not None:
                return sort_code[key.group][row.codes[key.group]]
            return row.values[key.aggregate if key.aggregate is not None else 0]

        present = [r for r in ordered if value(r) is not None]
        absent = [r for r in ordered if value(r) is None]
        present.sort(key=value, reverse=key.descending)  # type: ignore[arg-type]
        ordered = absent + present if key.nulls_first else present + absent
    return ordered


def page(rows: list[Row], limit: int | None, offset: int) -> list[Row]:
    end = None if limit is None else offset + limit
    return rows[offset:end]
