"""The words of the grammar (`app.sql.grammar`): the clauses a SELECT may have, the
constructs outside it with the keyword that starts each, comparisons, and the
aggregates by sqlglot class or by name."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokenizer_core import TokenType

CLAUSES = {"expressions", "from_", "from", "where", "group", "having", "order", "limit", "offset"}
# Select arguments outside the grammar: the construct's name and its keyword token.
CLAUSE_NAMES: dict[str, tuple[str, tuple[TokenType, ...]]] = {
    "distinct": ("DISTINCT", (TokenType.DISTINCT,)),
    "joins": ("a join", (TokenType.JOIN, TokenType.COMMA)),
    "with_": ("WITH (a common table expression)", (TokenType.WITH,)),
    "with": ("WITH (a common table expression)", (TokenType.WITH,)),
    "windows": ("WINDOW", (TokenType.WINDOW,)),
    "qualify": ("QUALIFY", (TokenType.QUALIFY,)),
    "laterals": ("LATERAL", (TokenType.LATERAL,)),
    "locks": ("FOR UPDATE / FOR SHARE", (TokenType.FOR,)),
    "into": ("SELECT INTO", (TokenType.INTO,)),
    "sample": ("TABLESAMPLE", (TokenType.TABLE_SAMPLE,)),
}
COMPARISONS: dict[type[exp.Expression], str] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}
AGGREGATE_CLASSES: dict[type[exp.Expression], str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Variance: "var_samp",
    exp.VariancePop: "var_pop",
    exp.Stddev: "stddev_samp",
    exp.StddevSamp: "stddev_samp",
    exp.StddevPop: "stddev_pop",
    exp.Median: "median",
    exp.Min: "min",
    exp.Max: "max",
}
AGGREGATE_NAMES = {
    "VAR": "var_samp",
    "VARIANCE": "var_samp",
    "VAR_SAMP": "var_samp",
    "VAR_POP": "var_pop",
    "STDDEV": "stddev_samp",
    "STDDEV_SAMP": "stddev_samp",
    "STDDEV_POP": "stddev_pop",
}
NOT_ANSWERED = {
    "PERCENTILE_DISC": "use PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY a)",
    "MODE": "the model's most common value is GROUP BY a ORDER BY COUNT(*) DESC LIMIT 1",
}
