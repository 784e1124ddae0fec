"""Predicates that cut a bin: a binned attribute's codes split into pieces.

A bin `[35, 40)` holds some count of records, not where they lie inside it. A WHERE
clause that compares the attribute with a value inside a bin (`age > 37`) is answered
by spreading the bin's count uniformly over it — over its integers for an integer
attribute with bins — so that `age > 37` holds 3/5 of it. Exactly: the clause's cut
points split each bin into pieces on which every predicate of the clause is wholly true
or false, the WHERE region is built over pieces, and each piece weighs its share of its
bin's count. AND, OR and NOT then combine as for whole bins, and inclusion–exclusion
over the boxes of pieces stays exact for the spread counts.

Cut points are positions on the value axis: a compared value itself for a numeric
attribute; for integers, the half-way point between the last integer where a
comparison is true and the first where it is false (`x > 37` cuts at 37.5).
A piece of a continuous bin is an open interval: a comparison that holds on a single
value (`age = 40` inside a bin) holds on no piece — the spread puts no mass on a
point — while the bounds (the bin counted whole and not at all) still cover it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from app.sql.quantiles import CodeIntervals
from app.sql.spread import moment_below, share_below


def cut_points(op: str, value: float, integer: bool) -> tuple[float, ...]:
    """Where `x op value` may change from true to false along the value axis."""
    if not integer:
        return () if op in ("=", "<>") else (value,)
    if op in ("=", "<>"):
        return (value - 0.5, value + 0.5) if float(value).is_integer() else ()
    if op in ("<", ">="):
        return (math.ceil(value) - 0.5,)
    return (math.floor(value) + 0.5,)  # "<=", ">"


@dataclass(frozen=True)
class Pieces:
    """The codes of one attribute split at cut points. Piece i lies in code `code[i]`,
    holds `share[i]` of that code's count, and every value in it compares with a
    clause's constants as `point[i]` does (NaN for the "no value" code)."""

    code: np.ndarray
    share: np.ndarray
    point: np.ndarray
    size: int  # codes of the attribute, the null code included
    # The mean value of each piece's records when its bin is spread uniformly: the
    # middle of its interval (or of its integers).
    mean: np.ndarray | None = None
    # The least and greatest value each piece holds (its first and last integer).
    low: np.ndarray | None = None
    high: np.ndarray | None = None

    @property
    def count(self) -> int:
        return len(self.code)

    @property
    def full(self) -> int:
        return (1 << self.count) - 1

    @property
    def values_mask(self) -> int:
        """Every piece with a value (all but the null code's)."""
        mask = 0
        for index, value in enumerate(self.point.tolist()):
            if value == value:
                mask |= 1 << index
        return mask

    def of_codes(self, code_mask: int) -> int:
        """The pieces of the codes in `code_mask`."""
        mask = 0
        for index, code in enumerate(self.code.tolist()):
            if code_mask >> code & 1:
                mask |= 1 << index
        return mask

    def moment_rows(self, mask: int, whole: np.ndarray) -> np.ndarray:
        """Σ 1, Σ x, Σ x² per code over the pieces in `mask` (3 × codes): a whole bin's
        column of `whole`, a piece's share of its bin's records at the piece's mean."""
        rows = np.zeros((3, self.size))
        for index in range(self.count):
            if not mask >> index & 1:
                continue
            code, share = int(self.code[index]), float(self.share[index])
            if share >= 1.0 or self.mean is None:
                rows[:, code] += share * whole[:, code]
            else:
                mean = float(self.mean[index])
                rows[:, code] += share * np.array([whole[0, code], mean, mean * mean])
        return rows

    def hull(self, mask: int, low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per code with a value (`low`, `high`: its ends), the least and greatest value
        of its pieces in `mask`: where its records that satisfy the clause can lie. A
        code with no piece in `mask` keeps its own ends."""
        least, greatest = np.array(low, dtype=float), np.array(high, dtype=float)
        if self.low is None or self.high is None:
            return least, greatest
        found: dict[int, tuple[float, float]] = {}
        for index in range(self.count):
            code = int(self.code[index])
            if not mask >> index & 1 or code >= len(least):
                continue
            a, b = float(self.low[index]), float(self.high[index])
            old = found.get(code)
            found[code] = (a, b) if old is None else (min(old[0], a), max(old[1], b))
        for code, (a, b) in found.items():
            least[code], greatest[code] = max(a, least[code]), min(b, greatest[code])
        return least, greatest

    def respread(self, intervals: CodeIntervals) -> Pieces:
        """The same pieces with each bin's records spread as `intervals` say (a tilted
        bin: its measured mean's linear density, `app.sql.spread`): shares and means."""
        if intervals.tilt is None or self.low is None or self.high is None:
            return self
        shares = self.share.astype(float).copy()
        means = (self.mean if self.mean is not None else np.zeros(self.count)).astype(float)
        for index in range(self.count):
            code = int(self.code[index])
            if code >= len(intervals):
                continue
            k = intervals.slope(code)
            start, end = float(self.low[index]), float(self.high[index])
            if intervals.integer:
                start, end = start - 0.5, end + 0.5
            axis_low, axis_high = intervals.axis(code)
            width = axis_high - axis_low
            if width <= 0:
                continue
            ts, te = (start - axis_low) / width, (end - axis_low) / width
            share = share_below(k, te) - share_below(k, ts)
            shares[index] = share
            if share > 1e-12:
                within = (moment_below(k, te) - moment_below(k, ts)) / share
                means[index] = axis_low + width * min(max(within, ts), te)
        return replace(self, share=shares, mean=means)

    def weights(self, mask: int) -> np.ndarray:
        """Per code, the share of its count the pieces in `mask` hold."""
        vector = np.zeros(self.size)
        for index in range(self.count):
            if mask >> index & 1:
                vector[self.code[index]] += self.share[index]
        return vector


def split(intervals: CodeIntervals, size: int, cuts: tuple[float, ...]) -> Pieces:
    """Each code with a value split at the cuts strictly inside it; the null code (when
    `size` has one more code than `intervals`) is a piece of its own."""
    codes: list[int] = []
    shares: list[float] = []
    points: list[float] = []
    means: list[float] = []
    lows: list[float] = []
    highs: list[float] = []
    inside = sorted(set(cuts))
    for code in range(len(intervals)):
        low, high = float(intervals.low[code]), float(intervals.high[code])
        if intervals.integer:  # the integers low..high as the axis [low − ½, high + ½]
            low, high = low - 0.5, high + 0.5
        bounds = [low, *[c for c in inside if low < c < high], high]
        width = high - low
        for start, end in itertools.pairwise(bounds):
            codes.append(code)
            shares.append((end - start) / width if width > 0 else 1.0)
            # an integer piece is decided by its first integer; a bin's by its middle
            points.append(start + 0.5 if intervals.integer else (start + end) / 2)
            means.append((start + end) / 2)  # of the integers start + ½ … end − ½ too
            ends = (start + 0.5, end - 0.5) if intervals.integer else (start, end)
            lows.append(ends[0])
            highs.append(ends[1])
    for code in range(len(intervals), size):
        codes.append(code)
        shares.append(1.0)
        points.append(math.nan)
        means.append(0.0)
        lows.append(math.nan)
        highs.append(math.nan)
    return Pieces(
        np.asarray(codes),
        np.asarray(shares),
        np.asarray(points),
        size,
        np.asarray(means),
        np.asarray(lows),
        np.asarray(highs),
    )
