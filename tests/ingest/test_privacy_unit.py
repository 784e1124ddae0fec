"""The privacy unit at upload: the field checked, at most k rows kept per unit (a uniformly
random k of them, from os.urandom), the ids never in a message; CSV (both paths) and
Parquet alike."""

from __future__ import annotations

import io
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.ingest import MAX_UNIT_ROWS, IngestError, PrivacyUnit, encode_upload, parse_privacy_unit
from app.ingest import units as units_module
from app.ingest.units import UnitIds, keep_at_most
from app.schema import parse_schema

# `tag` names the unit's own letter, so the stored codes show how many rows each kept.
SCHEMA = parse_schema(
    {
        "attributes": [
            {"name": "tag", "type": "categorical", "values": list("abcdefghij")},
            {"name": "x", "type": "integer", "size": 5, "missing": True},
        ]
    }
)
# Unit i (ids spelled like no value of the table) has i + 1 rows.
IDS = [f"secret-id-{i:03d}" for i in range(10)]


def rows_per_unit() -> list[tuple[str, str, int]]:
    rows = []
    for i, unit_id in enumerate(IDS):
        rows.extend((unit_id, "abcdefghij"[i], j % 5) for j in range(i + 1))
    return rows


def csv_text(rows: list[tuple[str, str, int]]) -> bytes:
    return ("x,person,tag\n" + "".join(f"{x},{p},{t}\n" for p, t, x in rows)).encode()


def parquet(rows: list[tuple[str, str, int]]) -> io.BytesIO:
    buffer = io.BytesIO()
    table = pa.table(
        {
            "person": pa.array([p for p, _, _ in rows]),
            "tag": pa.array([t for _, t, _ in rows]),
            "x": pa.array([x for _, _, x in rows], pa.int16()),
        }
    )
    pq.write_table(table, buffer, row_group_size=7)
    buffer.seek(0)
    return buffer


class OneWay(io.RawIOBase):
    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self._inner.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def streams() -> dict[str, Any]:
    rows = rows_per_unit()
    return {
        "csv-fast": io.BytesIO(csv_text(rows)),
        "csv-exact": io.BufferedReader(OneWay(csv_text(rows))),
        "parquet": parquet(rows),
    }


@pytest.mark.parametrize("source", ["csv-fast", "csv-exact", "parquet"])
@pytest.mark.parametrize("k", [1, 3, 10])
def test_no_unit_keeps_more_than_k_rows(source: str, k: int) -> None:
    table = encode_upload(streams()[source], SCHEMA, unit=PrivacyUnit("person", k))
    per_unit = np.bincount(table.columns["tag"], minlength=10)
    assert per_unit.tolist() == [min(i + 1, k) for i in range(10)]
    assert table.rows == sum(min(i + 1, k) for i in range(10))
    assert set(table.columns) == {"tag", "x"}  # the ids are not kept


def test_padded_ids_are_the_same_unit() -> None:
    data = b"person,tag,x\n7,a,1\n 7 ,a,2\n7 ,a,3\n"
    table = encode_upload(io.BytesIO(data), SCHEMA, unit=PrivacyUnit("person", 1))
    assert table.rows == 1
    table = encode_upload(io.BufferedReader(OneWay(data)), SCHEMA, unit=PrivacyUnit("person", 1))  # type: ignore[arg-type]
    assert table.rows == 1


# Every character Python's str.strip() removes, but the line ends (CSV quoting keeps them
# out of the way only inside quotes, and a padded id is rarely quoted).
WHITESPACE = [chr(i) for i in range(0x3001) if chr(i).isspace() and chr(i) not in "\r\n"]


@pytest.mark.parametrize("quoted", [False, True])
def test_ids_padded_with_any_whitespace_are_one_unit_on_every_path(quoted: bool) -> None:
    """The fast CSV path (Arrow's trim), the exact one (str.strip) and Parquet agree."""
    spelled = [f"{c}7{c}" for c in WHITESPACE] + ["7"]
    cell = '"{}"' if quoted else "{}"
    data = ("person,tag,x\n" + "".join(f"{cell.format(p)},a,1\n" for p in spelled)).encode()
    assert len(WHITESPACE) > 20
    unit = PrivacyUnit("person", 1)
    for stream in (io.BytesIO(data), io.BufferedReader(OneWay(data))):
        assert encode_upload(stream, SCHEMA, unit=unit).rows == 1  # type: ignore[arg-type]
    rows = [(p, "a", 1) for p in spelled]
    assert encode_upload(parquet(rows), SCHEMA, unit=unit).rows == 1


def test_kept_rows_are_a_uniform_choice() -> None:
    # One unit of 5 rows, k = 2: each row is kept with probability 2/5, each pair 1/10.
    groups = np.zeros(5, dtype=np.int64)
    pairs: Counter[tuple[int, ...]] = Counter()
    trials = 4000
    for _ in range(trials):
        keep = keep_at_most(groups, 2)
        assert keep is not None and keep.sum() == 2
        pairs[tuple(np.flatnonzero(keep).tolist())] += 1
    assert len(pairs) == 10
    # Each pair expects 400 (sd ≈ 19): far outside 300..500 would be a biased choice.
    assert all(300 < count < 500 for count in pairs.values()), pairs


def test_keys_come_from_the_operating_system(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def urandom(n: int) -> bytes:
        asked.append(n)
        return bytes(n)

    monkeypatch.setattr(units_module.os, "urandom", urandom)
    keep = keep_at_most(np.array([0, 0, 0, 1]), 1)
    assert asked == [32] and keep is not None and keep.sum() == 2
    # Nothing to drop: no randomness asked for.
    assert keep_at_most(np.array([0, 1, 2]), 1) is None and asked == [32]


def test_unit_ids_index_across_batches() -> None:
    ids = UnitIds()
    ids.add_texts(("a", "b"))
    ids.add_texts(("b", "c", "a"))
    assert ids.groups().tolist() == [0, 1, 1, 2, 0]


@pytest.mark.parametrize(
    ("field", "words"),
    [
        ("not json", "privacy_unit must be JSON"),
        ("[1]", "must be a JSON object"),
        ('{"column": "person", "max_rows": 2, "k": 1}', "unknown key(s) 'k'"),
        ('{"max_rows": 2}', "needs column"),
        ('{"column": 3, "max_rows": 2}', "privacy_unit.column"),
        ('{"column": "tag", "max_rows": 2}', "is a schema attribute"),
        ('{"column": "person", "max_rows": 0}', f"must be 1 to {MAX_UNIT_ROWS}"),
        ('{"column": "person", "max_rows": 1001}', f"must be 1 to {MAX_UNIT_ROWS}"),
        ('{"column": "person", "max_rows": 2.5}', "must be a positive integer"),
        ('{"column": "person", "max_rows": true}', "must be a positive integer"),
    ],
)
def test_bad_privacy_unit_fields_are_refused(field: str, words: str) -> None:
    with pytest.raises(IngestError) as caught:
        parse_privacy_unit(field, SCHEMA)
    assert caught.value.code == "bad_privacy_unit" and caught.value.status == 422
    assert words in caught.value.message


def test_a_good_field_parses() -> None:
    unit = parse_privacy_unit('{"column": "person", "max_rows": 3}', SCHEMA)
    assert unit == PrivacyUnit("person", 3)


@pytest.mark.parametrize("source", ["csv-fast", "csv-exact"])
def test_an_empty_id_is_refused_by_line_without_quoting_ids(source: str) -> None:
    rows = rows_per_unit()
    rows[4] = ("  ", rows[4][1], rows[4][2])
    data = csv_text(rows)
    stream = io.BytesIO(data) if source == "csv-fast" else io.BufferedReader(OneWay(data))
    with pytest.raises(IngestError) as caught:
        encode_upload(stream, SCHEMA, unit=PrivacyUnit("person", 2))  # type: ignore[arg-type]
    error = caught.value
    assert error.code == "missing_unit_id" and error.status == 422
    assert error.details == {"column": "person", "lines": [6]}
    assert not any(unit_id in error.message for unit_id in IDS)


def test_a_null_id_in_parquet_is_refused_by_row() -> None:
    rows = rows_per_unit()
    buffer = io.BytesIO()
    person: list[str | None] = [p for p, _, _ in rows]
    person[9] = None
    table = pa.table(
        {
            "person": pa.array(person),
            "tag": pa.array([t for _, t, _ in rows]),
            "x": pa.array([x for _, _, x in rows]),
        }
    )
    pq.write_table(table, buffer)
    buffer.seek(0)
    with pytest.raises(IngestError) as caught:
        encode_upload(buffer, SCHEMA, unit=PrivacyUnit("person", 2))
    assert caught.value.code == "missing_unit_id"
    assert caught.value.details == {"column": "person", "rows": [10]}


def test_the_id_column_must_be_in_the_file() -> None:
    for stream in (io.BytesIO(b"tag,x\na,1\n"), parquet(rows_per_unit())):
        with pytest.raises(IngestError) as caught:
            encode_upload(stream, SCHEMA, unit=PrivacyUnit("visitor", 2))
        assert caught.value.code == "bad_header"
        assert "missing column(s) 'visitor'" in caught.value.message


def test_a_value_error_never_quotes_an_id() -> None:
    rows = rows_per_unit()
    rows[2] = (rows[2][0], "zz", 1)
    with pytest.raises(IngestError) as caught:
        encode_upload(io.BytesIO(csv_text(rows)), SCHEMA, unit=PrivacyUnit("person", 2))
    assert caught.value.details == {"column": "tag", "lines": [4]}
    assert not any(unit_id in caught.value.message for unit_id in IDS)


@pytest.mark.parametrize(
    "ids",
    [
        pa.array(["a", "b", "", "a"]),
        pa.array([1.0, 2.0, float("nan"), 1.0]),
        pa.array(["a", "b", None, "a"]).dictionary_encode(),
    ],
)
def test_parquet_ids_without_a_value_are_refused(ids: pa.Array) -> None:
    buffer = io.BytesIO()
    table = pa.table({"person": ids, "tag": ["a", "b", "c", "d"], "x": [1, 2, 3, 4]})
    pq.write_table(table, buffer)
    buffer.seek(0)
    with pytest.raises(IngestError) as caught:
        encode_upload(buffer, SCHEMA, unit=PrivacyUnit("person", 1))
    assert caught.value.details == {"column": "person", "rows": [3]}


def test_dictionary_and_integer_ids_group_rows() -> None:
    for ids in (pa.array(["a", "b", "a", "a"]).dictionary_encode(), pa.array([7, 8, 7, 7])):
        buffer = io.BytesIO()
        table = pa.table({"person": ids, "tag": ["a", "b", "c", "d"], "x": [1, 2, 3, 4]})
        pq.write_table(table, buffer, row_group_size=2)
        buffer.seek(0)
        assert encode_upload(buffer, SCHEMA, unit=PrivacyUnit("person", 2)).rows == 3
