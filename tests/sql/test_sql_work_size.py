"""What a SQL answer's work is sized as (whether it runs on the event loop), and the
standard errors a compiled query keeps for its model version."""

from __future__ import annotations

import pytest
from sql_fixtures import NAMES, answer, loaded, random_model

from app.services.answers import sql as sql_answers
from app.services.answers.sql import prepare_text


@pytest.fixture(scope="module")
def world():
    schema, model = random_model(seed=7)
    return (loaded(schema, model, (("sex", "age"), ("race",))),)


def test_answer_cells_count_the_numbers_per_group_as_a_marginal_counts_its_cells(world):
    loaded_model = world[0]
    groups = loaded_model.model.domain.cells(("sex", "age"))
    one = prepare_text(
        loaded_model,
        "SELECT sex, age, COUNT(*) FROM people GROUP BY sex, age",
        table_names=NAMES,
        max_cells=1_000_000,
    )
    two = prepare_text(
        loaded_model,
        "SELECT sex, age, COUNT(*), SUM(hours) FROM people GROUP BY sex, age",
        table_names=NAMES,
        max_cells=1_000_000,
    )
    assert one.size.answer_cells == groups  # the labels are not counted
    assert two.size.answer_cells == 2 * groups


def test_standard_errors_are_computed_once_per_compiled_query(world, monkeypatch):
    loaded_model = world[0]
    text = "SELECT sex, COUNT(*), SUM(age) FROM people GROUP BY sex"
    first = answer(loaded_model, text)
    calls = []
    real = sql_answers.standard_error

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(sql_answers, "standard_error", counted)
    again = answer(loaded_model, text)
    assert calls == []  # kept with the plan of this version and text
    assert again["standard_errors"] == first["standard_errors"]
    assert first["standard_errors"] is not None
