"""Quantiles of an attribute from the model's counts over its codes (free: post-processing).

Each code of a numeric or integer attribute stands for an interval of values: a bin
`[eᵢ, eᵢ₊₁)` (the last one closed), or the integers `low..high` of an integer code. The
model says how many records each code holds, not where they lie inside it, so a
quantile is read off the counts' cumulative sum and placed inside its code's interval
by spreading the code's mass over it: uniformly (or, where within-bin means are
measured, by the linear density of the bin's mean, `app.sql.spread`) between the edges
of a bin, or over the integers of an integer code (the answer is then one of them). Every answer
names the interval it lies in, which is all the counts themselves decide.

MIN and MAX are the low edge of the lowest code and the high edge of the highest code
whose estimated count is at least `MIN_MAX_COUNT` (half a record): the model's counts
are noisy estimates, never exactly zero, so "holds a record" needs a threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from app.schema import Attribute, SchemaError
from app.sql.spread import fraction_at, tilts

# A code "holds records" for MIN and MAX when its estimated count reaches this.
MIN_MAX_COUNT = 0.5


@dataclass(frozen=True)
class CodeIntervals:
    """Per code with a value: its lowest and highest value; `integer` when the values
    are integers (low..high inclusive), else a bin [low, high) or the closed last one."""

    low: np.ndarray
    high: np.ndarray
    integer: bool
    # Per code, the slope of its within-bin spread (`app.sql.spread`); None: uniform.
    tilt: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.low)

    def axis(self, code: int) -> tuple[float, float]:
        """The stretch of the value axis a code's records are spread over: its bin, or
        [low − ½, high + ½] for the integers low..high."""
        low, high = float(self.low[code]), float(self.high[code])
        return (low - 0.5, high + 0.5) if self.integer else (low, high)

    def slope(self, code: int) -> float:
        return 0.0 if self.tilt is None else float(self.tilt[code])


def with_means(intervals: CodeIntervals, means: np.ndarray) -> CodeIntervals:
    """The intervals with each code spread to match its measured mean (NaN: uniform)."""
    count = len(intervals)
    ends = [intervals.axis(code) for code in range(count)]
    low = np.array([a for a, _ in ends])
    high = np.array([b for _, b in ends])
    tilt = tilts(low, high, np.asarray(means, dtype=float)[:count])
    return replace(intervals, tilt=tilt)


def code_intervals(attribute: Attribute) -> CodeIntervals:
    """The interval of values each code with a value stands for (SchemaError if the
    attribute is categorical)."""
    if attribute.kind == "categorical":
        raise SchemaError(
            f"attribute {attribute.name!r} is categorical: its values have no order to take "
            "quantiles in"
        )
    if attribute.kind == "numeric":
        edges = np.asarray(attribute.edges, dtype=float)
        return CodeIntervals(edges[:-1].copy(), edges[1:].copy(), integer=False)
    # integers: the integers low..high of each code, both inclusive
    low, high, _closed = attribute.intervals()
    return CodeIntervals(low.copy(), high.copy(), integer=True)


@dataclass(frozen=True)
class Quantile:
    """One quantile: its value and the interval (low, high) of the code it lies in."""

    value: float
    low: float
    high: float


def _place(intervals: CodeIntervals, code: int, within: float) -> float:
    """The value a fraction `within` ∈ [0, 1] of the way through a code's mass."""
    low, high = float(intervals.low[code]), float(intervals.high[code])
    within = fraction_at(intervals.slope(code), within)
    if not intervals.integer:
        return low + within * (high - low)
    integers = round(high - low) + 1
    step = min(integers - 1, max(0, math.ceil(within * integers - 1e-9) - 1))
    return low + step


def quantile(counts: np.ndarray, intervals: CodeIntervals, p: float) -> Quantile | None:
    """The p-quantile (0 ≤ p ≤ 1) of the distribution `counts` (one per code with a
    value; negative estimates count as 0); None when it holds no mass."""
    mass = np.maximum(np.asarray(counts, dtype=float)[: len(intervals)], 0.0)
    total = float(mass.sum())
    if not total > 0.0:
        return None
    positive = np.flatnonzero(mass > 0.0)
    cumulative = np.cumsum(mass)
    target = min(max(p, 0.0), 1.0) * total
    code = int(np.searchsorted(cumulative, target, side="left"))
    code = min(max(code, int(positive[0])), int(positive[-1]))
    before = float(cumulative[code] - mass[code])
    within = min(max((target - before) / float(mass[code]), 0.0), 1.0)
    value = _place(intervals, code, within)
    return Quantile(value, float(intervals.low[code]), float(intervals.high[code]))


def extreme(counts: np.ndarray, intervals: CodeIntervals, highest: bool) -> Quantile | None:
    """MIN (or MAX, `highest`): the low (high) edge of the lowest (highest) code whose
    estimated count is at least `MIN_MAX_COUNT`; None when no code reaches it."""
    mass = np.asarray(counts, dtype=float)[: len(intervals)]
    holding = np.flatnonzero(mass >= MIN_MAX_COUNT)
    if holding.size == 0:
        return None
    code = int(holding[-1] if highest else holding[0])
    low, high = float(intervals.low[code]), float(intervals.high[code])
    return Quantile(high if highest else low, low, high)


def of_function(
    function: str, fraction: float | None, counts: np.ndarray, intervals: CodeIntervals
) -> Quantile | None:
    """MEDIAN / PERCENTILE_CONT(fraction) / MIN / MAX of one distribution."""
    if function == "min":
        return extreme(counts, intervals, highest=False)
    if function == "max":
        return extreme(counts, intervals, highest=True)
    return quantile(counts, intervals, 0.5 if fraction is None else fraction)
