"""SQL over the model: parse a SELECT, check it against the grammar, compile it to factored
queries (Private-PGM appendix B) and turn their answers into a result table.

Pure: sqlglot, numpy and `app.pgm`/`app.schema` only — no database, no service. The
runner that loads a dataset's latest model and answers is
`app.services.answers.sql`; docs/sql.md describes the grammar for users.

- `syntax.parse` — text → one sqlglot SELECT, within `MAX_SQL_CHARACTERS` and
  `MAX_NESTING`; syntax errors are `bad_sql` with line and column.
- `grammar.read_statement` — the tree → a `Statement`, refusing (`unsupported_sql`,
  with the construct and its position) everything outside the grammar.
- `compile.compile_statement` — names resolved on the schema; WHERE (`where`) → a union
  of boxes of per-attribute code sets (`predicates`, `regions`) → inclusion–exclusion
  terms; a predicate that cuts a bin splits it into pieces (`pieces`), with the bounds'
  regions beside.
- `quantiles` — MEDIAN, PERCENTILE_CONT, MIN, MAX placed within a code's interval.
- `factored.build_queries` — per term, one count query and one moments query per
  aggregated attribute; `factored.totals` adds the signed answers.
- `rows.build_table` — aggregates, HAVING, ORDER BY, LIMIT/OFFSET → columns and rows
  (`build_table_json`: the same, encoded column by column for the HTTP answer).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from cachetools import LRUCache

from app.pgm.domain import Domain
from app.schema import DatasetSchema
from app.sql.compile import SqlPlan, compile_statement
from app.sql.cut_bounds import CutTotals
from app.sql.errors import BadSql, Position, SqlTooComplex, TooManyTerms, UnsupportedSql
from app.sql.factored import TermQuery, build_queries, error_weights, group_cells, totals
from app.sql.grammar import read_statement
from app.sql.regions import MAX_BOXES, MAX_TERMS
from app.sql.rows import SqlTable, build_table, build_table_json
from app.sql.statement import Statement
from app.sql.syntax import MAX_NESTING, MAX_SQL_CHARACTERS, parse

# Checked statements by text: a `Statement` is an immutable value of the text alone, so a
# query asked again (a dashboard's refresh) skips parsing. Refusals are not kept.
_STATEMENTS: LRUCache[str, Statement] = LRUCache(maxsize=1024)
_STATEMENTS_LOCK = threading.Lock()


def read(text: str) -> Statement:
    """Parse and check one SELECT statement (no dataset needed)."""
    with _STATEMENTS_LOCK:
        statement = _STATEMENTS.get(text)
    if statement is None:
        statement = read_statement(parse(text))
        with _STATEMENTS_LOCK:
            _STATEMENTS[text] = statement
    return statement


def compile_sql(
    text: str, schema: DatasetSchema, domain: Domain, table_names: Sequence[str]
) -> tuple[SqlPlan, tuple[TermQuery, ...]]:
    """The plan of a query over a dataset and the factored queries that answer it."""
    plan = compile_statement(read(text), schema, domain, table_names)
    return plan, build_queries(plan, domain)


__all__ = [
    "MAX_BOXES",
    "MAX_NESTING",
    "MAX_SQL_CHARACTERS",
    "MAX_TERMS",
    "BadSql",
    "CutTotals",
    "Position",
    "SqlPlan",
    "SqlTable",
    "SqlTooComplex",
    "Statement",
    "TermQuery",
    "TooManyTerms",
    "UnsupportedSql",
    "build_queries",
    "build_table",
    "build_table_json",
    "compile_sql",
    "compile_statement",
    "error_weights",
    "group_cells",
    "parse",
    "read",
    "read_statement",
    "totals",
]
