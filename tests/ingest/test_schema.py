"""Dataset schema: both API forms, strict validation, labels, midpoints, query codes."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from app.pgm.domain import Domain
from app.schema import (
    MAX_ATTRIBUTE_SIZE,
    MAX_ATTRIBUTES,
    Attribute,
    DatasetSchema,
    SchemaError,
    parse_schema,
)

FULL: dict[str, Any] = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
        {"name": "score", "type": "numeric", "bins": [-1.5, 0, 0.25, 2], "clip": True},
        {"name": "children", "type": "integer", "size": 4},
    ]
}


def test_full_form_parses_in_order_with_kinds_and_sizes() -> None:
    schema = parse_schema(FULL)
    assert schema.names == ("sex", "age", "score", "children")
    assert [a.kind for a in schema.attributes] == ["categorical", "numeric", "numeric", "integer"]
    assert [a.size for a in schema.attributes] == [2, 5, 3, 4]
    assert schema.attribute("score").clip is True
    assert schema.attribute("age").clip is False
    assert schema.attribute("age").bins == (0.0, 18.0, 30.0, 45.0, 65.0, 120.0)
    assert schema.domain() == Domain(("sex", "age", "score", "children"), (2, 5, 3, 4))


def test_size_map_form_means_integer_codes() -> None:
    schema = parse_schema({"age": 85, "sex": 2})
    assert [(a.name, a.kind, a.size, a.clip) for a in schema.attributes] == [
        ("age", "integer", 85, False),
        ("sex", "integer", 2, False),
    ]
    assert schema.domain().to_dict() == {"age": 85, "sex": 2}


def test_json_text_and_bytes_are_accepted() -> None:
    assert parse_schema(json.dumps(FULL)) == parse_schema(FULL)
    assert parse_schema(b'{"a": 3}') == parse_schema({"a": 3})


def test_to_json_is_canonical_and_round_trips() -> None:
    schema = parse_schema(FULL)
    canonical = schema.to_json()
    assert canonical["attributes"][1] == {
        "name": "age",
        "type": "numeric",
        "bins": [0, 18, 30, 45, 65, 120],
        "clip": False,
    }
    assert canonical["attributes"][3] == {
        "name": "children",
        "type": "integer",
        "size": 4,
        "clip": False,
    }
    assert parse_schema(canonical) == schema
    assert parse_schema(json.loads(json.dumps(canonical))).to_json() == canonical
    size_map = parse_schema({"age": 85, "sex": 2})
    assert parse_schema(size_map.to_json()) == size_map


def test_schema_with_an_attribute_called_attributes_is_a_size_map() -> None:
    schema = parse_schema({"attributes": 3, "b": 2})
    assert schema.names == ("attributes", "b")


def _attr(**entry: Any) -> dict[str, Any]:
    return {"attributes": [entry]}


INVALID: list[tuple[object, str]] = [
    ([1, 2], "must be a JSON object"),
    ("{not json", "not valid JSON"),
    ('{"a": 2, "a": 3}', "duplicate key 'a'"),
    (b"\xff", "not valid UTF-8"),
    ({}, "no attributes"),
    ({"attributes": []}, "no attributes"),
    ({"attributes": [], "version": 1}, "unknown schema key(s) 'version'"),
    ({"age": 0}, "size must be at least 1"),
    ({"age": -3}, "size must be at least 1"),
    ({"age": 2.5}, "size must be a positive integer"),
    ({"age": True}, "size must be a positive integer"),
    ({"age": "85"}, "size must be a positive integer"),
    ({"age": MAX_ATTRIBUTE_SIZE + 1}, f"larger than {MAX_ATTRIBUTE_SIZE}"),
    ({f"a{i}": 2 for i in range(MAX_ATTRIBUTES + 1)}, "at most"),
    (
        {
            "attributes": [
                {"name": f"a{i}", "type": "integer", "size": 2} for i in range(MAX_ATTRIBUTES + 1)
            ]
        },
        "at most",
    ),
    ({"": 2}, "must not be empty"),
    ({" age": 2}, "leading or trailing whitespace"),
    ({"a,b": 2}, "contains ','"),
    ({"a:b": 2}, "contains ':'"),
    ({"a\nb": 2}, "unprintable"),
    ({"x" * 200: 2}, "longer than"),
    ({"attributes": ["age"]}, "attribute 0 must be an object"),
    (_attr(type="integer", size=2), "attribute 0 has no name"),
    (_attr(name=3, type="integer", size=2), "name must be a string"),
    (_attr(name="a", type="text", values=["x"]), "type must be one of"),
    (_attr(name="a", values=["x"]), "type must be one of"),
    (_attr(name="a", type="categorical", values=["x"], bins=[0, 1]), "unknown key(s) 'bins'"),
    (_attr(name="a", type="categorical", values=["x"], clip=True), "unknown key(s) 'clip'"),
    (_attr(name="a", type="numeric", bins=[0, 1], colour="red"), "unknown key(s) 'colour'"),
    (_attr(name="a", type="categorical"), "needs 'values'"),
    (_attr(name="a", type="numeric"), "needs 'bins'"),
    (_attr(name="a", type="integer"), "needs 'min' and 'max' (or 'size')"),
    (_attr(name="a", type="categorical", values=[]), "values must not be empty"),
    (_attr(name="a", type="categorical", values="FM"), "values must be a list"),
    (_attr(name="a", type="categorical", values=["F", "M", "F"]), "duplicate value 'F'"),
    (_attr(name="a", type="categorical", values=["F", 1]), "must be a string"),
    (_attr(name="a", type="categorical", values=[" F"]), "leading or trailing whitespace"),
    (_attr(name="a", type="categorical", values=["\udc80"]), "not valid Unicode"),
    (_attr(name="a", type="numeric", bins=[0]), "at least 2 edges"),
    (_attr(name="a", type="numeric", bins=[]), "at least 2 edges"),
    (_attr(name="a", type="numeric", bins=[0, 10, 10]), "strictly increasing"),
    (
        _attr(name="a", type="numeric", bins=[0, 10, 5]),
        "edge 2 (5) is not greater than edge 1 (10)",
    ),
    (_attr(name="a", type="numeric", bins=[0, "10"]), "bin edge 1 must be a number"),
    (_attr(name="a", type="numeric", bins=[0, True]), "bin edge 1 must be a number"),
    (_attr(name="a", type="numeric", bins=[0, 1e400]), "finite"),
    (_attr(name="a", type="numeric", bins=[0, 1], clip="yes"), "clip must be true or false"),
    (_attr(name="a", type="numeric", bins={"lo": 0}), "bins must be a list"),
    (_attr(name="a", type="integer", size=0), "size must be at least 1"),
    (_attr(name="a", type="integer", size=2.0), "size must be a positive integer"),
    (
        {
            "attributes": [
                {"name": "a", "type": "integer", "size": 2},
                {"name": "a", "type": "integer", "size": 3},
            ]
        },
        "duplicate attribute name 'a'",
    ),
]


@pytest.mark.parametrize(("obj", "message"), INVALID, ids=[m for _, m in INVALID])
def test_invalid_schemas_are_refused_with_a_clear_message(obj: object, message: str) -> None:
    with pytest.raises(SchemaError) as excinfo:
        parse_schema(obj)
    assert message in str(excinfo.value)


def test_errors_name_the_attribute() -> None:
    with pytest.raises(SchemaError, match="attribute 'income'"):
        parse_schema(_attr(name="income", type="numeric", bins=[5, 1]))


def test_schema_error_is_a_value_error() -> None:
    assert issubclass(SchemaError, ValueError)


def test_attribute_constructors_validate_too() -> None:
    with pytest.raises(SchemaError, match="duplicate value"):
        Attribute.categorical("a", ["x", "x"])
    with pytest.raises(SchemaError, match="strictly increasing"):
        Attribute.numeric("a", [3, 2])
    with pytest.raises(SchemaError, match="duplicate attribute name"):
        DatasetSchema((Attribute.integer("a", 2), Attribute.integer("a", 3)))


def test_unknown_attribute_lookup() -> None:
    with pytest.raises(SchemaError, match="unknown attribute 'height'"):
        parse_schema(FULL).attribute("height")


def test_labels() -> None:
    schema = parse_schema(FULL)
    assert schema.attribute("sex").labels() == ["F", "M"]
    assert schema.attribute("age").labels() == [
        "[0, 18)",
        "[18, 30)",
        "[30, 45)",
        "[45, 65)",
        "[65, 120]",
    ]
    assert schema.attribute("score").labels() == ["[-1.5, 0)", "[0, 0.25)", "[0.25, 2]"]
    assert schema.attribute("children").labels() == [0, 1, 2, 3]


def test_midpoints() -> None:
    schema = parse_schema(FULL)
    np.testing.assert_array_equal(schema.attribute("age").midpoints(), [9, 24, 37.5, 55, 92.5])
    np.testing.assert_array_equal(schema.attribute("children").midpoints(), [0.0, 1.0, 2.0, 3.0])
    assert schema.attribute("children").midpoints().dtype == np.float64
    with pytest.raises(SchemaError, match="categorical"):
        schema.attribute("sex").midpoints()


def test_encode_labels() -> None:
    schema = parse_schema(
        {
            "attributes": FULL["attributes"]
            + [{"name": "colour", "type": "categorical", "values": ["red", "green", "blue"]}]
        }
    )
    colour = schema.attribute("colour")
    np.testing.assert_array_equal(colour.encode_labels(["blue", "red"]), [0, 2])
    np.testing.assert_array_equal(colour.encode_labels(["green", "green"]), [1])
    assert colour.encode_labels([]).size == 0
    with pytest.raises(SchemaError, match=r"attribute 'colour': unknown value\(s\) 'pink', 'Red'"):
        colour.encode_labels(["red", "pink", "Red"])
    with pytest.raises(SchemaError, match="single string"):
        colour.encode_labels("red")
    age = schema.attribute("age")
    np.testing.assert_array_equal(age.encode_labels(["[65, 120]", "[18,30)"]), [1, 4])
    with pytest.raises(SchemaError, match=r"unknown value\(s\) '\[18, 29\)'"):
        age.encode_labels(["[18, 29)"])
    children = schema.attribute("children")
    np.testing.assert_array_equal(children.encode_labels([3, "1", 2.0]), [1, 2, 3])
    with pytest.raises(SchemaError, match=r"unknown value\(s\) '4', '-1', '1.5', 'True'"):
        children.encode_labels([4, -1, 1.5, True])


def test_codes_in_range_numeric_on_edges() -> None:
    age = parse_schema(FULL).attribute("age")  # bins 0, 18, 30, 45, 65, 120
    np.testing.assert_array_equal(age.codes_in_range(18, 45), [1, 2])
    np.testing.assert_array_equal(age.codes_in_range(ge=30), [2, 3, 4])
    np.testing.assert_array_equal(age.codes_in_range(lt=30), [0, 1])
    np.testing.assert_array_equal(age.codes_in_range(), [0, 1, 2, 3, 4])
    # Bounds outside the edges hold no other data, so they do not cut a bin.
    np.testing.assert_array_equal(age.codes_in_range(-10, 1000), [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(age.codes_in_range(65, 121), [4])
    # The closed last bin holds its top edge: le there is exact, ge there cuts it.
    np.testing.assert_array_equal(age.codes_in_range(30, le=120), [2, 3, 4])
    with pytest.raises(SchemaError, match=r"ge=120 cuts the bin \[65, 120\]; ge: 120 holds"):
        age.codes_in_range(ge=120)
    # Ranges outside the domain select nothing.
    assert age.codes_in_range(ge=500).size == 0
    assert age.codes_in_range(lt=0).size == 0


def test_codes_in_range_refuses_a_bound_that_cuts_a_bin() -> None:
    age = parse_schema(FULL).attribute("age")
    with pytest.raises(SchemaError) as excinfo:
        age.codes_in_range(20, 45)
    message = str(excinfo.value)
    assert "ge=20 cuts the bin [18, 30)" in message and "0, 18, 30, 45, 65, 120" in message
    with pytest.raises(SchemaError, match=r"lt=50 cuts the bin \[45, 65\)"):
        age.codes_in_range(lt=50)
    # The last bin is closed: lt=120 would leave out the value 120 itself.
    with pytest.raises(SchemaError, match=r"lt=120 cuts the bin \[65, 120\]; .* use le: 120"):
        age.codes_in_range(30, 120)
    # le is exact only at the top edge: the value 65 itself lies in [65, 120].
    with pytest.raises(SchemaError, match=r"le=65 cuts the bin \[65, 120\]; le must be"):
        age.codes_in_range(le=65)


def test_codes_in_range_integer_and_categorical_and_bad_bounds() -> None:
    schema = parse_schema(FULL)
    children = schema.attribute("children")
    np.testing.assert_array_equal(children.codes_in_range(1, 3), [1, 2])
    np.testing.assert_array_equal(children.codes_in_range(0.5, 2.5), [1, 2])
    np.testing.assert_array_equal(children.codes_in_range(ge=2), [2, 3])
    with pytest.raises(SchemaError, match="categorical"):
        schema.attribute("sex").codes_in_range(0, 1)
    with pytest.raises(SchemaError, match="empty range"):
        children.codes_in_range(3, 3)
    with pytest.raises(SchemaError, match="must be a number"):
        children.codes_in_range(ge="1")  # type: ignore[arg-type]
    with pytest.raises(SchemaError, match="must be a number"):
        children.codes_in_range(lt=float("nan"))
