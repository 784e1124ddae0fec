"""A WHERE predicate that cuts a bin (`age > 37` with a bin [30, 45)) is answered: the
bin's count spread uniformly within it, with bounds (the bin counted not at all and
whole) and `approximate: true`. Checked against brute force over the model's joint,
spreading each bin over a fine grid of values; predicates on bin edges stay exact."""

from __future__ import annotations

import numpy as np
import pytest
from sql_fixtures import Joint, answer, loaded, random_model

from app.limits import COUNT_DECIMALS

# SQL gives counts to thousandths of a record, as GET /marginals does.
TO_THOUSANDTHS = 10.0**-COUNT_DECIMALS

AGE_EDGES = [0, 18, 30, 45, 65, 120]
STEP = 0.05  # the grid's spacing: cut points at multiples of 0.5 fall between its values


@pytest.fixture(scope="module")
def model():
    schema, fitted = random_model(seed=11)
    return loaded(schema, fitted), Joint(fitted)


def _count(served, where: str) -> tuple[float, list[float], bool]:
    body = answer(served, f"SELECT COUNT(*) FROM people WHERE {where}")
    # per row × column, [low, high]; null as a whole when exact (COUNT(*) alone)
    bounds = None if body["bounds"] is None else body["bounds"][0][0]
    return body["rows"][0][0], bounds, body["approximate"]


def _spread(joint: Joint, holds, weight=lambda x: 1.0) -> float:
    """Σ over the joint's cells of the count × the share of the cell's age bin where
    `holds(x, joint)` is true, x running over a fine grid of each bin (each x weighing
    `weight(x)`: Σ x for a sum)."""
    total = 0.0
    for code in range(5):
        low, high = AGE_EDGES[code], AGE_EDGES[code + 1]
        points = round((high - low) / STEP)
        in_bin = joint.code("age") == code
        share = np.zeros(joint.counts.shape)
        for x in low + STEP * (np.arange(points) + 0.5):
            share += holds(x, joint) * weight(x)
        total += float((joint.counts * in_bin * share / points).sum())
    return total


def test_a_cut_bin_is_spread_and_bounded_by_whole_and_none(model):
    served, joint = model
    estimate, (low, high), approximate = _count(served, "age > 37")
    assert approximate is True
    age = joint.code("age")
    assert low == pytest.approx(joint.count(age >= 3))  # [30, 45) not at all
    assert high == pytest.approx(joint.count(age >= 2))  # [30, 45) whole
    assert estimate == pytest.approx(
        joint.count(age >= 3) + 8 / 15 * joint.count(age == 2), abs=TO_THOUSANDTHS
    )
    assert low <= estimate <= high


def test_predicates_on_edges_stay_exact(model):
    served, joint = model
    age = joint.code("age")
    for where, expected in [
        ("age >= 30", age >= 2),
        ("age < 45", age < 3),
        ("age BETWEEN 18 AND 120", age >= 1),
        ("age >= 30 AND age < 65", (age >= 2) & (age < 4)),
        ("age <= 120", age >= 0),
    ]:
        estimate, bounds, approximate = _count(served, where)
        assert approximate is False, where
        assert estimate == pytest.approx(joint.count(expected)), where
        assert bounds is None


def test_the_closed_last_bin_is_cut_by_its_high_edge(model):
    served, joint = model
    estimate, (low, high), approximate = _count(served, "age < 120")
    assert approximate is True  # 120 itself is in [65, 120]
    age = joint.code("age")
    assert low == pytest.approx(joint.count(age < 4))
    assert high == pytest.approx(joint.count(age >= 0)) == pytest.approx(estimate)


CASES = [
    ("age > 37", lambda x, j: x > 37),
    ("age = 40", lambda x, j: np.zeros(j.counts.shape, bool) | (x == 40)),
    ("age > 37 AND age < 40", lambda x, j: (x > 37) & (x < 40)),
    ("NOT (age BETWEEN 20 AND 50.5)", lambda x, j: ~((x >= 20) & (x <= 50.5))),
    ("age < 25 OR age >= 100", lambda x, j: (x < 25) | (x >= 100)),
    ("age > 37 OR race = 'asian'", lambda x, j: (x > 37) | (j.code("race") == 0)),
    ("age > 37 AND sex = 'F' OR age < 10", lambda x, j: (x > 37) & (j.code("sex") == 0) | (x < 10)),
    ("age IN ('[0, 18)') OR age > 60", lambda x, j: (x < 18) | (x > 60)),
]


@pytest.mark.parametrize(("where", "holds"), CASES, ids=[c[0] for c in CASES])
def test_cut_answers_equal_the_spread_and_lie_within_their_bounds(model, where, holds):
    served, joint = model
    estimate, (low, high), approximate = _count(served, where)
    assert approximate is True
    assert estimate == pytest.approx(_spread(joint, holds), abs=TO_THOUSANDTHS)
    assert low - 1e-9 <= estimate <= high + 1e-9


def test_grouped_cut_answers_and_groups_only_the_bounds_reach(model):
    served, joint = model
    body = answer(served, "SELECT age, COUNT(*) FROM people WHERE age = 40 GROUP BY age")
    # no piece of [30, 45) is the single value 40, but its bounds reach the whole bin
    assert body["rows"] == [["[30, 45)", 0.0]]
    # the grouped attribute's column has none
    assert body["bounds"] == [[None, [0.0, pytest.approx(joint.count(joint.code("age") == 2))]]]
    body = answer(
        served, "SELECT sex, COUNT(*), AVG(hours) FROM people WHERE age > 37 GROUP BY sex"
    )
    for row, (group, count_bounds, mean_bounds) in zip(body["rows"], body["bounds"], strict=True):
        sex = ["F", "M"].index(row[0])
        expected = _spread(joint, lambda x, j, s=sex: (x > 37) & (j.code("sex") == s))
        assert group is None
        assert row[1] == pytest.approx(expected, abs=TO_THOUSANDTHS)
        assert count_bounds[0] <= row[1] <= count_bounds[1]
        assert mean_bounds[0] <= row[2] <= mean_bounds[1]


def test_integer_attributes_are_compared_as_integers(model):
    served, joint = model
    hours = joint.code("hours")
    estimate, bounds, approximate = _count(served, "hours > 1.5")
    assert bounds is None
    assert approximate is False and estimate == pytest.approx(
        joint.count((hours >= 2) & (hours < 4))
    )


def test_the_table_text_says_a_cut_answer_is_approximate(model):
    from app.commands.sql import table_text

    served, _ = model
    cut = table_text(answer(served, "SELECT COUNT(*) FROM people WHERE age > 37"))
    assert "approximate" in cut.splitlines()[-1]
    exact = table_text(answer(served, "SELECT COUNT(*) FROM people WHERE age >= 30"))
    assert "approximate" not in exact


@pytest.mark.parametrize("where", ["age > 37", "age > 37 AND age < 40", "age < 25 OR age >= 100"])
def test_sums_over_a_cut_bin_take_its_pieces_at_their_means(model, where):
    served, joint = model
    holds = dict(CASES)[where]
    body = answer(served, f"SELECT COUNT(*), SUM(age), AVG(age) FROM people WHERE {where}")
    count, total, mean = body["rows"][0]
    expected_total = _spread(joint, holds, weight=lambda x: x)
    assert total == pytest.approx(expected_total, rel=1e-6)
    assert count == pytest.approx(_spread(joint, holds), abs=TO_THOUSANDTHS)
    assert mean == pytest.approx(expected_total / _spread(joint, holds), rel=1e-6)
    grouped = answer(served, f"SELECT age, SUM(age) FROM people WHERE {where} GROUP BY age")
    assert sum(row[1] for row in grouped["rows"]) == pytest.approx(expected_total, rel=1e-6)
