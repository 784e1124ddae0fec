"""sqlglot's SELECT tree → a `Statement`, refusing everything outside the grammar.

The grammar (docs/sql.md): `SELECT` grouped attributes and aggregates (COUNT(*),
COUNT(a), SUM, AVG, VAR/VARIANCE/VAR_SAMP, VAR_POP, STDDEV/STDDEV_SAMP, STDDEV_POP,
MEDIAN, PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY a), MIN, MAX)
with `AS` aliases; `FROM` one table; `WHERE` AND/OR/NOT over per-attribute predicates
(=, <>, IN, NOT IN, <, <=, >, >=, BETWEEN, IS [NOT] NULL, [I]LIKE); `GROUP BY`
attributes (or select-list positions); `HAVING`; `ORDER BY`; `LIMIT`/`OFFSET`.
Every other construct is `UnsupportedSql` naming it and where it starts.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokenizer_core import TokenType

from app.sql.errors import Position, SqlTooComplex, bad_sql, unsupported
from app.sql.keywords import AGGREGATE_CLASSES as _AGGREGATE_CLASSES
from app.sql.keywords import AGGREGATE_NAMES as _AGGREGATE_NAMES
from app.sql.keywords import CLAUSE_NAMES as _CLAUSE_NAMES
from app.sql.keywords import CLAUSES as _CLAUSES
from app.sql.keywords import COMPARISONS as _COMPARISONS
from app.sql.keywords import NOT_ANSWERED as _NOT_ANSWERED
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
    OrderKey,
    SelectItem,
    Statement,
    Table,
    Truth,
)
from app.sql.syntax import MAX_NESTING, ParsedSql

MAX_LIMIT = 10**12


class _Reader:
    def __init__(self, parsed: ParsedSql) -> None:
        self.parsed = parsed

    def where(self, node: exp.Expression | None) -> Position | None:
        return self.parsed.position(node)

    # ---- refusals ---------------------------------------------------------------------

    def refuse(self, node: exp.Expression, context: str) -> Exception:
        """The unsupported construct `node` is, named as a person would."""
        at = self.where(node)
        if isinstance(node, (exp.Subquery, exp.Select, exp.Exists)):
            return unsupported("a subquery", self.parsed.keyword(node, (TokenType.SELECT,)))
        if isinstance(node, exp.Window):
            return unsupported(
                "a window function (OVER)",
                self.parsed.keyword(node, (TokenType.OVER,), after=True),
                "the model answers aggregates per group, not per record",
            )
        if isinstance(node, exp.Distinct):
            return unsupported("DISTINCT", self.parsed.keyword(node, (TokenType.DISTINCT,)))
        if isinstance(node, exp.Filter):
            return unsupported(
                "an aggregate FILTER clause",
                self.parsed.word(node, ("FILTER",), after=True),
                "put the condition in WHERE",
            )
        if isinstance(node, exp.Star):
            return unsupported(
                "SELECT *", at, "records are never returned: select aggregates per group"
            )
        if isinstance(node, (exp.Cast, exp.TryCast)):
            return unsupported("CAST", at)
        if isinstance(node, exp.Case):
            return unsupported("CASE", self.parsed.keyword(node, (TokenType.CASE,)))
        if isinstance(node, (exp.NullSafeEQ, exp.NullSafeNEQ)):
            return unsupported("IS [NOT] DISTINCT FROM", at, "use =, <> or IS [NOT] NULL")
        if isinstance(node, exp.Func):
            name = node.name.upper() if isinstance(node, exp.Anonymous) else node.sql_name()
            why = _NOT_ANSWERED.get(name, "")
            return unsupported(f"the function {name}", at, why)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.DPipe, exp.Neg)):
            return unsupported(
                f"an arithmetic expression in {context}",
                at,
                "each predicate compares one attribute with constants",
            )
        if isinstance(node, (exp.Binary, exp.Unary)):
            return unsupported(f"an expression in {context}", at)
        return unsupported(f"{type(node).__name__} in {context}", at)

    # ---- operands -----------------------------------------------------------------------

    def column(self, node: exp.Column, table: Table | None) -> Column:
        if isinstance(node.this, exp.Star):
            raise self.refuse(node.this, "the select list")
        if node.args.get("db") or node.args.get("catalog"):
            raise unsupported("a schema-qualified column", self.where(node))
        qualifier = node.table
        if qualifier and table is not None:
            allowed = {table.name, table.alias} - {None}
            if qualifier not in allowed and qualifier.lower() not in {
                a.lower() for a in allowed if a
            }:
                raise bad_sql(f"{qualifier!r} is not the table in FROM", self.where(node))
        identifier = node.this
        quoted = (
            bool(identifier.args.get("quoted")) if isinstance(identifier, exp.Identifier) else False
        )
        return Column(node.name, quoted, self.where(node))

    def constant(self, node: exp.Expression) -> Constant | None:
        at = self.where(node)
        if isinstance(node, exp.Literal):
            if node.is_string:
                return Constant(node.this, at)
            text = node.this
            try:
                number: int | float = int(text)
            except ValueError:
                try:
                    number = float(text)
                except ValueError:
                    raise bad_sql(f"{text!r} is not a number", at) from None
            return Constant(number, at)
        if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
            inner = self.constant(node.this)
            if inner is not None and isinstance(inner.value, (int, float)):
                return Constant(-inner.value, at)
        if isinstance(node, exp.Null):
            return Constant(None, at)
        if isinstance(node, exp.Boolean):
            return Constant(bool(node.this), at)
        return None

    def percentile(self, node: exp.WithinGroup, table: Table | None) -> Aggregate:
        """PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY a): p a constant in [0, 1]."""
        at = self.where(node)
        inner = node.this
        if not isinstance(inner, exp.PercentileCont):
            raise self.refuse(inner, "WITHIN GROUP")
        found = self.constant(_unwrap(inner.this)) if inner.this is not None else None
        value = found.value if found is not None else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise bad_sql("PERCENTILE_CONT takes a fraction p from 0 to 1", at)
        order = node.expression
        keys = order.expressions if isinstance(order, exp.Order) else []
        if len(keys) != 1 or not isinstance(keys[0], exp.Ordered):
            raise bad_sql("PERCENTILE_CONT needs WITHIN GROUP (ORDER BY one attribute)", at)
        target = _unwrap(keys[0].this)
        if not isinstance(target, exp.Column):
            raise unsupported(
                "an expression in WITHIN GROUP", self.where(target), "order by one attribute"
            )
        fraction = float(value)
        if keys[0].args.get("desc"):
            fraction = 1.0 - fraction  # the p-th value from the top
        return Aggregate(
            "percentile_cont", self.column(target, table), at, "percentile_cont", fraction
        )

    def aggregate(self, node: exp.Expression, table: Table | None) -> Aggregate | None:
        if isinstance(node, exp.WithinGroup):
            return self.percentile(node, table)
        if isinstance(node, exp.PercentileCont):
            raise bad_sql(
                "PERCENTILE_CONT(p) needs WITHIN GROUP (ORDER BY attribute)", self.where(node)
            )
        function = None
        written = ""
        argument: exp.Expression | None = None
        if type(node) in _AGGREGATE_CLASSES:
            function = _AGGREGATE_CLASSES[type(node)]
            argument = node.this
            written = self.parsed.text_at(node) or function
        elif isinstance(node, exp.Anonymous) and node.name.upper() in _AGGREGATE_NAMES:
            function = _AGGREGATE_NAMES[node.name.upper()]
            written = node.name
            arguments = node.expressions
            if len(arguments) != 1:
                raise bad_sql(f"{node.name.upper()} takes one attribute", self.where(node))
            argument = arguments[0]
        if function is None:
            return None
        at = self.where(node)
        if isinstance(argument, exp.Distinct):
            raise self.refuse(argument, "an aggregate")
        if isinstance(argument, exp.Star):
            if function != "count":
                raise bad_sql(f"{function.upper()}(*) is not an aggregate; name an attribute", at)
            return Aggregate(function, None, at, written)
        argument = _unwrap(argument)
        if isinstance(argument, exp.Column):
            fraction = 0.5 if function == "median" else None
            return Aggregate(function, self.column(argument, table), at, written, fraction)
        if argument is None:
            raise bad_sql(f"{function.upper()} needs an attribute", at)
        raise unsupported(
            f"an expression inside {function.upper()}",
            self.where(argument),
            "aggregate one attribute",
        )

    def operand(self, node: exp.Expression, table: Table | None, context: str) -> Operand:
        node = _unwrap(node)
        if isinstance(node, exp.Column):
            return self.column(node, table)
        found = self.constant(node)
        if found is not None:
            return found
        aggregate = self.aggregate(node, table)
        if aggregate is not None:
            return aggregate
        raise self.refuse(node, context)

    # ---- conditions ---------------------------------------------------------------------

    def condition(
        self, node: exp.Expression, table: Table | None, context: str, depth: int = 1
    ) -> Condition:
        if depth > MAX_NESTING:
            at = self.where(node)
            raise SqlTooComplex(
                f"query: {context} is nested more than {MAX_NESTING} levels deep",
                parameter="query",
                max_nesting=MAX_NESTING,
                **(at.details() if at is not None else {}),
            )
        node = _unwrap(node)
        if isinstance(node, (exp.And, exp.Or)):
            kind = type(node)
            parts: list[exp.Expression] = []
            stack: list[exp.Expression] = [node]
            while stack:
                current = _unwrap(stack.pop())
                if type(current) is kind:
                    stack.append(current.expression)
                    stack.append(current.this)
                else:
                    parts.append(current)
            children = tuple(self.condition(p, table, context, depth + 1) for p in parts)
            return AllOf(children) if kind is exp.And else AnyOf(children)
        if isinstance(node, exp.Not):
            return Not(self.condition(node.this, table, context, depth + 1))
        at = self.where(node)
        if type(node) in _COMPARISONS:
            left = self.operand(node.this, table, context)
            right = self.operand(node.expression, table, context)
            return Compare(left, _COMPARISONS[type(node)], right, at)
        if isinstance(node, exp.In):
            if node.args.get("query") is not None:
                raise self.refuse(node.args["query"], context)
            if node.args.get("unnest") is not None or node.args.get("field") is not None:
                raise unsupported(f"this form of IN in {context}", at)
            values = []
            for value in node.expressions:
                found = self.constant(_unwrap(value))
                if found is None:
                    raise unsupported(
                        f"a non-constant in an IN list in {context}",
                        self.where(value),
                        "list values only",
                    )
                values.append(found)
            return InList(self.operand(node.this, table, context), tuple(values), at)
        if isinstance(node, exp.Between):
            if node.args.get("symmetric"):
                raise unsupported("BETWEEN SYMMETRIC", at)
            return Between(
                self.operand(node.this, table, context),
                self.operand(node.args["low"], table, context),
                self.operand(node.args["high"], table, context),
                at,
            )
        if isinstance(node, exp.Is):
            target = _unwrap(node.expression)
            if not isinstance(target, exp.Null):
                raise unsupported("IS TRUE / IS FALSE", at, "use IS [NOT] NULL or a comparison")
            test: Condition = IsNull(self.operand(node.this, table, context), at)
            return Not(test) if node.args.get("negate") else test
        pattern_node = node
        escape = None
        if isinstance(node, exp.Escape):
            pattern_node = node.this
            escape_constant = self.constant(_unwrap(node.expression))
            if escape_constant is None or not isinstance(escape_constant.value, str):
                raise bad_sql("ESCAPE takes one quoted character", at)
            escape = escape_constant.value
            if len(escape) != 1:
                raise bad_sql("ESCAPE takes one character", at)
        if isinstance(pattern_node, (exp.Like, exp.ILike)):
            like: Condition = Like(
                self.operand(pattern_node.this, table, context),
                self.operand(pattern_node.expression, table, context),
                isinstance(pattern_node, exp.ILike),
                escape,
                self.where(pattern_node),
            )
            return Not(like) if pattern_node.args.get("negate") else like
        if isinstance(node, exp.Boolean):
            return Truth(bool(node.this), at)
        if isinstance(node, exp.Column):
            raise unsupported(
                f"a bare attribute as a condition in {context}", at, "compare it with a value"
            )
        raise self.refuse(node, context)

    # ---- clauses ------------------------------------------------------------------------

    def table(self, select: exp.Select) -> Table:
        source = select.args.get("from_") or select.args.get("from")
        if source is None:
            raise bad_sql("name the dataset in FROM", None)
        node = source.this
        if isinstance(node, exp.Subquery):
            raise self.refuse(node, "FROM")
        if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
            raise unsupported("this kind of FROM source", self.where(node), "name the dataset")
        for key, value in node.args.items():
            if value in (None, [], False) or key in {"this", "alias"}:
                continue
            name = {"db": "a schema-qualified table", "catalog": "a catalog-qualified table"}.get(
                key, f"{key.upper()} on the table"
            )
            raise unsupported(name, self.where(node))
        alias = None
        alias_node = node.args.get("alias")
        if alias_node is not None:
            if alias_node.args.get("columns"):
                raise unsupported("column aliases on the table", self.where(alias_node))
            alias = alias_node.name
        identifier = node.this
        return Table(node.name, bool(identifier.args.get("quoted")), alias, self.where(identifier))

    def item(self, node: exp.Expression, table: Table) -> SelectItem:
        alias = None
        if isinstance(node, exp.Alias):
            alias = node.alias
            node = node.this
        node = _unwrap(node)
        if isinstance(node, exp.Column):
            return SelectItem(self.column(node, table), alias)
        aggregate = self.aggregate(node, table)
        if aggregate is not None:
            return SelectItem(aggregate, alias)
        if isinstance(node, (exp.Literal, exp.Null, exp.Boolean)):
            raise unsupported("a constant in the select list", self.where(node))
        raise self.refuse(node, "the select list")

    def statement(self) -> Statement:
        select = self.parsed.tree
        for key, value in select.args.items():
            if key in _CLAUSES or value in (None, [], False):
                continue
            name, keywords = _CLAUSE_NAMES.get(key, (key.upper(), ()))
            node = value[0] if isinstance(value, list) else value
            anchor = node if isinstance(node, exp.Expression) else select
            position = self.parsed.keyword(anchor, keywords) if keywords else self.where(anchor)
            raise unsupported(name, position)
        table = self.table(select)
        items = tuple(self.item(node, table) for node in select.expressions)
        where_node = select.args.get("where")
        where = self.condition(where_node.this, table, "WHERE") if where_node else None
        having_node = select.args.get("having")
        having = self.condition(having_node.this, table, "HAVING") if having_node else None
        return Statement(
            items=items,
            table=table,
            where=where,
            group_by=self.group_by(select, table),
            having=having,
            order=self.order(select, table),
            limit=self.count_clause(select.args.get("limit"), "LIMIT"),
            offset=self.count_clause(select.args.get("offset"), "OFFSET") or 0,
        )

    def group_by(self, select: exp.Select, table: Table) -> tuple[Column | int, ...]:
        group = select.args.get("group")
        if group is None:
            return ()
        labels = {"rollup": "ROLLUP", "cube": "CUBE", "grouping_sets": "GROUPING SETS"}
        for key, value in group.args.items():
            if key != "expressions" and value not in (None, [], False):
                name = labels.get(key, key.upper())
                raise unsupported(name, self.parsed.word(group, (name.split()[0],), after=True))
        keys: list[Column | int] = []
        for node in group.expressions:
            node = _unwrap(node)
            if isinstance(node, exp.Column):
                keys.append(self.column(node, table))
                continue
            found = self.constant(node)
            if (
                found is not None
                and isinstance(found.value, int)
                and not isinstance(found.value, bool)
            ):
                keys.append(found.value)
                continue
            if isinstance(node, (exp.Rollup, exp.Cube, exp.GroupingSets)):
                name = {exp.Rollup: "ROLLUP", exp.Cube: "CUBE"}.get(type(node), "GROUPING SETS")
                raise unsupported(name, self.parsed.word(node, (name.split()[0],)))
            raise self.refuse(node, "GROUP BY")
        return tuple(keys)

    def order(self, select: exp.Select, table: Table) -> tuple[OrderKey, ...]:
        order = select.args.get("order")
        if order is None:
            return ()
        keys = []
        for ordered in order.expressions:
            if not isinstance(ordered, exp.Ordered):
                raise self.refuse(ordered, "ORDER BY")
            if ordered.args.get("with_fill"):
                raise unsupported("WITH FILL", self.where(ordered))
            node = _unwrap(ordered.this)
            descending = bool(ordered.args.get("desc"))
            nulls_first = bool(ordered.args.get("nulls_first"))
            at = self.where(node)
            target: Column | Aggregate | int
            if isinstance(node, exp.Column):
                target = self.column(node, table)
            else:
                found = self.constant(node)
                aggregate = self.aggregate(node, table)
                if found is not None and type(found.value) is int:
                    target = found.value
                elif aggregate is not None:
                    target = aggregate
                else:
                    raise self.refuse(node, "ORDER BY")
            keys.append(OrderKey(target, descending, nulls_first, at))
        return tuple(keys)

    def count_clause(self, node: exp.Expression | None, name: str) -> int | None:
        if node is None:
            return None
        if isinstance(node, exp.Fetch):
            raise unsupported("FETCH", self.parsed.keyword(node, (TokenType.FETCH,)), "use LIMIT")
        value = node.args.get("expression")
        found = self.constant(_unwrap(value)) if value is not None else None
        if found is None or type(found.value) is not int or not 0 <= found.value <= MAX_LIMIT:
            at = self.where(value) if value is not None else None
            raise bad_sql(f"{name} takes a whole number from 0 to {MAX_LIMIT}", at)
        return found.value


def _unwrap(node: exp.Expression | None) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    if node is None:
        raise bad_sql("an expression is missing", None)
    return node


def read_statement(parsed: ParsedSql) -> Statement:
    """The `Statement` a parsed SELECT says, or the refusal of what is outside the grammar."""
    return _Reader(parsed).statement()
