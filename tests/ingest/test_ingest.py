"""Streaming CSV encoder: codes, every refusal, line numbers, privacy of messages, packing."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from conftest import DATA_DIR

from app.ingest import (
    MAX_LINE_CHARS,
    EncodedTable,
    IngestError,
    code_dtype,
    encode_csv,
    pack_column,
    pack_columns,
    unpack_column,
)
from app.ingest.arrow import encode_canonical
from app.schema import DatasetSchema, parse_schema

SCHEMA = parse_schema(
    {
        "attributes": [
            {"name": "sex", "type": "categorical", "values": ["F", "M", "X"]},
            {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
            {"name": "children", "type": "integer", "size": 4},
        ]
    }
)


def encode(data: str | bytes, schema: DatasetSchema = SCHEMA, **kwargs: object) -> EncodedTable:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return encode_csv(io.BytesIO(raw), schema, **kwargs)  # type: ignore[arg-type]


def refused(data: str | bytes, schema: DatasetSchema = SCHEMA, **kwargs: object) -> IngestError:
    with pytest.raises(IngestError) as excinfo:
        encode(data, schema, **kwargs)
    return excinfo.value


def codes(table: EncodedTable) -> dict[str, list[int]]:
    return {name: column.tolist() for name, column in table.columns.items()}


def test_encodes_each_kind_into_schema_order() -> None:
    table = encode("sex,age,children\nF,0,0\nM,17.99,3\nX,18,1\nF,64.5,2\nM,120,0\n")
    assert table.rows == 5
    assert list(table.columns) == ["sex", "age", "children"]
    assert codes(table) == {
        "sex": [0, 1, 2, 0, 1],
        "age": [0, 0, 1, 3, 4],  # half-open bins, the last one closed at 120
        "children": [0, 3, 1, 2, 0],
    }


def test_columns_may_come_in_any_order() -> None:
    table = encode("children,sex,age\n2,M,30\n0,F,5\n")
    assert list(table.columns) == ["sex", "age", "children"]
    assert codes(table) == {"sex": [1, 0], "age": [2, 0], "children": [2, 0]}


def test_codes_use_the_smallest_unsigned_dtype() -> None:
    schema = parse_schema({"small": 256, "medium": 257, "large": 70_000})
    table = encode("small,medium,large\n255,256,69999\n0,0,0\n", schema)
    assert table.columns["small"].dtype == np.uint8
    assert table.columns["medium"].dtype == np.uint16
    assert table.columns["large"].dtype == np.uint32
    assert codes(table) == {"small": [255, 0], "medium": [256, 0], "large": [69999, 0]}
    assert code_dtype(1) == np.uint8 and code_dtype(65536) == np.uint16


def test_bom_whitespace_crlf_blank_lines_and_quoting_are_tolerated() -> None:
    data = b'\xef\xbb\xbf sex , age,children\r\n F ,  20 ,1\r\n\r\n"M","30.0"," 2 "\r\n\r\n'
    table = encode(data)
    assert codes(table) == {"sex": [0, 1], "age": [1, 2], "children": [1, 2]}


def test_integer_cells_accept_integral_float_spellings_only() -> None:
    table = encode("sex,age,children\nF,1,3.0\nF,1,+2\nF,1,1e0\n")
    assert codes(table)["children"] == [3, 2, 1]
    error = refused("sex,age,children\nF,1,2.5\n")
    assert error.code == "value_out_of_schema"
    assert "'2.5' is not an integer" in error.message


def test_numeric_out_of_range_without_clip_is_refused() -> None:
    for cell in ["-0.001", "120.0001", "inf", "nan", ""]:
        error = refused(f"sex,age,children\nF,10,0\nF,{cell},0\n")
        assert error.code == "value_out_of_schema", cell
        assert error.details == {"column": "age", "lines": [3]}


def test_clip_clamps_numeric_and_integer_into_the_end_bins() -> None:
    schema = parse_schema(
        {
            "attributes": [
                {"name": "x", "type": "numeric", "bins": [0, 10, 20], "clip": True},
                {"name": "k", "type": "integer", "size": 3, "clip": True},
            ]
        }
    )
    table = encode("x,k\n-5,-1\n25,7\n-inf,0\ninf,2\n20,1\n", schema)
    assert codes(table) == {"x": [0, 1, 0, 1, 1], "k": [0, 2, 0, 2, 1]}
    # Unparsable and NaN cells have no side to clamp to: always refused.
    for bad_row, column in [("abc,1", "x"), ("nan,1", "x"), ("1,abc", "k"), (",1", "x")]:
        error = refused(f"x,k\n1,1\n{bad_row}\n", schema)
        assert error.code == "value_out_of_schema"
        assert error.details == {"column": column, "lines": [3]}


def test_empty_file() -> None:
    for data in ["", "\ufeff", "\n\n"]:
        error = refused(data)
        assert (error.code, error.status) == ("empty_file", 422)
    error = refused("sex,age,children\n\n")
    assert error.code == "empty_file"
    assert "no data rows" in error.message


def test_bad_header_names_missing_and_duplicate_columns() -> None:
    error = refused("sex,age,age,salary\nF,1,2,3\n")
    assert (error.code, error.status) == ("bad_header", 422)
    assert error.details == {"missing": ["children"], "duplicate": ["age"]}
    assert "missing column(s) 'children'" in error.message
    assert "duplicate column(s) 'age'" in error.message
    assert "salary" not in error.message  # a column the schema does not name is not read
    error = refused("sex,age,sex,children\nF,1,F,2\n")
    assert error.details == {"missing": [], "duplicate": ["sex"]}


@pytest.mark.parametrize("padded", [False, True], ids=["fast path", "exact path"])
def test_columns_the_schema_does_not_name_are_not_read(padded: bool) -> None:
    # An unnamed index column, a repeated column and a column of anything at all: none
    # is read, whatever it holds (here cells no attribute would take, bytes not UTF-8).
    sex = b" F" if padded else b"F"  # a padded cell sends the file down the exact path
    data = (
        b",salary,children,note,age,note,sex\n"
        b'0,1e999,3,"a, b",17.99,\xff,' + sex + b"\n"
        b'1,,0,,120,"x",M\n'
    )
    if not padded:
        canonical = encode_canonical(io.BytesIO(data), SCHEMA, None)
        assert canonical is not None  # the fast path reads such a file itself
    table = encode(data)
    assert table.rows == 2 and list(table.columns) == ["sex", "age", "children"]
    assert codes(table) == {"sex": [0, 1], "age": [0, 4], "children": [3, 0]}


def test_bad_csv_wrong_number_of_fields_names_the_line() -> None:
    error = refused("sex,age,children\nF,1,1\n\nM,2\nF,3,1\n")
    assert (error.code, error.status) == ("bad_csv", 422)
    assert error.details == {"line": 4}
    assert "line 4 has 2 field(s); the header has 3" in error.message


def test_bad_csv_malformed_quoting() -> None:
    error = refused('sex,age,children\nF,1,1\nF,"2"x,1\n')
    assert error.code == "bad_csv"
    assert "line 3" in error.message
    error = refused('sex,age,children\nF,1,1\n"F,2,1\nM,3,1\n')
    assert error.code == "bad_csv"
    assert "unexpected end of data" in error.message
    error = refused('\n"sex"x,age,children\nF,1,1\n')
    assert error.code == "bad_csv"
    assert error.details == {"line": 2} and "(the header)" in error.message


def test_bad_csv_undecodable_bytes_are_located() -> None:
    error = refused(b"sex,age,children\nF,1,1\nF,1,1\nM\xff\xfe,2,1\n")
    assert error.code == "bad_csv"
    assert error.details == {"line": 4, "column": "sex"}
    assert "not valid UTF-8" in error.message
    error = refused(b"sex,a\xffge,children\nF,1,1\n")
    assert error.code == "bad_csv" and "header" in error.message


def test_bad_csv_overlong_line() -> None:
    error = refused("sex,age,children\n" + "F" * (MAX_LINE_CHARS + 10) + ",1,1\n")
    assert error.code == "bad_csv"
    assert "line 2 is longer than" in error.message


def test_too_large_stops_reading_at_the_limit() -> None:
    data = ("sex,age,children\n" + "F,20,1\n" * 10_000).encode()

    class TrackedStream(io.BytesIO):
        bytes_served = 0

        def read(self, size: int | None = -1) -> bytes:
            chunk = super().read(size)
            self.bytes_served += len(chunk)
            return chunk

    stream = TrackedStream(data)
    with pytest.raises(IngestError) as excinfo:
        encode_csv(stream, SCHEMA, max_bytes=1000)
    assert (excinfo.value.code, excinfo.value.status) == ("too_large", 413)
    assert "1000 bytes" in excinfo.value.message
    assert stream.bytes_served == 1001  # never more than one byte past the limit
    assert not stream.closed  # the caller's stream is left open
    assert encode(data, max_bytes=len(data)).rows == 10_000


def test_value_out_of_schema_names_column_and_first_ten_lines() -> None:
    lines = ["sex,age,children"]
    for i in range(40):
        lines.append(f"{'Q' if i % 3 == 0 else 'F'},20,1")
    data = "\n".join(lines) + "\n"
    expected_lines = [i + 2 for i in range(40) if i % 3 == 0][:10]
    for chunk_rows in (1, 4, 2048):  # offending lines are collected across batches too
        error = refused(data, chunk_rows=chunk_rows)
        assert (error.code, error.status) == ("value_out_of_schema", 422)
        assert error.details == {"column": "sex", "lines": expected_lines}
        assert "column 'sex'" in error.message
        assert ", ".join(map(str, expected_lines)) in error.message
        assert "'Q' is not one of the schema's 3 values" in error.message


def test_first_offending_line_decides_the_column() -> None:
    data = "sex,age,children\nF,20,1\nF,20,9\nQ,500,1\nF,20,7\n"
    error = refused(data)
    assert error.details == {"column": "children", "lines": [3, 5]}
    # On the same line the leftmost column in the file wins.
    error = refused("children,age,sex\n1,20,F\n9,500,Q\n")
    assert error.details == {"column": "children", "lines": [3]}


def test_value_error_before_a_structural_error_is_reported_first() -> None:
    error = refused("sex,age,children\nQ,20,1\nF,20\n")
    assert error.code == "value_out_of_schema"
    assert error.details == {"column": "sex", "lines": [2]}
    error = refused("sex,age,children\nF,20\nQ,20,1\n")
    assert error.code == "bad_csv"


def test_line_numbers_count_physical_lines_of_quoted_fields_and_blank_lines() -> None:
    schema = parse_schema(
        {
            "attributes": [
                {"name": "note", "type": "categorical", "values": ["a\nb", "c"]},
                {"name": "k", "type": "integer", "size": 2},
            ]
        }
    )
    data = 'note,k\n"a\nb",1\n\nc,0\n"a\nb",5\nc,1\n'
    # line 2-3: first record, 4 blank, 5: c, 6-7: bad record, 8: c
    error = refused(data, schema, chunk_rows=2)
    assert error.details == {"column": "k", "lines": [6]}
    assert encode('note,k\n"a\nb",1\n\nc,0\n', schema).rows == 2


def test_messages_never_contain_other_cells_of_the_row() -> None:
    schema = parse_schema(
        {
            "attributes": [
                {"name": "name", "type": "categorical", "values": ["alice-secret", "bob-secret"]},
                {"name": "salary", "type": "numeric", "bins": [0, 1_000_000]},
                {"name": "flag", "type": "integer", "size": 2},
            ]
        }
    )
    head = b"name,salary,flag\nalice-secret,123456.789,1\n"
    other_cells = ["alice-secret", "123456.789", "bob-secret", "98765.4321"]
    cases: list[tuple[bytes, str, str | None]] = [  # (tail, expected code, the bad cell)
        (b"bob-secret,98765.4321,7\n", "value_out_of_schema", "7"),
        (b"bob-secret,-98765.4321,1\n", "value_out_of_schema", "-98765.4321"),
        (b"carol-secret,98765.4321,1\n", "value_out_of_schema", "carol-secret"),
        (b"bob-secret,98765.4321\n", "bad_csv", None),
        (b'bob-secret,"98765.4321"x,1\n', "bad_csv", None),
        (b"bob-secret\xff,98765.4321,1\n", "bad_csv", None),
    ]
    for tail, code, bad_cell in cases:
        with pytest.raises(IngestError) as excinfo:
            encode_csv(io.BytesIO(head + tail), schema)
        error = excinfo.value
        assert error.code == code, tail
        text = error.message + json.dumps(error.details)
        if bad_cell is not None:
            assert repr(bad_cell) in text  # the one bad cell may be quoted
        for cell in other_cells:
            if bad_cell is None or cell not in bad_cell:
                assert cell not in text, (tail, text)
    # The quoted bad cell is truncated.
    error = refused("sex,age,children\n" + "z" * 500 + ",1,1\n")
    assert "z" * 39 + "…" in error.message and "z" * 41 not in error.message


def test_adult_first_rows_encode_to_the_csv_integer_codes() -> None:
    csv_path = DATA_DIR / "adult.csv"
    domain_path = DATA_DIR / "adult-domain.json"
    schema = parse_schema(domain_path.read_text())
    with csv_path.open("rb") as handle:
        head = b"".join(handle.readline() for _ in range(2001))
    table = encode_csv(io.BytesIO(head), schema)
    expected = np.loadtxt(io.BytesIO(head), delimiter=",", skiprows=1, dtype=np.int64)
    assert table.rows == 2000 == expected.shape[0]
    header = head.split(b"\n", 1)[0].decode().split(",")
    assert list(table.columns) == list(schema.names)
    for position, name in enumerate(header):
        column = table.columns[name]
        assert column.dtype == np.uint8  # every adult attribute has at most 100 codes
        np.testing.assert_array_equal(column, expected[:, position], err_msg=name)


def test_pack_unpack_round_trips_exactly() -> None:
    rng = np.random.default_rng(7)
    for dtype, high in [
        (np.uint8, 200),
        (np.uint16, 60_000),
        (np.uint32, 2**31),
        (np.int64, 2**40),
    ]:
        column = rng.integers(0, high, size=10_001).astype(dtype)
        blob = pack_column(column)
        restored = unpack_column(blob)
        assert restored.dtype == column.dtype
        np.testing.assert_array_equal(restored, column)
    empty = unpack_column(pack_column(np.zeros(0, dtype=np.uint8)))
    assert empty.dtype == np.uint8 and empty.size == 0
    # Repetitive codes compress well below their raw size.
    assert len(pack_column(np.zeros(100_000, dtype=np.uint8))) < 1_000


def test_unpack_refuses_corrupt_blobs() -> None:
    blob = pack_column(np.arange(10, dtype=np.uint8))
    with pytest.raises(ValueError, match="magic"):
        unpack_column(b"XXXX" + blob[4:])
    with pytest.raises(ValueError, match="too short"):
        unpack_column(blob[:5])
    with pytest.raises(ValueError):
        unpack_column(blob[:-3])
    with pytest.raises(ValueError, match="1-D integer"):
        pack_column(np.zeros((2, 2), dtype=np.uint8))
    with pytest.raises(ValueError, match="1-D integer"):
        pack_column(np.zeros(3, dtype=np.float64))


def test_larger_file_across_many_batches_matches_a_direct_encoding() -> None:
    rng = np.random.default_rng(3)
    n = 5_000
    sex = rng.integers(0, 3, n)
    age = rng.uniform(0, 120, n)
    children = rng.integers(0, 4, n)
    labels = np.array(["F", "M", "X"])
    body = "".join(
        f"{s},{a!r},{c}\n" for s, a, c in zip(labels[sex], age.tolist(), children, strict=True)
    )
    table = encode("sex,age,children\n" + body, chunk_rows=333)
    assert table.rows == n
    np.testing.assert_array_equal(table.columns["sex"], sex)
    np.testing.assert_array_equal(
        table.columns["age"], np.searchsorted([0, 18, 30, 45, 65, 120], age, side="right") - 1
    )
    np.testing.assert_array_equal(table.columns["children"], children)


@pytest.mark.parametrize("memo_capacity", [0, 5, 8192])
def test_memo_of_parsed_cells_never_changes_the_codes(
    monkeypatch: pytest.MonkeyPatch, memo_capacity: int
) -> None:
    from app.ingest.columns import ColumnEncoder

    monkeypatch.setattr(ColumnEncoder, "MEMO_CAPACITY", memo_capacity)
    rng = np.random.default_rng(11)
    n = 3_000
    # Repeated spellings (memo hits), padded and float spellings, and unique values.
    k_cells = rng.choice(["0", "1", " 2 ", "3.0", "+1", "9", "2"], size=n)
    x_values = np.where(rng.random(n) < 0.5, rng.integers(0, 30, n), rng.uniform(-50, 150, n))
    schema = parse_schema(
        {
            "attributes": [
                {"name": "k", "type": "integer", "size": 4, "clip": True},
                {"name": "x", "type": "numeric", "bins": [0, 10, 20, 100], "clip": True},
            ]
        }
    )
    body = "".join(f"{k},{x!r}\n" for k, x in zip(k_cells, x_values.tolist(), strict=True))
    table = encode("k,x\n" + body, schema, chunk_rows=100)
    expected_k = np.array([min(int(float(c)), 3) for c in k_cells])
    expected_x = np.clip(np.searchsorted([0, 10, 20, 100], x_values, side="right") - 1, 0, 2)
    np.testing.assert_array_equal(table.columns["k"], expected_k)
    np.testing.assert_array_equal(table.columns["x"], expected_x)
    # A bad spelling is refused on every line it occurs, remembered or not.
    bad_body = "k,x\n" + "1,5\n7.5,5\n" * 30
    error = refused(bad_body, schema, chunk_rows=4)
    assert error.details == {"column": "k", "lines": [3, 5, 7, 9, 11, 13, 15, 17, 19, 21]}


def test_pack_columns_gives_each_column_its_own_blob_in_order() -> None:
    rng = np.random.default_rng(0)
    columns = [rng.integers(0, size, 5000).astype(np.uint16) for size in (2, 300, 7, 40)]
    columns.append(np.zeros(0, dtype=np.uint8))
    assert pack_columns(columns) == [pack_column(column) for column in columns]
    assert pack_columns([]) == []
