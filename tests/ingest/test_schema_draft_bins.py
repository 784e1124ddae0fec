"""Drafts that fit their data (issue 43): constant and id-like columns left out with a
note, whole numbers as integer attributes (months are 12 values, wide whole numbers
get a round integer width), skewed columns binned at round quantiles; and
`--private-bins RHO`: edges from OpenDP's private quantile, at the split ρ."""

from __future__ import annotations

import io
import itertools
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.cli import main
from app.ingest import encode_upload
from app.privacy import quantiles
from app.schema import parse_schema
from app.schema.drafting import SKEW_SHARE, draft_schema
from app.schema.edges import integer_bins, largest_share, quantile_edges, whole_step
from app.schema.private_edges import RANGE_RELEASES, coarse_grid

RNG = np.random.default_rng(43)
N = 2000


def frame() -> pa.Table:
    return pa.table(
        {
            "country": ["FR"] * N,  # constant text
            "version": [3] * N,  # constant number
            "row_id": np.arange(10_000, 10_000 + N),  # id-like whole numbers
            "month": RNG.integers(1, 13, N),
            "hour": RNG.integers(0, 24, N),
            "minute_of_day": RNG.integers(0, 1440, N),
            "delay": np.round(RNG.lognormal(2.0, 1.2, N) - 10).astype(np.int64),
            "wage": RNG.lognormal(10.0, 1.0, N),
            "height": RNG.normal(170.0, 10.0, N),
        }
    )


def parquet_bytes(table: pa.Table) -> io.BytesIO:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    buffer.seek(0)
    return buffer


def by_name(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in schema["attributes"]}


def test_constant_and_id_like_columns_are_left_out_with_a_note_each() -> None:
    draft = draft_schema(frame())
    assert set(draft.left_out) == {"country", "version", "row_id"}
    assert "same value in all 2000 rows" in draft.left_out["country"]
    assert "same value in all 2000 rows" in draft.left_out["version"]
    assert "looks like an id" in draft.left_out["row_id"]
    for column in draft.left_out:
        assert any(w.startswith(f"column {column!r} left out: ") for w in draft.warnings)
    assert not any("FR" in w or "10000" in w for w in draft.warnings)  # never a value
    # A column that is constant where present but sometimes missing says something.
    sometimes = draft_schema(pa.table({"flag": ["y", None, "y"]})).schema["attributes"]
    assert sometimes == [{"name": "flag", "type": "categorical", "values": ["y"], "missing": True}]


def test_whole_numbers_are_integer_attributes() -> None:
    table = frame()
    draft = draft_schema(table)
    attributes = by_name(draft.schema)
    # The draft fits its own file, left-out columns and all.
    assert encode_upload(parquet_bytes(table), parse_schema(draft.schema)).rows == N
    assert attributes["month"] == {
        "name": "month",
        "type": "integer",
        "min": 1,
        "max": 12,
        "clip": False,
    }
    assert attributes["hour"] | {} == {
        "name": "hour",
        "type": "integer",
        "min": 0,
        "max": 23,
        "clip": False,
    }
    # 1,440 values: bins of a round integer width, starting at a multiple of it; the
    # last bin is whole, so max is no observed extreme.
    minutes = attributes["minute_of_day"]
    assert minutes["type"] == "integer" and minutes["width"] == 200
    assert minutes["min"] == 0 and minutes["max"] == 1599
    assert (minutes["max"] - minutes["min"] + 1) % minutes["width"] == 0


def test_whole_numbers_in_a_csv_are_integers_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "visits.csv"
    rows = [
        f"{m},{h}.0,{i}" for i, (m, h) in enumerate(zip(range(1, 13), range(12), strict=True))
    ] * 5
    path.write_text("month,hour,n\n" + "\n".join(rows) + "\n")
    assert main(["schema", "draft", str(path)]) == 0
    attributes = by_name(json.loads(capsys.readouterr().out))
    assert (attributes["month"]["min"], attributes["month"]["max"]) == (1, 12)
    assert attributes["hour"]["type"] == "integer"  # "3.0" is a whole number


def test_a_skewed_column_follows_its_spread() -> None:
    table = frame()
    attributes = by_name(draft_schema(table).schema)
    for name in ("delay", "wage"):
        edges = attributes[name]["bins"]
        values = table.column(name).to_numpy().astype(float)
        assert attributes[name]["type"] == "numeric" and len(edges) - 1 >= 5
        assert edges[0] <= values.min() and edges[-1] >= values.max()
        assert largest_share(values, edges) <= SKEW_SHARE
    assert all(float(e).is_integer() for e in attributes["delay"]["bins"])  # whole minutes
    # A symmetric column keeps equal round bins.
    height = attributes["height"]["bins"]
    assert len({b - a for a, b in itertools.pairwise(height)}) == 1


def test_round_integer_steps_and_quantile_edges() -> None:
    assert [whole_step(s) for s in (0.3, 1, 2.4, 3, 21, 24)] == [1, 1, 5, 5, 25, 25]
    assert integer_bins(0, 23, 10) == (0, 24, 5)
    assert integer_bins(18, 90, 10) == (10, 99, 10)
    # Each edge to a round step of about a fifth of its nearest gap (halves up).
    assert quantile_edges(0.3, 97.0, [2.1, 5.2, 11.0, 40.0]) == [0, 2, 5, 12, 40, 100]
    assert quantile_edges(-12, 1500, [-3, 0, 4, 25, 90], whole=True) == [
        -12,
        -2,
        0,
        4,
        25,
        100,
        1500,
    ]


def test_private_bins_call_opendp_with_the_split_rho(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, float, float]] = []
    real = quantiles.private_quantile

    def spy(values: Any, candidates: Any, alpha: float, rho: float, unit_rows: int = 1) -> float:
        calls.append((len(candidates), alpha, rho))
        return real(values, candidates, alpha, rho, unit_rows)

    monkeypatch.setattr(quantiles, "private_quantile", spy)
    table = frame().select(["country", "month", "wage"])
    bins, rho = 6, 0.5
    draft = draft_schema(table, bins=bins, private_bins=rho)
    share = rho / 2 / (bins + RANGE_RELEASES - 1)  # two columns drafted from numbers
    assert calls and all(call_rho == pytest.approx(share, rel=1e-12) for *_, call_rho in calls)
    assert sum(Fraction(call_rho) for *_, call_rho in calls) <= rho  # exactly
    # Each column: quartiles on the public grid, five inner edges, the range.
    assert len(calls) == 2 * (RANGE_RELEASES + bins - 1)
    assert calls[0][0] == len(coarse_grid(whole=True))
    assert draft.schema["private_bins"] == {"rho": rho, "attributes": ["month", "wage"]}
    attributes = by_name(draft.schema)
    assert attributes["wage"]["clip"] is True and attributes["month"]["clip"] is True
    parsed = parse_schema(draft.schema)
    assert parsed.private_bins is not None and parsed.private_bins.rho == rho
    assert parsed.to_json()["private_bins"] == draft.schema["private_bins"]
    # The table uploads under its private draft: values past the private range clip.
    assert encode_upload(parquet_bytes(table), parsed).rows == N


def test_with_a_huge_rho_the_edges_are_the_quantiles() -> None:
    values = RNG.normal(50.0, 10.0, 4000)
    draft = draft_schema(pa.table({"score": values}), bins=5, private_bins=1e5)
    (score,) = draft.schema["attributes"]
    edges = score["bins"]
    assert len(edges) == 6
    truth = np.quantile(values, [0.2, 0.4, 0.6, 0.8])
    assert np.allclose(edges[1:-1], truth, atol=1.5)  # rounded to a step of about a quarter gap
    # The range: the 1% and 99% quantiles, rounded outwards by a round step (5 here).
    low, high = np.quantile(values, [0.01, 0.99])
    assert low - 5 <= edges[0] <= low + 0.5 and high - 0.5 <= edges[-1] <= high + 5


def test_opendp_charges_no_more_than_the_share() -> None:
    measurement = quantiles.quantile_measurement(coarse_grid(whole=False), 0.25, 0.01, 3)
    spent = float(measurement.map(3))
    assert 0.0099 <= spent <= 0.01
    with pytest.raises(ValueError, match="strictly increasing"):
        quantiles.quantile_measurement([1.0, 1.0], 0.5, 0.01)


def test_a_unit_keeps_its_first_rows_and_is_the_neighbouring_distance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[int, int]] = []
    real = quantiles.private_quantile

    def spy(values: Any, candidates: Any, alpha: float, rho: float, unit_rows: int = 1) -> float:
        seen.append((len(values), unit_rows))
        return real(values, candidates, alpha, rho, unit_rows)

    monkeypatch.setattr(quantiles, "private_quantile", spy)
    person = np.repeat(np.arange(300), 4)  # 4 rows each
    table = pa.table({"person": person, "dose": RNG.normal(10.0, 2.0, len(person))})
    draft = draft_schema(table, private_bins=1.0, unit="person", max_rows=2)
    assert [a["name"] for a in draft.schema["attributes"]] == ["dose"]
    assert set(seen) == {(600, 2)}


def test_the_cli_drafts_private_bins_and_refuses_a_bad_rho(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"wage": RNG.lognormal(10.0, 1.0, 500)}), path)
    assert main(["schema", "draft", str(path), "--private-bins", "0.5", "--bins", "4"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["private_bins"] == {"rho": 0.5, "attributes": ["wage"]}
    for bad in ("0", "-1", "nan", "x", "2e6"):
        with pytest.raises(SystemExit) as exit_info:
            main(["schema", "draft", str(path), "--private-bins", bad])
        assert exit_info.value.code == 2
        assert "--private-bins" in capsys.readouterr().err
    # k rows per unit needs the unit's column; an unknown unit column is named.
    assert main(["schema", "draft", str(path), "--private-bins", "1", "--max-rows", "2"]) == 1
    assert "max_rows needs the privacy unit's column" in capsys.readouterr().err
    assert main(["schema", "draft", str(path), "--unit", "person"]) == 1
    assert "'person' is not in the file" in capsys.readouterr().err
    # Without the option nothing is private.
    assert main(["schema", "draft", str(path)]) == 0
    assert "private_bins" not in json.loads(capsys.readouterr().out)
