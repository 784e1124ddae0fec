"""Drafts leave id-like columns out and say so (issue 44, audit 3).

Text ids (even when there are few enough of them to be categories), whole-number ids and
ids written as numbers in text are left out, with a warning that names the column and
how many values, never a value. Columns with repeated values, a few whole numbers all
distinct (ages in a small table), and fractional measurements whose values are all
distinct are drafted as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.cli import main
from app.schema.drafting import ID_MIN_NUMBERS, ID_MIN_TEXTS, draft_schema

ROWS = 15  # fewer distinct ids than the default --max-categories (20)
MANY = ID_MIN_NUMBERS + 20


def table() -> pa.Table:
    rows = range(ROWS)
    return pa.table(
        {
            "person": [f"patient-{7000 + i}" for i in rows],
            "sex": ["F" if i % 2 else "M" for i in rows],
            "kids": [i % 4 for i in rows],
            "age": [20 + i for i in rows],  # few whole numbers, all distinct: not an id
            "weight": [50.0 + 1.37 * i for i in rows],
        }
    )


def test_id_like_columns_are_left_out_with_a_note() -> None:
    draft = draft_schema(table())
    assert [a["name"] for a in draft.schema["attributes"]] == ["sex", "kids", "age", "weight"]
    (note,) = [w for w in draft.warnings if "looks like an id" in w]
    assert note.startswith("column 'person' left out")
    assert f"{ROWS} distinct values in {ROWS} rows" in note  # counts, never values
    assert not any("patient-" in w for w in draft.warnings)


def test_many_whole_numbers_all_distinct_are_ids_in_numbers_or_text() -> None:
    many = pa.table(
        {
            "record_no": [100_000 + 37 * i for i in range(MANY)],
            "code_text": [f"{900 + i:05d}" for i in range(MANY)],
            "visits": [i % 7 for i in range(MANY)],
        }
    )
    draft = draft_schema(many)
    assert [a["name"] for a in draft.schema["attributes"]] == ["visits"]
    notes = [w for w in draft.warnings if "looks like an id" in w]
    assert [w.split(" left out")[0] for w in notes] == [
        "column 'record_no'",
        "column 'code_text'",
    ]
    assert not any("100037" in w or "00901" in w for w in draft.warnings)


def test_few_values_or_repeated_values_are_not_ids() -> None:
    few = pa.table({"code": [f"c{i}" for i in range(ID_MIN_TEXTS - 1)]})
    assert [a["name"] for a in draft_schema(few).schema["attributes"]] == ["code"]
    repeated = pa.table({"year": [2000 + i % 12 for i in range(MANY)]})
    (year,) = draft_schema(repeated).schema["attributes"]
    assert year == {"name": "year", "type": "integer", "min": 2000, "max": 2011, "clip": False}


def test_the_cli_draft_of_a_parquet_file_leaves_ids_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "people.parquet"
    pq.write_table(table(), path)
    assert main(["schema", "draft", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "person" not in {a["name"] for a in json.loads(out)["attributes"]}
    assert "column 'person' left out: it looks like an id" in err


def test_the_cli_draft_of_a_csv_keeps_a_small_tables_distinct_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A CSV is read as text: numbers in it are judged as numbers, ids in it as text.
    path = tmp_path / "people.csv"
    lines = ["person,age"] + [f"p{100 + i},{20 + i}" for i in range(ROWS)]
    path.write_text("\n".join(lines) + "\n")
    assert main(["schema", "draft", str(path)]) == 0
    out, err = capsys.readouterr()
    assert [a["name"] for a in json.loads(out)["attributes"]] == ["age"]
    assert "column 'person' left out: it looks like an id" in err
