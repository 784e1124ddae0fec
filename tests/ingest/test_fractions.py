"""What an upload keeps of each row's place within its bin (`app.ingest.fractions`): the
same on Arrow's and the exact CSV path and from Parquet, cut by the same privacy-unit
cap as the codes, nothing for a stream that cannot be read twice."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.ingest import PrivacyUnit, encode_upload
from app.schema import parse_schema
from app.schema.within_bins import GRID

SCHEMA = parse_schema(
    {
        "attributes": [
            {"name": "sex", "type": "categorical", "values": ["F", "M"]},
            {"name": "hours", "type": "numeric", "bins": [0, 10, 40, 100], "clip": True},
            {
                "name": "wage",
                "type": "numeric",
                "bins": [0, 1000, 5000],
                "missing": True,
                "missing_values": ["", "NA"],
            },
        ]
    }
)
HOURS = [0.0, 5.0, 10.0, 39.9, 100.0, 120.0, 7.5, 25.0]
WAGES = ["10", "NA", "4999.5", "", "1000", "2500", "0", "5000"]


def expected(values: list[float], edges: list[float]) -> list[int]:
    """Each value's place, from the edges here (clamped at the ends, last bin closed)."""
    out = []
    for x in values:
        if np.isnan(x):
            out.append(0)
            continue
        code = min(max(int(np.searchsorted(edges, x, side="right")) - 1, 0), len(edges) - 2)
        low, high = edges[code], edges[code + 1]
        out.append(int(np.floor(min(max((x - low) / (high - low), 0.0), 1.0) * GRID + 0.5)))
    return out


WAGE_NUMBERS = [float(w) if w not in ("", "NA") else float("nan") for w in WAGES]
EXPECTED_HOURS = expected(HOURS, [0, 10, 40, 100])
EXPECTED_WAGES = expected(WAGE_NUMBERS, [0, 1000, 5000])


def csv_of(header: str, *, pad: str = "") -> bytes:
    lines = [header]
    for i, (h, w) in enumerate(zip(HOURS, WAGES, strict=True)):
        lines.append(f"{'FM'[i % 2]},{pad}{h}{pad},{w}")
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize(
    "data",
    [
        csv_of("sex,hours,wage"),  # canonical: Arrow's reader
        csv_of(" sex , hours , wage ", pad=" "),  # padded names: the exact reader
    ],
    ids=["arrow", "exact"],
)
def test_a_csv_keeps_each_binned_rows_place_on_the_grid(data: bytes) -> None:
    table = encode_upload(io.BytesIO(data), SCHEMA)
    assert set(table.fractions) == {"hours", "wage"}  # never the categorical one
    assert table.fractions["hours"].tolist() == EXPECTED_HOURS
    assert table.fractions["wage"].tolist() == EXPECTED_WAGES
    assert EXPECTED_HOURS[:5] == [0, GRID // 2, 0, 65318, GRID]  # edges, halves, the top


def test_a_parquet_file_keeps_the_same_places() -> None:
    buffer = io.BytesIO()
    wages = pa.array([w if w else None for w in WAGES])  # text, nulls and "NA"
    pq.write_table(
        pa.table({"sex": ["F", "M"] * 4, "hours": pa.array(HOURS), "wage": wages}), buffer
    )
    buffer.seek(0)
    table = encode_upload(buffer, SCHEMA, content_type="application/vnd.apache.parquet")
    assert table.fractions["hours"].tolist() == EXPECTED_HOURS
    assert table.fractions["wage"].tolist() == EXPECTED_WAGES


def test_the_unit_cap_cuts_places_and_codes_alike() -> None:
    rows = ["person,sex,hours,wage"]
    rng = np.random.default_rng(4)
    hours = np.round(rng.uniform(0, 100, 400), 2)
    for i, h in enumerate(hours):
        rows.append(f"p{i % 40},F,{h},10")
    data = ("\n".join(rows) + "\n").encode()
    table = encode_upload(io.BytesIO(data), SCHEMA, unit=PrivacyUnit("person", 2))
    assert table.rows == 80 and table.fractions["hours"].size == 80
    # Each kept (code, place) pair gives back one row's own value: never a mix of rows.
    edges = np.array([0.0, 10.0, 40.0, 100.0])
    codes = table.columns["hours"].astype(np.int64)
    places = table.fractions["hours"].astype(np.float64)
    values = edges[codes] + np.diff(edges)[codes] * places / GRID
    nearest = np.abs(values[:, None] - hours[None, :]).min(axis=1)
    assert nearest.max() < 0.005  # the grid's rounding: at most 90/2¹⁷; rows differ by 0.01


def test_a_stream_read_once_keeps_no_places() -> None:
    class OneWay(io.RawIOBase):
        def __init__(self, data: bytes) -> None:
            self.inner = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
            chunk = self.inner.read(len(buffer))
            buffer[: len(chunk)] = chunk
            return len(chunk)

    table = encode_upload(io.BufferedReader(OneWay(csv_of("sex,hours,wage"))), SCHEMA)
    assert table.rows == len(HOURS) and table.fractions == {}
