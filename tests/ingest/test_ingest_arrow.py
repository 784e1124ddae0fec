"""The Arrow fast path gives exactly what the exact path gives, or declines.

A seekable stream is tried on the fast path first; a non-seekable one only ever takes
the exact (Python csv) path. Every file here is encoded both ways: the tables must be
identical, or both must refuse with the same error.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from app.ingest import EncodedTable, IngestError, encode_csv
from app.ingest.arrow import encode_canonical
from app.schema import parse_schema

SCHEMA = parse_schema(
    {
        "attributes": [
            {"name": "sex", "type": "categorical", "values": ["F", "M", "a, b"]},
            {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
            {"name": "debt", "type": "numeric", "bins": [-5, 0, 5], "clip": True},
            {"name": "children", "type": "integer", "size": 4},
            {"name": "rooms", "type": "integer", "size": 3, "clip": True},
        ]
    }
)
HEADER = "rooms,children,debt,age,sex"  # not the schema's order


class OneWay(io.RawIOBase):
    """A stream that cannot seek: encode_csv must take the exact path."""

    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        chunk = self._inner.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def both_ways(data: str) -> tuple[EncodedTable | IngestError, EncodedTable | IngestError]:
    results: list[EncodedTable | IngestError] = []
    for stream in (io.BytesIO(data.encode()), io.BufferedReader(OneWay(data.encode()))):
        try:
            results.append(encode_csv(stream, SCHEMA))  # type: ignore[arg-type]
        except IngestError as error:
            results.append(error)
    return results[0], results[1]


def assert_same(data: str) -> None:
    fast, exact = both_ways(data)
    if isinstance(exact, IngestError):
        assert isinstance(fast, IngestError), data
        assert (fast.code, fast.message, fast.details) == (exact.code, exact.message, exact.details)
        return
    assert isinstance(fast, EncodedTable), data
    assert fast.rows == exact.rows
    assert list(fast.columns) == list(exact.columns) == list(SCHEMA.names)
    for name in SCHEMA.names:
        assert fast.columns[name].dtype == exact.columns[name].dtype
        np.testing.assert_array_equal(fast.columns[name], exact.columns[name])


def canonical_file(rows: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    sexes = np.array(["F", "M", '"a, b"'])
    lines = [HEADER]
    for _ in range(rows):
        age = rng.choice(["0", "17.999", "18", "44.5", "120", "65", "3"])
        debt = rng.choice(["-7.25", "-5", "0", "4.99", "5", "12"])  # clipped beyond the edges
        lines.append(f"{rng.integers(0, 6)},{rng.integers(0, 4)},{debt},{age},{rng.choice(sexes)}")
    return "\n".join(lines) + "\n"


def test_a_canonical_file_takes_the_fast_path_and_matches_the_exact_one() -> None:
    data = canonical_file(3000)
    fast = encode_canonical(io.BytesIO(data.encode()), SCHEMA, None)
    assert fast is not None and fast[0] == 3000
    assert_same(data)
    # Windows line ends and blank lines are canonical too
    assert_same(data.replace("\n", "\r\n").replace("\r\n4,", "\r\n\r\n4,"))


@pytest.mark.parametrize(
    "column, cells",
    [
        ("age", ["1e1", "inf", ".5", "5.", "+3", "0003", "1_0", " 3", "nan", "-0", "", "121"]),
        ("age", ["-", ".", "-.5", "1.2.3", "--1", "1-2", "0" * 70 + "1", "1." + "0" * 70]),
        ("debt", ["inf", "-inf", "1e9", "-1e9", "nan"]),
        ("children", ["3.0", "+3", "0003", "1_0", " 2", "-0", "3.5", "4", "", "9" * 30]),
        ("rooms", ["7", "-1", "2.0", "1e0"]),
        ("sex", [" F", "f", "a,b", "", "M "]),
    ],
)
def test_any_other_spelling_gives_the_same_table_or_the_same_refusal(
    column: str, cells: list[str]
) -> None:
    base = canonical_file(50, seed=1).splitlines()
    position = HEADER.split(",").index(column)
    for cell in cells:
        lines = list(base)
        fields = lines[7].split(",", 4)  # the last field (sex) may hold a quoted comma
        fields[position] = f'"{cell}"' if "," in cell else cell
        lines[7] = ",".join(fields)
        assert_same("\n".join(lines) + "\n")


def test_structural_problems_are_explained_by_the_exact_path() -> None:
    good = canonical_file(20, seed=2)
    lines = good.splitlines()
    variants = [
        "\ufeff" + good,  # a byte-order mark
        good.replace(HEADER, HEADER.replace("age", " age")),  # a padded header name
        good.replace(HEADER, HEADER + ",extra"),  # a column the rows do not have
        good.replace(HEADER, HEADER.replace("sex", "age")),  # a duplicate column
        "\n".join([*lines[:5], lines[5] + ",1", *lines[6:]]),  # a ragged row
        "\n".join([*lines[:5], '0,0,0,0,"F', 'M"', *lines[6:]]),  # a quoted line break
        HEADER + "\n",  # no rows
        "",  # nothing at all
        good.encode().replace(b"F", b"\xff", 1).decode("latin-1"),  # not UTF-8 (as text)
    ]
    for data in variants:
        assert_same(data)


def test_the_byte_limit_stops_the_fast_path_where_it_stops_the_exact_one() -> None:
    data = canonical_file(500).encode()
    for limit in (10, 1000, len(data) - 1):
        errors = []
        for stream in (io.BytesIO(data), io.BufferedReader(OneWay(data))):
            with pytest.raises(IngestError) as refused:
                encode_csv(stream, SCHEMA, max_bytes=limit)  # type: ignore[arg-type]
            errors.append((refused.value.code, refused.value.message))
        assert errors[0] == errors[1] == ("too_large", errors[0][1])
    assert encode_csv(io.BytesIO(data), SCHEMA, max_bytes=len(data)).rows == 500


def test_many_rows_in_several_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.ingest import arrow

    monkeypatch.setattr(arrow, "_BLOCK_BYTES", 4096)  # many Arrow blocks and batches
    data = canonical_file(5000, seed=3)
    assert encode_canonical(io.BytesIO(data.encode()), SCHEMA, None) is not None
    assert_same(data)
    assert all(isinstance(r, EncodedTable) for r in both_ways(data))


def with_last_field(line: str, cell: str) -> str:
    return ",".join([*line.split(",", 4)[:4], cell])  # the last field may hold a comma


def test_a_quoted_line_break_at_any_piece_boundary_is_explained_by_the_exact_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.ingest import arrow

    monkeypatch.setattr(arrow, "_BLOCK_BYTES", 256)  # pieces of a dozen lines or so
    base = canonical_file(60, seed=4).splitlines()
    for row in range(1, len(base)):  # the break falls at, before and after each boundary
        lines = list(base)
        lines[row] = with_last_field(lines[row], '"F\nM"')  # one record on two lines
        assert_same("\n".join(lines) + "\n")


def test_a_schema_value_with_a_line_break_is_left_to_the_exact_path() -> None:
    schema = parse_schema(
        {"attributes": [{"name": "note", "type": "categorical", "values": ["a\nb", "c"]}]}
    )
    data = 'note\n"a\nb"\nc\n'
    assert encode_canonical(io.BytesIO(data.encode()), schema, None) is None
    table = encode_csv(io.BytesIO(data.encode()), schema)
    np.testing.assert_array_equal(table.columns["note"], [0, 1])


def test_a_late_refusal_stops_the_encoding_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from app.ingest import arrow

    monkeypatch.setattr(arrow, "_BLOCK_BYTES", 4096)
    lines = canonical_file(5000, seed=5).splitlines()
    lines[4900] = with_last_field(lines[4900], "G")  # not a schema value
    assert_same("\n".join(lines) + "\n")
    assert not [t for t in threading.enumerate() if t.name.startswith(arrow.THREAD_NAME_PREFIX)]
