"""A `Statement` over a dataset's schema → a `SqlPlan`: what the model must answer.

Names are resolved against the schema (exact, or case-insensitively for unquoted
names when that is unambiguous); the WHERE clause becomes a region — a union of boxes
of per-attribute code sets (`regions`) — and its inclusion–exclusion terms; the select
list, HAVING and ORDER BY become references to grouped attributes and aggregates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from app.pgm.domain import Domain
from app.schema import DatasetSchema
from app.sql import regions
from app.sql.errors import bad_sql, unsupported
from app.sql.pieces import Pieces
from app.sql.predicates import AttributeCodes, narrowed
from app.sql.regions import Box, Region
from app.sql.results import (
    QUANTILE_FUNCTIONS,
    AggRef,
    AggregateSpec,
    GroupTest,
    Having,
    HavingAll,
    HavingAny,
    HavingConstant,
    HavingNot,
    Output,
    SortKey,
    ValueCompare,
    ValueIn,
    ValueIsNull,
)
from app.sql.statement import (
    Aggregate,
    AllOf,
    AnyOf,
    Between,
    Column,
    Compare,
    Condition,
    Constant,
    InList,
    IsNull,
    Like,
    Not,
    Operand,
    Statement,
    Truth,
)
from app.sql.where import WhereCompiler

_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NUMERIC_FUNCTIONS = {"sum", "avg", "var_samp", "var_pop", "stddev_samp", "stddev_pop"}


@dataclass(frozen=True)
class SqlPlan:
    """Everything the answer needs: outputs, groups, aggregates, the WHERE region and its
    inclusion–exclusion terms, HAVING, ORDER BY and the page."""

    outputs: tuple[Output, ...]
    group: tuple[str, ...]
    aggregates: tuple[AggregateSpec, ...]
    region: Region
    terms: tuple[tuple[int, Box], ...]
    codes: dict[str, AttributeCodes]
    having: Having | None
    order: tuple[SortKey, ...]
    limit: int | None
    offset: int
    # Binned attributes of WHERE, split at its cut points: the region's masks of these
    # are over pieces (`app.sql.pieces`), each weighing its share of its bin.
    pieces: dict[str, Pieces] = field(default_factory=dict)
    # When WHERE cuts a bin: the regions of bins wholly inside it and of bins partly
    # inside it (lower and upper bounds on every count), each with its terms.
    bounds: tuple[tuple[tuple[int, Box], ...], tuple[tuple[int, Box], ...]] | None = None
    bound_regions: tuple[Region, Region] | None = None
    # A bound plan: its aggregated attributes' sums add Σ min(low, 0) and Σ max(high, 0)
    # (a cut bin's records counted or not) to their edge rows.
    clipped_edges: bool = False
    # What answering keeps with a plan (a plan is kept per model version and text): its
    # `token`, the key of what is kept for it in caches bounded by their bytes.
    cache: dict[str, object] = field(default_factory=dict, compare=False, repr=False)

    @property
    def token(self) -> object:
        """This plan's key in caches outside it: a plan that is gone never matches another."""
        return self.cache.setdefault("token", object())

    @property
    def approximate(self) -> bool:
        """WHERE cuts a bin: counts spread a cut bin's records uniformly within it."""
        return self.bounds is not None

    def bound_plan(self, upper: bool) -> SqlPlan:
        """The plan whose counts are the lower (or upper) bound: bins, not pieces."""
        if self.bounds is None or self.bound_regions is None:
            raise ValueError("an exact plan has no bounds")
        codes = dict(self.codes)
        for name in self.moment_attributes:
            pieces = self.pieces.get(name)
            if pieces is not None:
                kept = 0
                for box in self.region:
                    kept |= dict(box).get(name, pieces.full)
                codes[name] = narrowed(codes[name], pieces, kept)
        return replace(
            self,
            aggregates=tuple(spec for spec in self.aggregates if not spec.is_quantile),
            codes=codes,
            clipped_edges=True,
            region=self.bound_regions[int(upper)],
            terms=self.bounds[int(upper)],
            pieces={},
            bounds=None,
            bound_regions=None,
            having=None,
            cache={},
        )

    @property
    def where_attributes(self) -> tuple[str, ...]:
        return tuple(sorted({name for box in self.region for name, _ in box}))

    @property
    def moment_attributes(self) -> tuple[str, ...]:
        return tuple(
            dict.fromkeys(a.attribute for a in self.aggregates if a.moments and a.attribute)
        )

    @property
    def quantile_attributes(self) -> tuple[str, ...]:
        """Attributes a quantile (MEDIAN, PERCENTILE_CONT, MIN, MAX) is taken of."""
        return tuple(
            dict.fromkeys(a.attribute for a in self.aggregates if a.is_quantile and a.attribute)
        )

    @property
    def mentioned(self) -> tuple[str, ...]:
        """Every attribute the query reads, grouped, filtered or aggregated."""
        names = [
            *self.group,
            *self.where_attributes,
            *self.moment_attributes,
            *self.quantile_attributes,
        ]
        return tuple(dict.fromkeys(names))


def _describe(column: str, rest: str) -> str:
    return f"{column} {rest}"


class _Compiler(WhereCompiler):
    def __init__(
        self, statement: Statement, schema: DatasetSchema, domain: Domain, names: Sequence[str]
    ) -> None:
        super().__init__()
        self.statement = statement
        self.schema = schema
        self.domain = domain
        self.table_names = tuple(names)
        self.aggregates: list[AggregateSpec] = []

    # ---- names -------------------------------------------------------------------------

    def attribute(self, column: Column) -> AttributeCodes:
        names = self.schema.names
        name = column.name
        if name not in names:
            matches = [n for n in names if n.lower() == name.lower()] if not column.quoted else []
            if len(matches) != 1:
                shown = ", ".join(names[:20]) + (" …" if len(names) > 20 else "")
                hint = ' (quote names with capitals or symbols: "hours-per-week")'
                raise bad_sql(f"unknown attribute {name!r}; attributes: {shown}{hint}", column.at)
            name = matches[0]
        if name not in self.codes:
            self.codes[name] = AttributeCodes(
                self.schema.attribute(name), self.domain.size_of(name)
            )
        return self.codes[name]

    def check_table(self) -> None:
        table = self.statement.table
        if table.name in self.table_names:
            return
        if not table.quoted and table.name.lower() in {n.lower() for n in self.table_names}:
            return
        raise bad_sql(
            f"FROM names {table.name!r}; this dataset is {self.table_names[0]!r} "
            f"(or its id {self.table_names[-1]!r})",
            table.at,
        )

    def aggregate(self, aggregate: Aggregate) -> int:
        attribute = None
        if aggregate.column is not None:
            codes = self.attribute(aggregate.column)
            attribute = codes.name
            if aggregate.function in _NUMERIC_FUNCTIONS and codes.kind == "categorical":
                raise unsupported(
                    f"{aggregate.function.upper()} over the categorical attribute {attribute!r}",
                    aggregate.at,
                    "SUM, AVG, VAR and STDDEV need a numeric or integer attribute",
                )
            if aggregate.function in QUANTILE_FUNCTIONS and codes.kind == "categorical":
                raise unsupported(
                    f"{aggregate.function.upper()} over the categorical attribute {attribute!r}",
                    aggregate.at,
                    "quantiles, MIN and MAX need a numeric or integer attribute (its values "
                    "have an order)",
                )
        spec = AggregateSpec(aggregate.function, attribute, aggregate.fraction)
        if spec not in self.aggregates:
            self.aggregates.append(spec)
        return self.aggregates.index(spec)

    # ---- HAVING --------------------------------------------------------------------------

    def _having_value(self, operand: Operand, group: Sequence[str]) -> AggRef | float | str:
        """An aggregate, a number, or (str) the grouped attribute a HAVING operand names."""
        if isinstance(operand, Aggregate):
            return AggRef(self.aggregate(operand))
        if isinstance(operand, Constant):
            if isinstance(operand.value, (int, float)) and not isinstance(operand.value, bool):
                return float(operand.value)
            raise bad_sql("HAVING compares aggregates with numbers", operand.at)
        for item in self.statement.items:
            if item.alias is not None and item.alias == operand.name:
                expression = item.expression
                if isinstance(expression, Aggregate):
                    return AggRef(self.aggregate(expression))
                return self.attribute(expression).name
        name = self.attribute(operand).name
        if name not in group:
            raise bad_sql(f"{name!r} must be in GROUP BY to be used in HAVING", operand.at)
        return name

    def having(self, condition: Condition, group: Sequence[str]) -> Having:
        if isinstance(condition, Not):
            return HavingNot(self.having(condition.condition, group))
        if isinstance(condition, AllOf):
            return HavingAll(tuple(self.having(c, group) for c in condition.conditions))
        if isinstance(condition, AnyOf):
            return HavingAny(tuple(self.having(c, group) for c in condition.conditions))
        if isinstance(condition, Truth):
            return HavingConstant(condition.value)
        operands: list[Operand]
        if isinstance(condition, Compare):
            operands = [condition.left, condition.right]
        elif isinstance(condition, Between):
            operands = [condition.operand, condition.low, condition.high]
        elif isinstance(condition, (InList, IsNull, Like)):
            operands = [condition.operand]
        else:
            raise unsupported(f"{type(condition).__name__} in HAVING", None)
        resolved = [
            None if isinstance(o, Constant) else self._having_value(o, group) for o in operands
        ]
        grouped = [r for r in resolved if isinstance(r, str)]
        if grouped:
            if len(resolved) - resolved.count(None) != 1:
                raise unsupported(
                    "a HAVING predicate mixing a grouped attribute with another operand",
                    getattr(condition, "at", None),
                )
            found = self.leaf(_renamed(condition, grouped[0]), "HAVING")
            codes, (true, false) = found.codes, found.masks
            return GroupTest(codes.name, true, false)
        at = getattr(condition, "at", None)
        values = [
            self._having_value(o, group) if r is None else r
            for o, r in zip(operands, resolved, strict=True)
        ]
        numbers = [v for v in values if not isinstance(v, str)]
        if isinstance(condition, Compare):
            return ValueCompare(numbers[0], condition.op, numbers[1])
        if isinstance(condition, Between):
            return HavingAll(
                (
                    ValueCompare(numbers[0], ">=", numbers[1]),
                    ValueCompare(numbers[0], "<=", numbers[2]),
                )
            )
        if not isinstance(numbers[0], AggRef):
            raise unsupported("a predicate on a constant in HAVING", at)
        if isinstance(condition, IsNull):
            return ValueIsNull(numbers[0])
        if isinstance(condition, InList):
            listed: list[float] = []
            for constant in condition.values:
                if constant.value is None:
                    continue
                if isinstance(constant.value, bool) or not isinstance(constant.value, (int, float)):
                    raise bad_sql("HAVING compares aggregates with numbers", constant.at)
                listed.append(float(constant.value))
            has_null = any(c.value is None for c in condition.values)
            return ValueIn(numbers[0], tuple(listed), has_null)
        raise unsupported("LIKE on an aggregate", at)

    # ---- the whole statement ---------------------------------------------------------

    def group(self) -> tuple[str, ...]:
        items = self.statement.items
        names: list[str] = []
        for key in self.statement.group_by:
            if isinstance(key, int):
                if not 1 <= key <= len(items):
                    raise bad_sql(f"GROUP BY {key}: the select list has {len(items)} items", None)
                expression = items[key - 1].expression
                if not isinstance(expression, Column):
                    raise bad_sql(f"GROUP BY {key} names an aggregate", expression.at)
                column = expression
            else:
                column = key
                aliased = [
                    i.expression
                    for i in items
                    if i.alias == key.name and isinstance(i.expression, Column)
                ]
                if key.name not in self.schema.names and aliased and not self._is_attribute(key):
                    column = aliased[0]
            name = self.attribute(column).name
            if name in names:
                raise bad_sql(f"{name!r} is in GROUP BY twice", column.at)
            names.append(name)
        return tuple(names)

    def _is_attribute(self, column: Column) -> bool:
        lowered = column.name.lower()
        return column.name in self.schema.names or (
            not column.quoted and any(n.lower() == lowered for n in self.schema.names)
        )

    def outputs(self, group: Sequence[str]) -> tuple[Output, ...]:
        outputs = []
        for item in self.statement.items:
            expression = item.expression
            if isinstance(expression, Column):
                name = self.attribute(expression).name
                if name not in group:
                    raise bad_sql(
                        f"{name!r} must be in GROUP BY or inside an aggregate (the model "
                        "answers aggregates, never records)",
                        expression.at,
                    )
                outputs.append(Output(item.name, name, None))
            else:
                outputs.append(Output(item.name, None, self.aggregate(expression)))
        return tuple(outputs)

    def order(self, outputs: Sequence[Output], group: Sequence[str]) -> tuple[SortKey, ...]:
        keys = []
        for key in self.statement.order:
            target = key.target
            chosen: Output | None = None
            if isinstance(target, int):
                if not 1 <= target <= len(outputs):
                    raise bad_sql(
                        f"ORDER BY {target}: the select list has {len(outputs)} items", key.at
                    )
                chosen = outputs[target - 1]
            elif isinstance(target, Aggregate):
                chosen = Output("", None, self.aggregate(target))
            else:
                named = [o for o in outputs if o.name == target.name]
                if named:
                    chosen = named[0]
                else:
                    name = self.attribute(target).name
                    if name not in group:
                        raise bad_sql(f"{name!r} must be in GROUP BY to order by it", target.at)
                    chosen = Output(name, name, None)
            keys.append(SortKey(chosen.group, chosen.aggregate, key.descending, key.nulls_first))
        return tuple(keys)

    def plan(self) -> SqlPlan:
        self.check_table()
        group = self.group()
        outputs = self.outputs(group)
        statement = self.statement
        bounds = bound_regions = None
        if statement.where is None:
            region: Region = regions.EVERYTHING
        else:
            self._register(statement.where)
            region = self.region(statement.where, True)
            if self.cut_any:
                lower = self.region(statement.where, True, "lower")
                upper = self.region(statement.where, True, "upper")
                bound_regions = (lower, upper)
                bounds = (regions.inclusion_exclusion(lower), regions.inclusion_exclusion(upper))
        having = self.having(statement.having, group) if statement.having is not None else None
        order = self.order(outputs, group)
        return SqlPlan(
            outputs=outputs,
            group=group,
            aggregates=tuple(self.aggregates),
            region=region,
            terms=regions.inclusion_exclusion(region),
            codes=dict(self.codes),
            having=having,
            order=order,
            limit=statement.limit,
            offset=statement.offset,
            pieces=dict(self.pieces),
            bounds=bounds,
            bound_regions=bound_regions,
        )


def _renamed(condition: Condition, attribute: str) -> Condition:
    """A HAVING predicate on a grouped attribute named by alias, as one on the attribute."""
    column = Column(attribute, True, None)

    def swap(operand: Operand) -> Operand:
        return operand if isinstance(operand, Constant) else column

    if isinstance(condition, Compare):
        return Compare(swap(condition.left), condition.op, swap(condition.right), condition.at)
    if isinstance(condition, Between):
        return Between(swap(condition.operand), condition.low, condition.high, condition.at)
    if isinstance(condition, InList):
        return InList(swap(condition.operand), condition.values, condition.at)
    if isinstance(condition, IsNull):
        return IsNull(swap(condition.operand), condition.at)
    if isinstance(condition, Like):
        return Like(
            swap(condition.operand),
            condition.pattern,
            condition.case_insensitive,
            condition.escape,
            condition.at,
        )
    return condition


def compile_statement(
    statement: Statement, schema: DatasetSchema, domain: Domain, table_names: Sequence[str]
) -> SqlPlan:
    """The plan of one statement over a dataset whose FROM may say any of `table_names`
    (its name first, then its id)."""
    return _Compiler(statement, schema, domain, table_names).plan()
