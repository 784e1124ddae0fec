"""What SQL over the model refuses, each refusal naming where in the text it is.

- `BadSql` (422 `bad_sql`): the text is not valid SQL, or names an attribute, value or
  table the dataset does not have.
- `UnsupportedSql` (422 `unsupported_sql`): valid SQL outside the grammar the model
  answers (a join, a subquery, a window function, DISTINCT, …).
- `SqlTooComplex` (422 `sql_too_complex`): longer or more deeply nested than allowed.
- `TooManyTerms` (422 `query_too_large`): a disjunction whose inclusion–exclusion would
  need more factored queries than allowed.

Each carries `line` and `column` (1-based) and `offset` (0-based character index) of
the place it names, when there is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.errors import InvalidRequest


@dataclass(frozen=True)
class Position:
    """A place in the query text: 0-based character offset, 1-based line and column."""

    offset: int
    line: int
    column: int

    @classmethod
    def in_text(cls, text: str, offset: int) -> Position:
        offset = max(0, min(offset, len(text)))
        before = text[:offset]
        line = before.count("\n") + 1
        column = offset - (before.rfind("\n") + 1) + 1
        return cls(offset, line, column)

    def describe(self) -> str:
        return f"line {self.line}, column {self.column}"

    def details(self) -> dict[str, Any]:
        return {"line": self.line, "column": self.column, "offset": self.offset}


class BadSql(InvalidRequest, code="bad_sql"):
    """The SQL text is not valid, or names something the dataset does not have."""


class UnsupportedSql(InvalidRequest, code="unsupported_sql"):
    """The SQL is valid but outside what the model answers."""


class SqlTooComplex(InvalidRequest, code="sql_too_complex"):
    """The SQL text is longer or more deeply nested than the server accepts."""


class TooManyTerms(InvalidRequest, code="query_too_large"):
    """The WHERE clause needs more inclusion–exclusion terms than the server answers."""


def bad_sql(message: str, position: Position | None) -> BadSql:
    where = f" at {position.describe()}" if position is not None else ""
    details = position.details() if position is not None else {}
    return BadSql(f"query: {message}{where}", parameter="query", **details)


def unsupported(construct: str, position: Position | None, why: str = "") -> UnsupportedSql:
    where = f" at {position.describe()}" if position is not None else ""
    details = position.details() if position is not None else {}
    reason = f": {why}" if why else ""
    return UnsupportedSql(
        f"query: {construct}{where} is not supported{reason}",
        parameter="query",
        construct=construct,
        **details,
    )
