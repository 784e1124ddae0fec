"""Round numbers for drafted bins: round steps, equal round bins, integer widths, and
round edges placed at a column's quantiles (for skewed columns).

A round number is 1, 2, 2.5 or 5 × 10^k; a whole-number column only gets integer
steps (1, 2, 5, 10, 20, 25, 50, …), so its bins hold whole numbers evenly. Pure
arithmetic: the drafting modules decide which edges a column gets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np


def _steps(limit: float) -> list[float]:
    """Round numbers 1, 2, 2.5, 5 × 10^k from below `limit`/10 up to beyond `limit`."""
    exponent = math.floor(math.log10(limit)) - 1
    out = []
    for power in range(exponent, exponent + 3):
        for mantissa in (1.0, 2.0, 2.5, 5.0):
            out.append(mantissa * 10.0**power)
    return out


def round_up(n: int) -> int:
    """The smallest round number (1, 2, 2.5 or 5 × 10^k, at least an integer) >= n."""
    if n <= 1:
        return 1
    for step in _steps(n):
        if step >= n and float(step).is_integer():
            return int(step)
    return n  # pragma: no cover - _steps reaches beyond n


def nice_step(span: float) -> float:
    """A round step (1, 2, 2.5 or 5 × 10^k) at least `span`."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    for step in _steps(span):
        if step >= span * (1 - 1e-12):
            return step
    return 10.0 ** math.ceil(math.log10(span))  # pragma: no cover


def whole_step(span: float) -> int:
    """A round integer step (1, 2, 5, 10, 20, 25, 50, … ) at least `span` (and 1)."""
    step = nice_step(max(span, 1.0))
    if not float(step).is_integer():  # 2.5: the next round number is 5
        step = 2 * step
    return int(step)


def tidy(x: float) -> float | int:
    """An edge without float dust: 0.30000000000000004 is 0.3, 20.0 is 20."""
    rounded = round(x, 10)
    return int(rounded) if float(rounded).is_integer() else rounded


def round_edges(low: float, high: float, bins: int, *, whole: bool = False) -> list[float | int]:
    """About `bins` equal bins with round edges covering [low, high], widened to
    multiples of the step (whole numbers get an integer step)."""
    span = (high - low) / bins if high > low else max(abs(low), 1.0) / bins
    step = float(whole_step(span)) if whole else nice_step(span)
    first = math.floor(low / step) * step
    last = math.ceil(high / step) * step
    if last <= first:
        last = first + step
    count = max(1, round((last - first) / step))
    return [tidy(first + i * step) for i in range(count + 1)]


def integer_bins(low: int, high: int, bins: int) -> tuple[int, int, int]:
    """`(start, stop, width)`: at most about `bins` integer bins of a round width,
    starting at a multiple of it, that hold every integer of [low, high]; the last bin
    [stop − width + 1, stop] is whole (so `stop` is no observed extreme)."""
    width = whole_step((high - low + 1) / bins)
    start = math.floor(low / width) * width
    while math.ceil((high - start + 1) / width) > bins:
        width = whole_step(width + 1)
        start = math.floor(low / width) * width
    count = math.ceil((high - start + 1) / width)
    return start, start + count * width - 1, width


def _round_to(x: float, step: float, how: str) -> float | int:
    ratio = x / step
    if how == "down":
        index = math.floor(ratio)
    elif how == "up":
        index = math.ceil(ratio)
    else:  # the nearest, halves up
        index = math.floor(ratio + 0.5)
    return tidy(index * step)


def quantile_edges(
    low: float, high: float, quantiles: Iterable[float], *, whole: bool = False
) -> list[float | int]:
    """Round edges at a column's quantiles: `low` rounded down, each quantile between
    them to the nearest multiple of a round step of about a fifth of its gap to the
    nearest neighbour (at least a thousandth of the range), `high` rounded up; repeated
    edges merged. Whole numbers get integer edges."""
    points = [low, *sorted(float(q) for q in quantiles if low < q < high), high]
    floor_step = max(high - low, 0.0) / 1000

    def step_for(i: int) -> float:
        gaps = [
            abs(points[j] - points[i])
            for j in (i - 1, i + 1)
            if 0 <= j < len(points) and points[j] != points[i]
        ]
        span = max(min(gaps, default=high - low) / 5, floor_step)
        return float(whole_step(span)) if whole else nice_step(span)

    first = _round_to(low, step_for(0), "down")
    last = _round_to(high, step_for(len(points) - 1), "up")
    if last <= first:
        last = tidy(first + step_for(0))
    inner = {_round_to(points[i], step_for(i), "nearest") for i in range(1, len(points) - 1)}
    return [first, *sorted(e for e in inner if first < e < last), last]


def largest_share(values: np.ndarray, edges: Sequence[float]) -> float:
    """The largest share of `values` that one of the bins between `edges` holds."""
    if len(values) == 0 or len(edges) < 2:
        return 0.0
    counts, _ = np.histogram(values, bins=np.asarray(edges, dtype=np.float64))
    return float(counts.max()) / len(values)
