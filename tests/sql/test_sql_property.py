"""Property: random queries from the grammar over a small random model agree with brute
force over the model's full joint (three-valued logic, NULLs, groups, aggregates)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sql_fixtures import MISSING, Joint, answer, loaded, random_model

from app.limits import COUNT_DECIMALS

# SQL gives counts to thousandths of a record, as GET /marginals does.
TO_THOUSANDTHS = 10.0**-COUNT_DECIMALS

SCHEMA_VALUES = {
    "sex": ["F", "M"],
    "race": ["asian", "black", "white"],
    "region": ["north", "south", "east"],
}
AGE_EDGES = [0, 18, 30, 45, 65, 120]
UNKNOWN = 0.5  # Kleene logic on {0, ½, 1}: AND = min, OR = max, NOT = 1 − x


def _truth(joint: Joint, name: str, holds: np.ndarray) -> np.ndarray:
    """True/false per cell from a per-code truth table; unknown on the null code."""
    values = holds[joint.code(name)].astype(float)
    if name in MISSING:
        values[joint.code(name) == MISSING[name]] = UNKNOWN
    return values


@st.composite
def predicates(draw):
    """(SQL text, function joint → truth in {0, ½, 1} per cell)."""
    kind = draw(st.sampled_from(["cat", "cat_in", "like", "hours", "between", "age", "null"]))
    if kind in ("cat", "cat_in", "like"):
        name = draw(st.sampled_from(sorted(SCHEMA_VALUES)))
        values = SCHEMA_VALUES[name]
        size = len(values) + (1 if name in MISSING else 0)
        if kind == "cat":
            op = draw(st.sampled_from(["=", "<>"]))
            code = draw(st.integers(0, len(values) - 1))
            table = np.array([(c == code) == (op == "=") for c in range(size)])
            return f"{name} {op} '{values[code]}'", lambda j: _truth(j, name, table)
        if kind == "cat_in":
            chosen = draw(st.sets(st.integers(0, len(values) - 1), min_size=1))
            negated = draw(st.booleans())
            table = np.array([(c in chosen) != negated for c in range(size)])
            listed = ", ".join(f"'{values[c]}'" for c in sorted(chosen))
            return f"{name} {'NOT ' if negated else ''}IN ({listed})", lambda j: _truth(
                j, name, table
            )
        letter = draw(st.sampled_from("aehinorstw"))
        table = np.array([c < len(values) and letter in values[c] for c in range(size)])
        return f"{name} LIKE '%{letter}%'", lambda j: _truth(j, name, table)
    if kind == "hours":
        op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
        value = draw(st.integers(-1, 4))
        compare = {
            "=": np.equal,
            "<>": np.not_equal,
            "<": np.less,
            "<=": np.less_equal,
            ">": np.greater,
            ">=": np.greater_equal,
        }[op]
        table = np.array([bool(compare(c, value)) for c in range(5)])
        return f"hours {op} {value}", lambda j: _truth(j, "hours", table)
    if kind == "between":
        low, high = sorted(draw(st.lists(st.integers(0, 3), min_size=2, max_size=2)))
        table = np.array([low <= c <= high for c in range(5)])
        return f"hours BETWEEN {low} AND {high}", lambda j: _truth(j, "hours", table)
    if kind == "age":
        edge = draw(st.integers(1, 4))
        op = draw(st.sampled_from(["<", ">="]))
        table = np.array([(c < edge) == (op == "<") for c in range(5)])
        return f"age {op} {AGE_EDGES[edge]}", lambda j: _truth(j, "age", table)
    name = draw(st.sampled_from(sorted(MISSING)))
    negated = draw(st.booleans())
    size = MISSING[name] + 1
    table = np.array([(c == MISSING[name]) != negated for c in range(size)])
    text = f"{name} IS {'NOT ' if negated else ''}NULL"
    return text, lambda j: table[j.code(name)].astype(float)


def conditions(depth: int = 2):
    leaf = predicates()
    if depth == 0:
        return leaf

    def combine(parts):
        kind, items = parts
        if kind == "not":
            text, truth = items[0]
            return f"NOT ({text})", lambda j: 1.0 - truth(j)
        joiner = " AND " if kind == "and" else " OR "
        reduce = np.minimum if kind == "and" else np.maximum

        def truth(j, items=items, reduce=reduce):
            result = items[0][1](j)
            for _, other in items[1:]:
                result = reduce(result, other(j))
            return result

        return joiner.join(f"({t})" for t, _ in items), truth

    inner = conditions(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(st.just("not"), st.lists(inner, min_size=1, max_size=1)).map(combine),
        st.tuples(st.sampled_from(["and", "or"]), st.lists(inner, min_size=2, max_size=3)).map(
            combine
        ),
    )


@pytest.fixture(scope="module")
def world():
    schema, model = random_model(seed=5, total=500.0)
    return loaded(schema, model), Joint(model)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    condition=conditions(),
    group=st.sampled_from([(), ("sex",), ("race",), ("region",), ("sex", "hours")]),
    aggregate=st.sampled_from(["hours", "age"]),
)
def test_random_queries_agree_with_brute_force(world, condition, group, aggregate):
    loaded_model, joint = world
    text, truth = condition
    selected = ", ".join(group)
    head = f"{selected}, " if group else ""
    query = (
        f"SELECT {head}COUNT(*), SUM({aggregate}), AVG({aggregate}), COUNT({aggregate}), "
        f"VAR_POP({aggregate}) FROM people WHERE {text}"
        + (f" GROUP BY {selected}" if group else "")
    )
    try:
        result = answer(loaded_model, query)
    except Exception as error:  # only the documented cap may refuse a random query
        assert getattr(error, "code", None) == "query_too_large", (query, error)
        return
    where = truth(joint) == 1.0
    # Groups the WHERE clause can hold: those with any cell where it is true.
    expected = {}
    group_codes = [joint.code(name) for name in group]
    keys = set(zip(*[g[where] for g in group_codes], strict=True)) if group else {()}
    for key in keys:
        mask = where.copy()
        for codes, code in zip(group_codes, key, strict=True):
            mask &= codes == code
        expected[key] = mask
    assert len(result["rows"]) == len(expected), query
    for row in result["rows"]:
        labels = row[: len(group)]
        key = tuple(_code_of(name, label) for name, label in zip(group, labels, strict=True))
        mask = expected[key]
        count, total, mean, present, variance = row[len(group) :]
        assert count == pytest.approx(joint.count(mask), abs=TO_THOUSANDTHS), query
        n, s1, s2 = joint.moments(mask, aggregate)
        assert present == pytest.approx(n, abs=TO_THOUSANDTHS), query
        if not mask.any() or not (mask & ~np.isnan(joint.value(aggregate))).any():
            assert total is None and mean is None and variance is None, query
            continue
        assert total == pytest.approx(s1, rel=1e-6, abs=1e-6), query
        assert mean == pytest.approx(s1 / n, rel=1e-6), query
        assert variance == pytest.approx(max(s2 / n - (s1 / n) ** 2, 0.0), rel=1e-5, abs=1e-6)


def _code_of(name, label):
    if label is None:
        return MISSING[name]
    if name == "hours":
        return label
    return SCHEMA_VALUES[name].index(label)


SIZES = {"x": 3, "y": 4, "z": 2}


@st.composite
def boxes(draw):
    box = {}
    for name in draw(st.sets(st.sampled_from(sorted(SIZES)), min_size=1)):
        box[name] = draw(st.integers(1, (1 << SIZES[name]) - 1))
    return box


def _indicator(box) -> np.ndarray:
    grids = np.meshgrid(*[np.arange(SIZES[n]) for n in sorted(SIZES)], indexing="ij")
    inside = np.ones(grids[0].shape, dtype=bool)
    for grid, name in zip(grids, sorted(SIZES), strict=True):
        if name in box:
            inside &= ((box[name] >> grid) & 1).astype(bool)
    return inside


@settings(max_examples=200, deadline=None)
@given(st.lists(boxes(), min_size=1, max_size=6))
def test_inclusion_exclusion_is_the_union_cell_by_cell(drawn):
    from app.sql import regions

    full = {name: (1 << size) - 1 for name, size in SIZES.items()}
    region = regions.union(
        [
            regions.intersection([regions.box_of(n, m, full[n]) for n, m in b.items()], full)
            for b in drawn
        ],
        full,
    )
    union = np.zeros(_indicator({}).shape, dtype=bool)
    for box in drawn:
        union |= _indicator(box)
    # The simplified boxes cover the same cells …
    covered = np.zeros_like(union)
    for box in region:
        covered |= _indicator(dict(box))
    assert np.array_equal(covered, union)
    # … and the signed terms add up to its indicator.
    total = np.zeros(union.shape)
    for coefficient, box in regions.inclusion_exclusion(region):
        total += coefficient * _indicator(dict(box))
    assert np.array_equal(total, union.astype(float))
