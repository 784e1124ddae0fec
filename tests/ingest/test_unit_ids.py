"""Privacy-unit ids compare in one canonical spelling (issue 44, audit 2): trimmed,
Unicode NFC, one form per number — on the CSV's two paths and for every Parquet type
that holds text or bytes, and a person written several ways keeps at most k rows."""

from __future__ import annotations

import io
import unicodedata
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.ingest import PrivacyUnit, encode_upload
from app.ingest.unit_ids import MAX_PLAIN_DIGITS, canonical_ids, canonical_number, canonical_text
from app.schema import parse_schema

SCHEMA = parse_schema({"attributes": [{"name": "tag", "type": "categorical", "values": ["a"]}]})
ONE = PrivacyUnit("person", 1)

# Each group: spellings of one id. Different groups: different ids.
SAME = [
    ["1", "01", "001", "+1", "1.0", "1.00", " 1 ", "1e0", "10e-1", "0.1e1", "1."],
    ["0", "-0", "+0", "000", "0.0", "-0.0", "0e5", ".0"],
    ["-7", "-007", "-7.0", "-0.7e1"],
    ["0.5", ".5", "0.50", "5e-1", "+.5"],
    ["1000", "1e3", "1E3", "1.0e+3", "01000"],
    [unicodedata.normalize("NFD", "José"), unicodedata.normalize("NFC", "José"), " José"],
    ["AB12"],
    ["ab12"],  # case is kept: another id
    ["1,000"],  # not a decimal number: text
    ["0x1F"],
    ["+-1"],
]


def canonical(values: list[str]) -> list[bytes]:
    return canonical_ids(pa.array(values, pa.string())).to_pylist()


def test_spellings_of_one_id_are_one_and_different_ids_stay_apart() -> None:
    forms = [set(canonical(group)) for group in SAME]
    assert all(len(form) == 1 for form in forms), forms
    assert len(set().union(*forms)) == len(SAME)


def test_the_arrow_and_python_forms_agree() -> None:
    spellings = [s for group in SAME for s in group] + ["", "+", "-", ".", "e5", "١٢"]
    assert canonical(spellings) == [canonical_text(s).encode() for s in spellings]


def test_numbers_have_one_bounded_spelling() -> None:
    assert canonical_number("-0.000") == "0"
    assert canonical_number("12.3400") == "12.34"
    assert canonical_number("0.00012") == "0.00012"
    huge = "1" + "0" * (MAX_PLAIN_DIGITS + 1)
    assert (
        canonical([huge, f"1e{MAX_PLAIN_DIGITS + 1}"]) == [f"1e{MAX_PLAIN_DIGITS + 1}".encode()] * 2
    )
    assert len(canonical_number("1e999999999")) < 20  # never written out in full


def test_bytes_are_trimmed_and_read_as_text_when_they_are_utf8() -> None:
    ids = pa.array([b"a ", b"a", b" 01", b"1", b"\xff ", b"\xff"], pa.binary())
    got = canonical_ids(ids).to_pylist()
    assert got[0] == got[1] and got[2] == got[3] == b"1" and got[4] == got[5] == b"\xff"


def test_other_types_are_left_as_they_are() -> None:
    ids = pa.array([1, 2, 3], pa.int64())
    assert canonical_ids(ids) is ids


def csv(ids: list[str]) -> bytes:
    return ("person,tag\n" + "".join(f'"{i}",a\n' for i in ids)).encode()


class OneWay(io.RawIOBase):
    """A stream that cannot seek: the CSV's exact (row by row) path."""

    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self._inner.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def parquet(ids: pa.Array) -> io.BytesIO:
    buffer = io.BytesIO()
    table = pa.table({"person": ids, "tag": pa.array(["a"] * len(ids))})
    pq.write_table(table, buffer)
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize("group", SAME[:6], ids=lambda g: g[0].strip())
def test_one_person_spelled_many_ways_keeps_k_rows_in_a_csv(group: list[str]) -> None:
    data = csv(group)
    assert encode_upload(io.BytesIO(data), SCHEMA, unit=ONE).rows == 1
    exact = io.BufferedReader(OneWay(data))
    assert encode_upload(exact, SCHEMA, unit=ONE).rows == 1  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data_type", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]
)
def test_one_person_spelled_many_ways_keeps_k_rows_in_parquet(data_type: pa.DataType) -> None:
    for group in SAME[:6]:
        values: list[Any] = group
        if pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type):
            values = [v.encode() for v in group]
        encoded = encode_upload(parquet(pa.array(values, data_type)), SCHEMA, unit=ONE)
        assert encoded.rows == 1, group


def test_a_dictionary_column_of_spellings_is_one_person() -> None:
    ids = pa.array(["7", "07", "7.0"]).dictionary_encode()
    assert encode_upload(parquet(ids), SCHEMA, unit=ONE).rows == 1


def test_distinct_ids_keep_their_rows() -> None:
    ids = [group[0] for group in SAME]
    assert encode_upload(io.BytesIO(csv(ids)), SCHEMA, unit=ONE).rows == len(SAME)
    encoded = encode_upload(parquet(pa.array(ids)), SCHEMA, unit=ONE)
    assert encoded.rows == len(SAME)
