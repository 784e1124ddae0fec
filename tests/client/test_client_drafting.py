"""The client's side of curating, offline: `draft_schema(df)` (pandas missing values,
categoricals, mixed objects, the public-schema warning), DataFrames sent as Parquet,
paths sent as they are, and `None` as the missing value in filters and labels."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from privq_client import SchemaDraftWarning, draft_schema
from privq_client.admin import PARQUET_CONTENT_TYPE, table_file
from privq_client.frames import marginal_frame
from privq_client.queries import count_params, query_where


def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "person": [f"id{i}" for i in range(30)],
            "sex": pd.Categorical(["F", "M", None] * 10),
            "age": [np.nan if i % 7 == 0 else 20.0 + i for i in range(30)],
            "kids": pd.array([None if i % 5 == 0 else i % 4 for i in range(30)], "Int64"),
            "code": [1, "2", 3.0] * 10,  # mixed objects: read as text
        }
    )


def test_draft_schema_for_a_dataframe() -> None:
    with pytest.warns(SchemaDraftWarning) as caught:
        schema = draft_schema(frame(), max_categories=5)
    messages = [str(w.message) for w in caught]
    assert "PUBLIC" in messages[0]
    assert any("column 'person' left out" in m for m in messages)
    by_name = {a["name"]: a for a in schema["attributes"]}
    assert by_name["sex"] == {
        "name": "sex",
        "type": "categorical",
        "values": ["F", "M"],
        "missing": True,
    }
    # 21 to 49 are whole numbers: one code each (at most MAX_INTEGER_CODES of them).
    assert by_name["age"] == {
        "name": "age",
        "type": "integer",
        "min": 21,
        "max": 49,
        "clip": False,
        "missing": True,
    }
    assert by_name["kids"] == {
        "name": "kids",
        "type": "integer",
        "min": 0,
        "max": 3,
        "clip": False,
        "missing": True,
    }
    # "1", "2", "3.0" are all whole numbers: integer codes.
    assert by_name["code"] == {"name": "code", "type": "integer", "min": 1, "max": 3, "clip": False}
    # The notes come back with the schema too.
    assert schema.notes == messages and set(schema.left_out) == {"person"}


def test_exclude_leaves_the_id_out_without_a_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        schema = draft_schema(frame()[["person", "sex"]], exclude=["person"])
    assert [a["name"] for a in schema["attributes"]] == ["sex"]
    assert len(caught) == 1  # only the public-schema warning


def test_a_dataframe_goes_as_parquet_and_a_path_as_it_is(tmp_path: Path) -> None:
    data = frame().set_index("person")
    with table_file(data) as (handle, name, content_type):
        table = pq.read_table(io.BytesIO(handle.read()))
    assert content_type == PARQUET_CONTENT_TYPE and name.endswith(".parquet")
    assert "person" not in table.column_names  # the index is dropped
    assert table.column("age").null_count == 5
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("a\n1\n")
    with table_file(csv_path) as (handle, name, content_type):
        assert (handle.read(), name, content_type) == (b"a\n1\n", "t.csv", "text/csv")
    parquet_path = tmp_path / "t.bin"
    pq.write_table(table, parquet_path)
    with table_file(str(parquet_path)) as (handle, _, content_type):
        assert content_type == PARQUET_CONTENT_TYPE and handle.read(4) == b"PAR1"
    with pytest.raises(TypeError), table_file(io.BytesIO(b"x")):  # type: ignore[arg-type]
        pass


def test_none_is_the_missing_value_in_filters() -> None:
    assert count_params({"smoker": None}) == ["smoker:null"]
    assert count_params({"smoker": [None, "yes"]}) == ["smoker:null,yes"]
    assert query_where({"smoker": [None]}) == {"smoker": [None]}


def test_a_null_label_is_a_missing_value_of_the_categorical() -> None:
    body = {
        "attributes": ["smoker"],
        "values": [["no"], ["yes"], [None]],
        "counts": [5.0, 3.0, 2.0],
        "model_version": 1,
    }
    table = marginal_frame(body)
    assert list(table["smoker"].cat.categories) == ["no", "yes"]
    assert table["smoker"].isna().tolist() == [False, False, True]
    assert table["count"].tolist() == [5.0, 3.0, 2.0]
