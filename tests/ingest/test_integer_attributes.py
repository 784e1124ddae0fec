"""Integer attributes with min, max and a bin width, and the one bin convention: parsing
and its refusals, codes, labels, intervals, values and ranges, and the same codes from
every way a value is read (CSV fast and exact paths, Parquet types, registered sources)."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.ingest import IngestError, encode_csv, encode_parquet
from app.ingest.arrow import encode_canonical
from app.ingest.columns import ColumnEncoder
from app.records.encoding import ColumnCodes
from app.schema import Attribute, DatasetSchema, SchemaError, parse_schema

DAY = Attribute.integer("day", min=1, max=31)
HHMM = Attribute.integer("hhmm", min=0, max=2359, width=100)
# Bins of 7 from -50: [-50, -43), …, the last [48, 49] holds the two integers left.
YEAR = Attribute.integer("year", min=-50, max=49, width=7, clip=True)
WAGE = Attribute.numeric("wage", [0, 1000, 3000, 6000])


def test_the_size_form_is_min_zero_and_width_one() -> None:
    old = parse_schema({"kids": 4}).attribute("kids")
    assert old == Attribute.integer("kids", min=0, max=3)
    assert (old.integer_min, old.integer_max, old.integer_width, old.size) == (0, 3, 1, 4)
    assert old.to_json() == {"name": "kids", "type": "integer", "size": 4, "clip": False}


def test_min_max_width_parse_and_round_trip() -> None:
    schema = DatasetSchema((DAY, HHMM, YEAR))
    assert parse_schema(schema.to_json()) == schema
    assert HHMM.to_json() == {
        "name": "hhmm",
        "type": "integer",
        "min": 0,
        "max": 2359,
        "width": 100,
        "clip": False,
    }
    assert (DAY.size, HHMM.size, YEAR.size) == (31, 24, 15)
    assert not DAY.is_binned and HHMM.is_binned and WAGE.is_binned


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"min": 5, "max": 1}, "min (5) must not be greater than max (1)"),
        ({"min": 1, "max": 5, "width": 0}, "width must be at least 1, got 0"),
        ({"min": 1, "max": 5, "width": -3}, "width must be at least 1"),
        ({"min": 1.5, "max": 5}, "min must be an integer, got the number 1.5"),
        ({"min": 1, "max": "5"}, "max must be an integer, got a string"),
        ({"min": 1, "max": 5, "width": True}, "width must be an integer, got a boolean"),
        ({"min": 1}, "needs 'min' and 'max' (or 'size')"),
        ({"size": 4, "max": 3}, "give either size or min and max, not both"),
        ({"min": 0, "max": 10**7}, "more than 1000000 (use a larger width)"),
        ({"min": -(2**60), "max": 0, "width": 2**50}, "must lie within"),
    ],
)
def test_bad_integer_attributes_are_refused_naming_what_is_wrong(entry, words) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SchemaError) as refused:
        parse_schema({"attributes": [{"name": "d", "type": "integer", **entry}]})
    assert words in str(refused.value) and "attribute 'd'" in str(refused.value)


def test_labels_intervals_and_values_follow_one_convention() -> None:
    assert DAY.labels()[:3] == [1, 2, 3] and DAY.labels()[-1] == 31  # JSON integers
    assert HHMM.labels()[:2] == ["[0, 100)", "[100, 200)"] and HHMM.labels()[-1] == ("[2300, 2359]")
    assert YEAR.labels()[-2:] == ["[41, 48)", "[48, 49]"]
    assert WAGE.labels() == ["[0, 1000)", "[1000, 3000)", "[3000, 6000]"]
    # bin_interval: a numeric bin's edges (closed only at the top), an integer bin's
    # first and last integers.
    assert [WAGE.bin_interval(c) for c in range(3)] == [
        (0, 1000, False),
        (1000, 3000, False),
        (3000, 6000, True),
    ]
    assert HHMM.bin_interval(0) == (0, 99, True) and HHMM.bin_interval(23) == (2300, 2359, True)
    assert DAY.bin_interval(4) == (5, 5, True)
    with pytest.raises(SchemaError, match="no value code 31"):
        DAY.bin_interval(31)
    # Values for moments: the integers, or the mean of a bin's integers.
    assert DAY.midpoints().tolist() == list(range(1, 32))
    assert HHMM.midpoints()[[0, 23]].tolist() == [49.5, 2329.5]
    assert YEAR.midpoints()[-1] == 48.5
    assert WAGE.midpoints().tolist() == [500, 2000, 4500]


def test_labels_encode_back_to_their_codes() -> None:
    assert DAY.encode_labels([1, "31", 5.0]).tolist() == [0, 4, 30]
    assert HHMM.encode_labels(["[100,200)", "[2300, 2359]"]).tolist() == [1, 23]
    for attribute, bad in ((DAY, [0]), (DAY, [32]), (DAY, [2.5]), (HHMM, [150])):
        with pytest.raises(SchemaError, match="unknown value"):
            attribute.encode_labels(bad)


def test_ranges_take_edges_as_edges() -> None:
    # Numeric: inner edges for ge and lt, the top edge for le.
    assert WAGE.codes_in_range(1000, 6000.5).tolist() == [1, 2]
    assert WAGE.codes_in_range(ge=1000, le=6000).tolist() == [1, 2]
    assert WAGE.codes_in_range(le=1e9).tolist() == [0, 1, 2]
    for bounds, words in (
        ({"lt": 6000}, "use le: 6000"),
        ({"ge": 6000}, "ge: 6000 holds only the value 6000"),
        ({"le": 3000}, "le=3000 cuts the bin [3000, 6000]"),
        ({"lt": 5, "le": 9}, "give lt or le, not both"),
        ({"ge": 3000, "le": 2000}, "must be at most le"),
    ):
        with pytest.raises(SchemaError, match=words.replace("[", r"\[")):
            WAGE.codes_in_range(**bounds)
    # Integer values: any bound between two integers cuts nothing.
    assert DAY.codes_in_range(10, 20.5).tolist() == list(range(9, 20))
    assert DAY.codes_in_range(ge=10, le=20).tolist() == list(range(9, 20))
    assert DAY.codes_in_range(ge=31).tolist() == [30]
    # Integer bins: a bin's first integer is an edge, so is its last for le.
    assert HHMM.codes_in_range(lt=1200).tolist() == list(range(12))
    assert HHMM.codes_in_range(le=1199).tolist() == list(range(12))
    assert HHMM.codes_in_range(ge=2300, le=2359).tolist() == [23]
    with pytest.raises(SchemaError, match=r"lt=1230 cuts the bin \[1200, 1300\)"):
        HHMM.codes_in_range(lt=1230)


# -- every path gives the same codes --------------------------------------------------

SCHEMA = DatasetSchema((DAY, HHMM, YEAR, Attribute.integer("n", min=-3, max=3, missing=True)))
DAY_VALUES = [1, 31, 15, 2, 30, 7]
HHMM_VALUES = [0, 99, 100, 2359, 2300, 1230]
YEAR_VALUES = [-99, -50, -43, 48, 49, 300]  # clipped below -50 and above 49
N_VALUES = [-3, 3, None, 0, -1, 2]
EXPECTED = {
    "day": [0, 30, 14, 1, 29, 6],
    "hhmm": [0, 0, 1, 23, 23, 12],
    "year": [0, 0, 1, 14, 14, 14],
    "n": [0, 6, 7, 3, 2, 5],
}


def csv_text(padded: bool) -> bytes:
    lines = ["day,hhmm,year,n"]
    for row in zip(DAY_VALUES, HHMM_VALUES, YEAR_VALUES, N_VALUES, strict=True):
        cells = ["" if v is None else str(v) for v in row]
        if padded:
            cells[0] = f" {float(cells[0])} "  # "3.0" and padding: the exact path
        lines.append(",".join(cells))
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("padded", [False, True], ids=["fast path", "exact path"])
def test_csv_paths_give_the_expected_codes(padded: bool) -> None:
    data = csv_text(padded)
    fast = encode_canonical(io.BytesIO(data), SCHEMA, None)
    assert (fast is None) == padded
    table = encode_csv(io.BytesIO(data), SCHEMA)
    assert {k: v.tolist() for k, v in table.columns.items()} == EXPECTED


@pytest.mark.parametrize(
    "types",
    [
        {"day": pa.int8(), "hhmm": pa.int16(), "year": pa.int64(), "n": pa.int32()},
        {"day": pa.float64(), "hhmm": pa.float32(), "year": pa.float64(), "n": pa.float64()},
        {"day": pa.string(), "hhmm": pa.string(), "year": pa.string(), "n": pa.int8()},
        {"day": pa.uint8(), "hhmm": pa.decimal128(6, 1), "year": pa.int16(), "n": pa.int64()},
    ],
    ids=["integers", "floats", "text", "unsigned and decimal"],
)
def test_parquet_types_and_the_source_encoder_give_the_same_codes(types) -> None:  # type: ignore[no-untyped-def]
    def column(values: list[object], data_type: pa.DataType) -> pa.Array:
        if pa.types.is_string(data_type):
            return pa.array([None if v is None else str(v) for v in values], data_type)
        if pa.types.is_decimal(data_type):
            return pa.array([None if v is None else float(v) for v in values]).cast(data_type)
        return pa.array(values, data_type)

    values = {"day": DAY_VALUES, "hhmm": HHMM_VALUES, "year": YEAR_VALUES, "n": N_VALUES}
    table = pa.table({name: column(values[name], types[name]) for name in values})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    buffer.seek(0)
    rows, codes = encode_parquet(buffer, SCHEMA)
    assert rows == 6 and {k: v.tolist() for k, v in codes.items()} == EXPECTED
    # A registered source's encoder (the local engine's) gives the same codes.
    for attribute in SCHEMA.attributes:
        got = ColumnCodes(attribute).encode(table.column(attribute.name))
        assert got.tolist() == EXPECTED[attribute.name], attribute.name


def test_values_outside_min_max_or_with_a_fraction_are_refused_naming_the_column() -> None:
    schema = DatasetSchema((DAY, HHMM))
    for cell, words in (
        ("32", "'32' is outside the integers 1..31"),
        ("0", "outside"),
        (
            "2.5",
            "'2.5' is not an integer",
        ),
    ):
        with pytest.raises(IngestError) as refused:
            encode_csv(io.BytesIO(f"day,hhmm\n3,100\n{cell},5\n".encode()), schema)
        assert refused.value.details == {"column": "day", "lines": [3]}
        assert words in refused.value.message
    encoder = ColumnEncoder(HHMM)
    assert encoder.explain("2400") == "'2400' is outside the integers 0..2359"


def test_far_out_integers_do_not_wrap_around() -> None:
    encoder = ColumnEncoder(Attribute.integer("x", min=-(2**40), max=2**40, width=2**22))
    values = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, -(2**40), 2**40])
    assert encoder.integer_codes(values).tolist() == [-1, -1, 0, 2**19]


# -- properties ------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    low=st.integers(-1000, 1000),
    span=st.integers(0, 400),
    width=st.integers(1, 50),
    data=st.data(),
)
def test_every_integer_lands_in_the_bin_that_holds_it(low, span, width, data) -> None:  # type: ignore[no-untyped-def]
    attribute = Attribute.integer("x", min=low, max=low + span, width=width)
    values = np.arange(low, low + span + 1, dtype=np.int64)
    codes = ColumnEncoder(attribute).integer_codes(values.copy())
    lows, highs, _ = attribute.intervals()
    # Each value's code is the bin whose integers hold it, each bin holds at most `width`
    # integers, and the bins tile min..max in order.
    assert (lows[codes] <= values).all() and (values <= highs[codes]).all()
    assert (highs - lows + 1 <= width).all() and lows[0] == low and highs[-1] == low + span
    assert (np.diff(codes) >= 0).all() and codes[-1] == attribute.value_size - 1
    # A range whose ends are bin edges selects exactly the codes of the values in it.
    edges = attribute.integer_edges().tolist()
    ge = data.draw(st.sampled_from(edges[:-1]))
    lt = data.draw(st.sampled_from([e for e in edges if e > ge]))
    inside = (values >= ge) & (values < lt)
    assert attribute.codes_in_range(ge, lt).tolist() == np.unique(codes[inside]).tolist()
    assert attribute.codes_in_range(ge, le=lt - 1).tolist() == np.unique(codes[inside]).tolist()
