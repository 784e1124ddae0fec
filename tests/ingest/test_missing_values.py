"""Missing values: the schema's `"missing": true` adds one code, the last; CSV cells equal
to a `missing_values` spelling (stripped) take it on both the fast and the exact path;
without the option an empty cell is refused as before."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

from app.ingest import EncodedTable, IngestError, encode_csv
from app.ingest.arrow import encode_canonical
from app.schema import Attribute, SchemaError, parse_schema

SCHEMA_JSON: dict[str, Any] = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M"], "missing": True},
        {
            "name": "income",
            "type": "numeric",
            "bins": [0, 10, 20],
            "missing": True,
            "missing_values": ["", "NA", "-1"],
        },
        {"name": "kids", "type": "integer", "size": 3, "missing": True},
        {"name": "region", "type": "categorical", "values": ["n", "s"]},
    ]
}
SCHEMA = parse_schema(SCHEMA_JSON)


class OneWay(io.RawIOBase):
    """A stream that cannot seek: only the exact path reads it."""

    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self._inner.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def both_ways(data: str) -> list[EncodedTable]:
    fast = encode_csv(io.BytesIO(data.encode()), SCHEMA)
    exact = encode_csv(io.BufferedReader(OneWay(data.encode())), SCHEMA)  # type: ignore[arg-type]
    return [fast, exact]


def codes(table: EncodedTable) -> dict[str, list[int]]:
    return {name: column.tolist() for name, column in table.columns.items()}


def test_the_missing_code_is_one_more_and_last() -> None:
    sex = SCHEMA.attribute("sex")
    assert (sex.size, sex.value_size, sex.missing_code) == (3, 2, 2)
    assert sex.labels() == ["F", "M", None]
    assert sex.missing is True and SCHEMA.attribute("region").missing is False
    assert getattr(SCHEMA.attribute("region"), "missing", False) is False
    income = SCHEMA.attribute("income")
    assert income.labels() == ["[0, 10)", "[10, 20]", None]
    # No midpoint and no range holds the missing code.
    assert income.midpoints().tolist() == [5.0, 15.0]
    assert income.codes_in_range(0, None).tolist() == [0, 1]
    kids = SCHEMA.attribute("kids")
    assert kids.labels() == [0, 1, 2, None]
    assert kids.codes_in_range(None, 100).tolist() == [0, 1, 2]
    assert kids.midpoints().tolist() == [0.0, 1.0, 2.0]
    assert SCHEMA.domain().shape(("sex", "income", "kids", "region")) == (3, 3, 4, 2)
    assert kids.encode_labels([None, 2]).tolist() == [2, 3]
    with pytest.raises(SchemaError, match="unknown value"):
        SCHEMA.attribute("region").encode_labels([None])


def test_schema_round_trips_and_keeps_the_old_form_without_missing() -> None:
    assert parse_schema(SCHEMA.to_json()) == SCHEMA
    assert SCHEMA.to_json()["attributes"][1]["missing_values"] == ["", "NA", "-1"]
    assert "missing_values" not in SCHEMA.to_json()["attributes"][0]
    assert SCHEMA.to_json()["attributes"][3] == SCHEMA_JSON["attributes"][3]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"missing": "yes"}, "missing must be true or false"),
        ({"missing_values": [""]}, 'missing_values needs "missing": true'),
        ({"missing": True, "missing_values": []}, "missing_values must not be empty"),
        ({"missing": True, "missing_values": "NA"}, "missing_values must be a list"),
        ({"missing": True, "missing_values": [" NA"]}, "whitespace"),
        ({"missing": True, "missing_values": ["NA", "NA"]}, "duplicate missing value"),
        ({"missing": True, "missing_values": ["F"]}, "both a value and a missing value"),
        ({"missing": True, "missing_values": [3]}, "must be a string"),
    ],
)
def test_bad_missing_options_are_refused_by_name(entry: dict[str, Any], message: str) -> None:
    attribute = {"name": "sex", "type": "categorical", "values": ["F", "M"], **entry}
    with pytest.raises(SchemaError, match=message) as caught:
        parse_schema({"attributes": [attribute]})
    assert "'sex'" in str(caught.value)


def test_missing_cells_take_the_last_code_on_both_paths() -> None:
    data = "sex,income,kids,region\nF,5,0,n\n,NA,,s\nM,,2,n\n, -1 ,1,s\nM,20,,n\n"
    expected = {
        "sex": [0, 2, 1, 2, 1],
        "income": [0, 2, 2, 2, 1],
        "kids": [0, 3, 2, 1, 3],
        "region": [0, 1, 0, 1, 0],
    }
    for table in both_ways(data):
        assert codes(table) == expected


def test_the_fast_path_takes_canonical_files_with_missing_cells() -> None:
    data = "sex,income,kids,region\nF,5,0,n\n,NA,,s\nM,,2,n\n"
    fast = encode_canonical(io.BytesIO(data.encode()), SCHEMA, None)
    assert fast is not None
    rows, columns = fast
    assert rows == 3 and columns["income"].tolist() == [0, 2, 2]


def test_a_sentinel_number_is_missing_not_a_value() -> None:
    # "-1" is outside the bins; as a missing spelling it is no value at all.
    table = both_ways("sex,income,kids,region\nF,-1,0,n\n")[0]
    assert table.columns["income"].tolist() == [2]


def test_without_the_option_an_empty_cell_is_refused_as_before() -> None:
    data = "sex,income,kids,region\nF,5,0,n\nM,5,1,\n"
    for stream in (io.BytesIO(data.encode()), io.BufferedReader(OneWay(data.encode()))):
        with pytest.raises(IngestError) as caught:
            encode_csv(stream, SCHEMA)  # type: ignore[arg-type]
        assert caught.value.code == "value_out_of_schema"
        assert caught.value.details == {"column": "region", "lines": [3]}
        assert '"missing": true' in caught.value.message


def test_an_unknown_spelling_is_still_refused_with_missing() -> None:
    data = "sex,income,kids,region\nF,n/a,0,n\n"
    with pytest.raises(IngestError) as caught:
        encode_csv(io.BytesIO(data.encode()), SCHEMA)
    assert caught.value.details == {"column": "income", "lines": [2]}


def test_clip_never_moves_a_missing_cell_into_a_bin() -> None:
    schema = parse_schema(
        {"attributes": [{"name": "x", "type": "integer", "size": 2, "clip": True, "missing": True}]}
    )
    table = encode_csv(io.BytesIO(b"x\n5\n\n-3\n"), schema)
    # The empty line is skipped (a one-column file's empty record is an empty line).
    assert table.columns["x"].tolist() == [1, 0]
    table = encode_csv(io.BytesIO(b'x\n5\n""\n-3\n'), schema)
    assert table.columns["x"].tolist() == [1, 2, 0]


def test_builders_take_the_missing_option() -> None:
    attribute = Attribute.numeric("w", [0, 1], missing=True, missing_values=["?"])
    assert attribute.size == 2 and attribute.missing_values == ("?",)
    with pytest.raises(SchemaError, match="not one string"):
        Attribute.integer("w", 2, missing=True, missing_values="?")
    codes_ = np.asarray(attribute.encode_labels([None]))
    assert codes_.tolist() == [1]
