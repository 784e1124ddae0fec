"""The grammar's parts as plain values: what `grammar` reads out of sqlglot's tree.

Nothing here knows the dataset: names are as written (`Column.quoted` says whether
case matters), constants as SQL literals (str, int, float, bool, None).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.sql.errors import Position

Value = str | int | float | bool | None

# COUNT(*) and COUNT(a); SUM; AVG; the sample and population variance and deviation;
# quantiles of the model's distribution (MEDIAN, PERCENTILE_CONT, MIN, MAX).
AGGREGATES = (
    "count",
    "sum",
    "avg",
    "var_samp",
    "var_pop",
    "stddev_samp",
    "stddev_pop",
    "median",
    "percentile_cont",
    "min",
    "max",
)
COMPARISONS = ("=", "<>", "<", "<=", ">", ">=")


@dataclass(frozen=True)
class Column:
    name: str
    quoted: bool
    at: Position | None


@dataclass(frozen=True)
class Constant:
    value: Value
    at: Position | None


@dataclass(frozen=True)
class Aggregate:
    """An aggregate over one attribute (`column` None: COUNT(*))."""

    function: str
    column: Column | None
    at: Position | None
    written: str = ""  # the function's name as the query wrote it (STDDEV, VARIANCE, …)
    fraction: float | None = None  # PERCENTILE_CONT's p (MEDIAN: 0.5)

    @property
    def text(self) -> str:
        """The output column's default name: `count(*)`, `stddev(hours)`,
        `percentile_cont(0.9)`."""
        if self.function == "percentile_cont":
            return f"percentile_cont({self.fraction:g})"
        argument = "*" if self.column is None else self.column.name
        return f"{(self.written or self.function).lower()}({argument})"


Operand = Column | Constant | Aggregate


@dataclass(frozen=True)
class Compare:
    left: Operand
    op: str
    right: Operand
    at: Position | None


@dataclass(frozen=True)
class InList:
    operand: Operand
    values: tuple[Constant, ...]
    at: Position | None


@dataclass(frozen=True)
class Between:
    operand: Operand
    low: Operand
    high: Operand
    at: Position | None


@dataclass(frozen=True)
class IsNull:
    operand: Operand
    at: Position | None


@dataclass(frozen=True)
class Like:
    operand: Operand
    pattern: Operand
    case_insensitive: bool
    escape: str | None
    at: Position | None


@dataclass(frozen=True)
class Truth:
    value: bool
    at: Position | None


@dataclass(frozen=True)
class Not:
    condition: Condition


@dataclass(frozen=True)
class AllOf:
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class AnyOf:
    conditions: tuple[Condition, ...]


Condition = Compare | InList | Between | IsNull | Like | Truth | Not | AllOf | AnyOf


@dataclass(frozen=True)
class SelectItem:
    expression: Column | Aggregate
    alias: str | None

    @property
    def name(self) -> str:
        if self.alias is not None:
            return self.alias
        if isinstance(self.expression, Column):
            return self.expression.name
        return self.expression.text


@dataclass(frozen=True)
class OrderKey:
    target: Column | Aggregate | int  # int: a 1-based position in the select list
    descending: bool
    nulls_first: bool
    at: Position | None


@dataclass(frozen=True)
class Table:
    name: str
    quoted: bool
    alias: str | None
    at: Position | None


@dataclass(frozen=True)
class Statement:
    items: tuple[SelectItem, ...]
    table: Table
    where: Condition | None
    group_by: tuple[Column | int, ...]
    having: Condition | None
    order: tuple[OrderKey, ...]
    limit: int | None
    offset: int
