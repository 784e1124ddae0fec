"""What bin edges allow: guaranteed intervals on sums, averages and variances of values
known only by the bin (interval) each lies in, given how many lie in each bin.

A code b stands for values in [low_b, high_b]; a model gives counts n_b (≥ 0, possibly
fractional). For any placement of the values inside their bins:

- Σ x lies in [Σ n_b low_b, Σ n_b high_b] and Σ x^k in the same sums of the least and
  greatest x^k over each bin (`power_range`);
- the population variance lies in [`variance_range`]: its least value puts every value
  as close as its bin allows to one common point c (x = clamp(c, low, high), c the mean
  of those values), its greatest puts every value on an edge — the bins above a
  threshold at their high edge, those below at their low edge, one bin split — because
  the variance is convex in the values and, for a fixed mean, Σ x² gains most per unit
  of mean from the bins with the largest low + high.

The missing code (NaN low and high) holds no value and adds nothing. Pure numpy.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

# Bounds are widened outward by this relative amount (and a tiny absolute one) so that
# floating-point rounding never puts an exact answer a hair outside its bounds.
_SLACK = 1e-9
_BISECTIONS = 64

METHODS = ("midpoint", "within-bin means", "exact")


@dataclass(frozen=True, eq=False)
class BinValues:
    """One number per code standing for its values, and the interval each code holds.

    `values`, `low`, `high` have one entry per code of the attribute, the missing code
    included (NaN there: it holds no value). `method` says where `values` came from:
    "midpoint" (the middle of each bin), "within-bin means" (measured means of each
    bin's values) or "exact" (every code is one value, so low = value = high).
    """

    values: np.ndarray
    method: str
    low: np.ndarray
    high: np.ndarray

    def __post_init__(self) -> None:
        for name in ("values", "low", "high"):
            array = np.array(getattr(self, name), dtype=np.float64)
            array.setflags(write=False)
            object.__setattr__(self, name, array)
        if self.method not in METHODS:
            raise ValueError(f"unknown estimate method {self.method!r}")
        if not (self.values.shape == self.low.shape == self.high.shape) or self.values.ndim != 1:
            raise ValueError("values, low and high need one entry per code")
        present = ~np.isnan(self.low)
        if not np.array_equal(present, ~np.isnan(self.high)) or not np.array_equal(
            present, ~np.isnan(self.values)
        ):
            raise ValueError("a code without a value has NaN in values, low and high alike")
        if np.any(self.low[present] > self.high[present]):
            raise ValueError("a code's low end is above its high end")

    @property
    def has_value(self) -> np.ndarray:
        """Per code: whether it stands for values (False on the missing code)."""
        result: np.ndarray = ~np.isnan(self.low)
        return result

    @property
    def exact(self) -> bool:
        return self.method == "exact"


def _zero_missing(array: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(array), 0.0, array)


def power_range(low: np.ndarray, high: np.ndarray, order: int) -> tuple[np.ndarray, np.ndarray]:
    """Per code, the least and greatest x^order for x in [low, high]; 0 on NaN codes."""
    low = _zero_missing(np.asarray(low, dtype=np.float64))
    high = _zero_missing(np.asarray(high, dtype=np.float64))
    at_low, at_high = low**order, high**order
    least = np.minimum(at_low, at_high)
    greatest = np.maximum(at_low, at_high)
    if order % 2 == 0:
        least = np.where((low < 0) & (high > 0), 0.0, least)
    return least, greatest


def widen(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bounds moved outward by a hair (see `_SLACK`)."""
    low = np.asarray(low, dtype=np.float64)
    high = np.asarray(high, dtype=np.float64)
    return low - _SLACK * (np.abs(low) + 1e-12), high + _SLACK * (np.abs(high) + 1e-12)


def _counts(counts: np.ndarray, size: int) -> np.ndarray:
    array = np.asarray(counts, dtype=np.float64)
    if array.shape[-1] != size:
        raise ValueError(f"counts need {size} entries per cell, got {array.shape[-1]}")
    return np.maximum(array, 0.0)


def sum_range(
    counts: np.ndarray, low: np.ndarray, high: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Σ x over the values of each cell (counts: (..., codes)): its least and greatest."""
    n = _counts(counts, len(low))
    return widen(n @ _zero_missing(low), n @ _zero_missing(high))


def _present(counts: np.ndarray, low: np.ndarray) -> np.ndarray:
    """Counts with the codes that hold no value set to 0."""
    return np.where(np.isnan(low), 0.0, counts)


def variance_range(
    counts: np.ndarray, low: np.ndarray, high: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The least and greatest population variance of the values of each cell.

    counts: (cells, codes) or (codes,). Cells without values get NaN."""
    low = np.asarray(low, dtype=np.float64)
    high = np.asarray(high, dtype=np.float64)
    n = _present(_counts(np.atleast_2d(counts), len(low)), low)
    keep = ~np.isnan(low)
    n, lo, hi = n[:, keep], low[keep], high[keep]
    order = np.argsort((lo + hi) / 2.0, kind="stable")
    n, lo, hi = n[:, order], lo[order], hi[order]
    if lo.size:
        # The variance does not move with a shift; centring keeps Σx² − (Σx)²/N accurate.
        centre = (lo.min() + hi.max()) / 2.0
        lo, hi = lo - centre, hi - centre
    total = n.sum(axis=1)
    least = _least_variance(n, lo, hi, total)
    greatest = _greatest_variance(n, lo, hi, total)
    empty = total <= 0
    least[empty] = np.nan
    greatest[empty] = np.nan
    least, greatest = widen(np.maximum(least, 0.0), greatest)
    least = np.maximum(least, 0.0)
    if np.ndim(counts) == 1:
        return np.asarray(least[0]), np.asarray(greatest[0])
    return least, greatest


def _least_variance(n: np.ndarray, lo: np.ndarray, hi: np.ndarray, total: np.ndarray) -> np.ndarray:
    """min over c of Σ n · dist(c, [lo, hi])² / N (then every value sits at clamp(c)).

    The function of c is convex and, between consecutive bin edges, a quadratic whose
    coefficients are prefix sums over the bins: its least value on each piece is at its
    stationary point clipped to the piece, and the least of those is the minimum. The
    value at the chosen point is then summed directly (no cancellation)."""
    safe = np.where(total > 0, total, 1.0)
    if lo.size == 0:
        return np.zeros(n.shape[0])
    if np.all(np.diff(lo) >= 0) and np.all(np.diff(hi) >= 0):
        point = _least_point(n, lo, hi)
    else:
        point = _least_point_by_bisection(n, lo, hi)
    gap = point[:, None] - np.clip(point[:, None], lo, hi)
    result: np.ndarray = (n * gap**2).sum(axis=1) / safe
    return result


def _least_point(n: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The minimising c per cell, for bins whose low and high ends both ascend."""
    edges = np.unique(np.concatenate([lo, hi]))
    if edges.size < 2:
        return np.full(n.shape[0], edges[0])
    left, right = edges[:-1], edges[1:]
    middle = (left + right) / 2.0
    below = np.searchsorted(hi, middle, side="left")  # bins wholly below the piece
    above = np.searchsorted(lo, middle, side="right")  # bins from here are wholly above

    def prefix(weights: np.ndarray) -> np.ndarray:
        return np.concatenate([np.zeros((n.shape[0], 1)), np.cumsum(n * weights, axis=1)], axis=1)

    counts, high_sums, high_squares = prefix(np.ones_like(hi)), prefix(hi), prefix(hi**2)
    low_sums, low_squares = prefix(lo), prefix(lo**2)
    weight = counts[:, below] + counts[:, -1:] - counts[:, above]
    linear = high_sums[:, below] + low_sums[:, -1:] - low_sums[:, above]
    constant = high_squares[:, below] + low_squares[:, -1:] - low_squares[:, above]
    with np.errstate(divide="ignore", invalid="ignore"):
        stationary = np.where(weight > 0, linear / weight, left)
    candidate = np.clip(stationary, left, right)
    value = weight * candidate**2 - 2.0 * candidate * linear + constant
    best: np.ndarray = candidate[np.arange(n.shape[0]), np.argmin(value, axis=1)]
    return best


def _least_point_by_bisection(n: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The minimising c per cell by bisection on the (increasing) derivative."""
    left = np.full(n.shape[0], lo.min())
    right = np.full(n.shape[0], hi.max())
    for _ in range(_BISECTIONS):
        middle = (left + right) / 2.0
        slope = (n * (middle[:, None] - np.clip(middle[:, None], lo, hi))).sum(axis=1)
        right = np.where(slope > 0, middle, right)
        left = np.where(slope > 0, left, middle)
    result: np.ndarray = (left + right) / 2.0
    return result


def _greatest_variance(
    n: np.ndarray, lo: np.ndarray, hi: np.ndarray, total: np.ndarray
) -> np.ndarray:
    """Bins sorted by midpoint; for each split bin j (those above at their high edge,
    those below at their low edge), the best fraction of bin j at its high edge has a
    closed form (the variance is a concave quadratic in it); the best j wins."""
    safe = np.where(total > 0, total, 1.0)[:, None]
    width = hi - lo
    low_sum = n * lo
    high_sum = n * hi
    low_square = n * lo**2
    high_square = n * hi**2
    # Σ over bins below j (at low) + above j (at high), bin j itself at its low edge.
    below = np.cumsum(low_sum, axis=1) - low_sum
    above = np.cumsum(high_sum[:, ::-1], axis=1)[:, ::-1] - high_sum
    below_sq = np.cumsum(low_square, axis=1) - low_square
    above_sq = np.cumsum(high_square[:, ::-1], axis=1)[:, ::-1] - high_square
    first = below + above + low_sum
    second = below_sq + above_sq + low_square
    step = n * width
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(step > 0, (safe * (lo + hi) / 2.0 - first) / step, 0.0)
    fraction = np.clip(np.nan_to_num(fraction), 0.0, 1.0)
    s1 = first + fraction * step
    s2 = second + fraction * n * (hi**2 - lo**2)
    variance = s2 / safe - (s1 / safe) ** 2
    result: np.ndarray = variance.max(axis=1) if variance.shape[1] else np.zeros(n.shape[0])
    return result


def signed_bounds(
    answer: np.ndarray, signed_axes: dict[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From the answer of a query with signed factors (`app.pgm.queries.signed_rows`:
    axis → K, its 5K rows), the values and their guaranteed least and greatest.

    Each signed axis keeps its first K rows. A product Π (y⁺ − y⁻) expands into 2^m
    terms of non-negative parts with sign (−1)^(number of y⁻); a term lies between the
    products of its parts' ends, so the counts (non-negative) weigh those products into
    bounds: a + term adds [Π lo, Π hi], a − term adds [−Π hi, −Π lo].
    """
    answer = np.asarray(answer, dtype=np.float64)
    axes = sorted(signed_axes)

    def take(blocks: dict[int, int]) -> np.ndarray:
        index: list[slice] = [slice(None)] * answer.ndim
        for axis in axes:
            rows = signed_axes[axis]
            index[axis] = slice(blocks[axis] * rows, (blocks[axis] + 1) * rows)
        return answer[tuple(index)]

    values = take(dict.fromkeys(axes, 0))
    least = np.zeros_like(values)
    greatest = np.zeros_like(values)
    for pattern in itertools.product((0, 1), repeat=len(axes)):
        low_blocks = {axis: 1 + 2 * negative for axis, negative in zip(axes, pattern, strict=True)}
        high_blocks = {axis: block + 1 for axis, block in low_blocks.items()}
        low_part, high_part = take(low_blocks), take(high_blocks)
        if sum(pattern) % 2 == 0:
            least += low_part
            greatest += high_part
        else:
            least -= high_part
            greatest -= low_part
    least, greatest = widen(least, greatest)
    return values, np.minimum(least, values), np.maximum(greatest, values)
