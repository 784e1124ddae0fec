"""Bounds from bin edges: they hold for every placement of values inside their bins, and
the variance bounds are reached (the least by clamping to a point, the greatest on edges)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.pgm.bin_bounds import BinValues, power_range, sum_range, variance_range


def test_two_bins_by_hand() -> None:
    low, high = np.array([0.0, 2.0]), np.array([1.0, 3.0])
    least, greatest = variance_range(np.array([1.0, 1.0]), low, high)
    # closest: 1 and 2 (variance 0.25); farthest: 0 and 3 (variance 2.25)
    assert float(least) == pytest.approx(0.25, rel=1e-6)
    assert float(greatest) == pytest.approx(2.25, rel=1e-6)
    lo, hi = sum_range(np.array([2.0, 1.0]), low, high)
    assert float(lo) == pytest.approx(2.0) and float(hi) == pytest.approx(5.0)


def test_overlapping_reach_gives_zero_least_variance() -> None:
    least, greatest = variance_range(
        np.array([3.0, 5.0]), np.array([0.0, 1.0]), np.array([1.0, 4.0])
    )
    assert float(least) == pytest.approx(0.0, abs=1e-9)
    # brute force over edge placements with 8 records
    best = 0.0
    for choice in itertools.product([0, 1], repeat=8):
        values = [(1.0 if c else 0.0) for c in choice[:3]] + [
            (4.0 if c else 1.0) for c in choice[3:]
        ]
        best = max(best, float(np.var(values)))
    assert float(greatest) >= best - 1e-9
    assert float(greatest) == pytest.approx(best, rel=1e-3)


def test_power_range_crosses_zero() -> None:
    least, greatest = power_range(np.array([-2.0, 1.0, np.nan]), np.array([1.0, 3.0, np.nan]), 2)
    assert least.tolist() == [0.0, 1.0, 0.0]
    assert greatest.tolist() == [4.0, 9.0, 0.0]
    least, greatest = power_range(np.array([-2.0]), np.array([1.0]), 3)
    assert least.tolist() == [-8.0] and greatest.tolist() == [1.0]


def test_missing_code_and_empty_cells() -> None:
    low, high = np.array([0.0, 10.0, np.nan]), np.array([10.0, 20.0, np.nan])
    least, greatest = variance_range(np.array([[0.0, 0.0, 5.0], [1.0, 1.0, 9.0]]), low, high)
    assert np.isnan(least[0]) and np.isnan(greatest[0])
    assert least[1] == pytest.approx(0.0, abs=1e-9)
    assert greatest[1] == pytest.approx(100.0, rel=1e-6)


def test_bin_values_checks_itself() -> None:
    with pytest.raises(ValueError):
        BinValues(np.array([1.0]), "guess", np.array([0.0]), np.array([2.0]))
    with pytest.raises(ValueError):
        BinValues(np.array([1.0]), "midpoint", np.array([3.0]), np.array([2.0]))


@st.composite
def binned_records(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bins in order (touching, as numeric bins do, or with gaps, as integer bins
    [1, 5], [6, 10] do), and records: each a bin and a value inside it."""
    bins = draw(st.integers(1, 6))
    start = draw(st.floats(-1e4, 1e4, allow_nan=False))
    widths = np.array(draw(st.lists(st.floats(0.01, 1e3), min_size=bins, max_size=bins)))
    gaps = np.array(draw(st.lists(st.sampled_from([0.0, 1.0, 7.5]), min_size=bins, max_size=bins)))
    low = start + np.concatenate([[0.0], np.cumsum(widths + gaps)[:-1]])
    high = low + widths
    records = draw(st.integers(1, 40))
    codes = np.array(draw(st.lists(st.integers(0, bins - 1), min_size=records, max_size=records)))
    spots = np.array(draw(st.lists(st.floats(0, 1), min_size=records, max_size=records)))
    values = low[codes] + spots * (high[codes] - low[codes])
    return low, high, codes, values


@settings(max_examples=150, deadline=None)
@given(binned_records())
def test_bounds_contain_every_placement(
    case: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    low, high, codes, values = case
    counts = np.bincount(codes, minlength=low.size).astype(float)
    lo, hi = sum_range(counts, low, high)
    assert lo <= values.sum() <= hi
    least, greatest = variance_range(counts, low, high)
    assert np.isfinite(least) and np.isfinite(greatest)
    assert least <= np.var(values) <= greatest
    for order in (1, 2, 3):
        p_lo, p_hi = power_range(low, high, order)
        total = float((values**order).sum())
        slack = 1e-9 * (abs(total) + 1.0)
        assert counts @ p_lo - slack <= total <= counts @ p_hi + slack


@settings(max_examples=150, deadline=None)
@given(binned_records())
def test_variance_bounds_are_reached(
    case: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    low, high, codes, _ = case
    counts = np.bincount(codes, minlength=low.size).astype(float)
    least, greatest = variance_range(counts, low, high)
    # The least: every value clamped to one point, scanned finely.
    points = np.linspace(low.min(), high.max(), 2001)
    clamped = np.clip(points[:, None], low[codes], high[codes])
    scanned = float(np.var(clamped, axis=1).min())
    scale = float((high.max() - low.min()) ** 2) + 1.0
    assert least <= scanned + 1e-9 * scale
    assert scanned - least <= 1e-3 * scale
    # The greatest: every edge placement with a threshold on the sorted records.
    order = np.argsort(low[codes] + high[codes], kind="stable")
    best = 0.0
    for cut in range(codes.size + 1):
        at = np.where(np.arange(codes.size) >= cut, high[codes][order], low[codes][order])
        best = max(best, float(np.var(at)))
    assert greatest >= best - 1e-9 * scale


def test_nested_intervals_take_the_bisection() -> None:
    # [0.5, 1] inside [0, 2]: ends not both ascending; values may all sit at 0.75
    least, greatest = variance_range(
        np.array([2.0, 2.0]), np.array([0.0, 0.5]), np.array([2.0, 1.0])
    )
    assert float(least) == pytest.approx(0.0, abs=1e-9)
    # farthest: [0, 2] split between its edges, [0.5, 1] at one edge: brute force over 4 values
    best = max(
        float(np.var([a, b, c, d]))
        for a, b in itertools.product([0.0, 2.0], repeat=2)
        for c, d in itertools.product([0.5, 1.0], repeat=2)
    )
    assert float(greatest) >= best - 1e-9
