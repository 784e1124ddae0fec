"""Every construct outside the grammar is a 422 naming it and where it is; syntax errors
are `bad_sql` with their position; the text is bounded in length and nesting; a
disjunction past the term cap is `query_too_large`."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sql_fixtures import answer, loaded, random_model

from app.errors import PrivqError
from app.sql import MAX_NESTING, MAX_SQL_CHARACTERS, MAX_TERMS


@pytest.fixture(scope="module")
def model():
    schema, fitted = random_model(seed=3)
    return loaded(schema, fitted)


def refusal(model, text):
    with pytest.raises(Exception) as caught:
        answer(model, text)
    error = caught.value
    return error.code, error.message, error.details


UNSUPPORTED = [
    # (query, the construct named, line, column)
    ("SELECT COUNT(*) FROM people JOIN other ON people.sex = other.sex", "join", 1, 29),
    ("SELECT COUNT(*) FROM people, other", "join", 1, 28),
    ("SELECT DISTINCT sex FROM people", "DISTINCT", 1, 8),
    ("SELECT COUNT(DISTINCT sex) FROM people", "DISTINCT", 1, 14),
    ("SELECT * FROM people", "SELECT *", 1, 8),
    ("SELECT COUNT(*) FROM (SELECT * FROM people) AS t", "subquery", 1, 23),
    ("SELECT COUNT(*) FROM people WHERE sex IN (SELECT sex FROM people)", "subquery", 1, 43),
    ("SELECT sex, COUNT(*) OVER (PARTITION BY sex) FROM people", "window function", 1, 22),
    ("WITH t AS (SELECT 1) SELECT COUNT(*) FROM t", "WITH", 1, 1),
    ("SELECT COUNT(*) FROM people UNION SELECT COUNT(*) FROM people", "UNION", 1, 29),
    ("SELECT MIN(sex) FROM people", "categorical", 1, 8),
    ("SELECT MEDIAN(region) FROM people", "categorical", 1, 8),
    ("SELECT SUM(hours + age) FROM people", "expression inside SUM", 1, 12),
    ("SELECT COUNT(*) FROM people WHERE hours + 1 > 2", "arithmetic", 1, 35),
    ("SELECT COUNT(*) FROM people WHERE hours > age", "two attributes", 1, 35),
    ("SELECT COUNT(*) FROM people WHERE CAST(hours AS INT) = 1", "CAST", 1, 40),
    ("SELECT COUNT(*) FROM people WHERE age LIKE '1%'", "LIKE on the numeric", 1, 35),
    ("SELECT SUM(sex) FROM people", "categorical", 1, 8),
    ("SELECT COUNT(*) FROM people\nGROUP BY ROLLUP (sex)", "ROLLUP", 2, 10),
    ("SELECT SUM(hours) FILTER (WHERE sex = 'F') FROM people", "FILTER", 1, 19),
    ("SELECT COUNT(*) FROM people WHERE sex IS DISTINCT FROM 'F'", "DISTINCT FROM", 1, 35),
    ("SELECT 1 FROM people", "constant", 1, 8),
    ("DELETE FROM people", "DELETE", 1, 1),
    ("SELECT COUNT(*) FROM people; SELECT 1", "second statement", 1, 30),
    ("SELECT COUNT(*) FROM people FOR UPDATE", "FOR UPDATE", 1, 29),
    ("SELECT COUNT(*) FROM people WHERE CASE WHEN sex = 'F' THEN TRUE END", "CASE", 1, 35),
    ("SELECT COUNT(*) FROM people WHERE sex", "bare attribute", 1, 35),
    ("SELECT COUNT(*) FROM public.people", "schema-qualified", 1, 22),
    ("SELECT COUNT(*) FROM people FETCH FIRST 3 ROWS ONLY", "FETCH", 1, 29),
]


@pytest.mark.parametrize(("text", "construct", "line", "column"), UNSUPPORTED)
def test_unsupported_constructs_are_named_with_their_position(model, text, construct, line, column):
    code, message, details = refusal(model, text)
    assert code == "unsupported_sql", message
    assert construct.lower() in message.lower()
    assert construct.lower() in details["construct"].lower()
    assert (details["line"], details["column"]) == (line, column), message
    assert f"line {line}, column {column}" in message


BAD = [
    ("SELECT COUNT(*) FROM", "syntax", 1, None),
    ("SELECT COUNT(*) FROM people WHERE (sex = 'F'", "syntax", 1, None),
    ("SELECT COUNT(*) FROM people WHERE sex = 'F", "never closed", 1, 41),
    ("SELECT COUNT(*) FROM people WHERE sex = 'X'", "unknown value", 1, 41),
    ("SELECT COUNT(*) FROM people WHERE colour = 'red'", "unknown attribute", 1, 35),
    ("SELECT COUNT(*) FROM strangers", "FROM names", 1, 22),
    # a group is a whole bin: HAVING cannot cut one (WHERE can: test_sql_cuts.py)
    (
        "SELECT age, COUNT(*) FROM people GROUP BY age HAVING age < 31",
        "cuts the bin [30, 45)",
        1,
        54,
    ),
    ("SELECT COUNT(*) FROM people WHERE sex = NULL", "IS [NOT] NULL", 1, 35),
    ("SELECT sex, COUNT(*) FROM people", "GROUP BY", 1, 8),
    ("SELECT COUNT(*) FROM people WHERE COUNT(*) > 3", "HAVING", 1, 35),
    ("SELECT COUNT(*) FROM people WHERE sex = 1", "quoted value", 1, 41),
    ("SELECT COUNT(*) FROM people LIMIT -1", "LIMIT", 1, None),
    ("SELECT COUNT(*) FROM people WHERE \"Sex\" = 'F'", "unknown attribute", 1, 35),
]


@pytest.mark.parametrize(("text", "words", "line", "column"), BAD)
def test_bad_sql_names_what_and_where(model, text, words, line, column):
    code, message, details = refusal(model, text)
    assert code == "bad_sql", message
    assert words.lower() in message.lower()
    assert details.get("line") == line, message
    if column is not None:
        assert details["column"] == column, message


def test_length_and_nesting_are_bounded(model):
    long_text = "SELECT COUNT(*) FROM people WHERE " + " OR ".join(["sex = 'F'"] * 2000)
    assert len(long_text) > MAX_SQL_CHARACTERS
    code, message, _ = refusal(model, long_text)
    assert code == "sql_too_complex" and str(MAX_SQL_CHARACTERS) in message
    deep = "SELECT COUNT(*) FROM people WHERE " + "(" * 40 + "sex = 'F'" + ")" * 40
    code, message, details = refusal(model, deep)
    assert code == "sql_too_complex" and str(MAX_NESTING) in message and details["line"] == 1
    nots = "SELECT COUNT(*) FROM people WHERE " + "NOT " * 40 + "sex = 'F'"
    assert refusal(model, nots)[0] == "sql_too_complex"
    ok = "SELECT COUNT(*) FROM people WHERE " + "(" * 10 + "sex = 'F'" + ")" * 10
    assert answer(model, ok)["rows"]


def test_too_many_inclusion_exclusion_terms(model):
    # Nine conjunctions over pairs of attributes, all consistent, so every subset of them
    # intersects: 2⁹ − 1 > MAX_TERMS inclusion–exclusion terms.
    values = ["sex = 'F'", "age < 30", "race = 'asian'", "hours = 1", "region = 'north'"]
    pairs = [(a, b) for i, a in enumerate(values) for b in values[i + 1 :]][:9]
    parts = [f"({a} AND {b})" for a, b in pairs]
    code, message, _ = refusal(model, "SELECT COUNT(*) FROM people WHERE " + " OR ".join(parts))
    assert code == "query_too_large" and str(MAX_TERMS) in message
    # Disjuncts over one attribute merge into one set: one term.
    same = answer(model, "SELECT COUNT(*) FROM people WHERE hours = 1 OR hours = 2 OR hours = 3")
    assert same["terms"] == 1


def test_the_free_answers_limits_apply(model, monkeypatch):
    from app.services.answers import sql as sql_service
    from app.services.answers import sql_answer

    text = "SELECT race, hours, COUNT(*) FROM people WHERE sex = 'F' GROUP BY race, hours"
    with pytest.raises(Exception) as caught:
        sql_answer(model, text, table_names=("people", "ds-1"), max_cells=10)
    assert caught.value.code == "too_many_cells" and caught.value.details["cells"] == 15
    monkeypatch.setattr(sql_service, "MAX_INFERENCE_CELLS", 4)
    with pytest.raises(Exception) as caught:
        sql_answer(model, text, table_names=("people", "ds-1"), max_cells=1000)
    assert caught.value.code == "query_too_large" and caught.value.details["max_cells"] == 4


TOKENS = [
    "SELECT",
    "COUNT(*)",
    "SUM(hours)",
    "AVG(age)",
    "sex",
    "age",
    "hours",
    "region",
    "race",
    "FROM",
    "people",
    "WHERE",
    "GROUP BY",
    "HAVING",
    "ORDER BY",
    "LIMIT",
    "OFFSET",
    "AND",
    "OR",
    "NOT",
    "IN",
    "BETWEEN",
    "IS",
    "NULL",
    "LIKE",
    "=",
    "<>",
    "<",
    ">=",
    "(",
    ")",
    ",",
    "'F'",
    "'north'",
    "'%o%'",
    "1",
    "2.5",
    "-3",
    "30",
    "DESC",
    "NULLS FIRST",
    "AS n",
    "n",
    "*",
    "+",
    ";",
    "JOIN",
    "DISTINCT",
    "OVER",
    "'",
    '"',
    "TRUE",
    "1e999",
]


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.sampled_from(TOKENS), min_size=0, max_size=25))
def test_any_text_is_answered_or_refused_with_a_422(model, words):
    text = " ".join(words)
    try:
        result = answer(model, text)
    except PrivqError as error:
        assert error.status == 422, (text, error)
        return
    for row in result["rows"]:
        assert all(v is None or isinstance(v, (str, int, float)) for v in row)
