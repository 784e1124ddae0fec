"""Private bins for a draft (`privq schema draft --private-bins RHO`): each binned
column's range and edges released by OpenDP's private quantile
(`app.privacy.quantiles`), so that the public schema's edges are differentially
private rather than read off the data.

Budget: RHO (zCDP) is split equally over the columns drafted from numbers, and each
column's share equally over its `bins + 3` quantile releases (composition adds ρ):

1. the quartiles, on a fixed public grid of two-digit numbers (0 and ±1.0 … 9.9 ×
   10^k; whole numbers: integers only) — quartiles lie inside the data, so the grid
   points far beyond it, whose rank scores all tie, do not draw them away;
2. the `bins − 1` inner edges, the i/bins quantiles, on a fine grid of about
   `FINE_POINTS` round steps over the quartiles widened by `SPREADS` interquartile
   spreads each way;
3. the lowest and highest edge, the `RANGE_ALPHA` and 1 − `RANGE_ALPHA` quantiles,
   sought within `EXTEND` times the gap between the two lowest (highest) inner edges
   below (above) the lowest (highest) one. Candidates beyond the data tie (no row
   lies below any of them), so keeping them few keeps the range close to the data.

No candidate is read off the data: the grids are fixed, or placed by earlier private
releases (post-processing).

A whole-number column whose private range holds at most `MAX_INTEGER_CODES` integers
becomes an integer attribute with one code per value (its inner edges placed the
range, and are not used otherwise). The other columns
are numeric with round edges at the released quantiles (whole-number edges for whole
numbers). Every private attribute has ``"clip": true``: the few values beyond the
private range count in the first or last bin instead of refusing the upload.

Only the edges and ranges are private: the rest of the draft (which columns, their
types, categories, missing values) reads the data exactly, as without the option.
A unit of `unit_rows` rows (the file's privacy unit, truncated to that many rows)
is the neighbouring distance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from app.privacy import quantiles
from app.schema.edges import nice_step, quantile_edges, tidy, whole_step

RANGE_ALPHA = 0.01
FINE_POINTS = 1000
# The fine grid reaches at most this many (coarse) interquartile spreads beyond the
# quartiles.
SPREADS = 4
# Whole numbers spanning at most this many integers get one code per value (the hours
# of a day, the days of a month).
MAX_INTEGER_CODES = 32
_COARSE_POWERS = range(-3, 13)
# Releases that place a column's range: the quartiles on the coarse grid, then its
# lowest and highest edge.
RANGE_RELEASES = 4
# The lowest (highest) edge is sought within this many gaps between the two lowest
# (highest) inner edges below (above) the lowest (highest) one.
EXTEND = 3


def coarse_grid(*, whole: bool) -> list[float]:
    """The public grid the quartiles are first placed on: 0 and ±m × 10^k for m = 1.0,
    1.1, …, 9.9 (two significant digits; whole numbers: integers only)."""
    magnitudes = sorted(
        {
            float(tidy(m * 10.0**k / 10))
            for k in _COARSE_POWERS
            for m in range(10, 100)
            if not whole or (m * 10**k) % 10 == 0
        }
    )
    return [-x for x in reversed(magnitudes)] + [0.0] + magnitudes


def _grid_step(grid: list[float], x: float) -> float:
    """The gap between `x` and the next point of `grid` (above it, or below at the top)."""
    i = grid.index(x)
    return grid[i + 1] - x if i + 1 < len(grid) else x - grid[i - 1]


def _fine_grid(low: float, high: float, *, whole: bool) -> list[float]:
    step = (
        whole_step((high - low) / FINE_POINTS) if whole else nice_step((high - low) / FINE_POINTS)
    )
    start = math.floor(low / step)
    stop = math.ceil(high / step)
    return [float(tidy(i * step)) for i in range(start, stop + 1)]


@dataclass
class PrivateEdges:
    """Draws the private edges of the columns of one draft (`columns` of them, each
    with about `bins` bins), spending at most `rho` in all."""

    rho: float
    columns: int
    bins: int
    unit_rows: int = 1
    attributes: list[str] = field(default_factory=list)

    @property
    def rho_per_release(self) -> float:
        """RHO over every release of the draft, rounded down so that the releases'
        exact sum stays within RHO."""
        releases = max(self.columns, 1) * (self.bins + RANGE_RELEASES - 1)
        share = float(Fraction(self.rho) / releases)
        while Fraction(share) * releases > Fraction(self.rho):
            share = math.nextafter(share, 0.0)
        return share

    def _quantile(self, values: np.ndarray, candidates: list[float], alpha: float) -> float:
        rho = self.rho_per_release
        return quantiles.private_quantile(values, candidates, alpha, rho, self.unit_rows)

    def attribute(self, name: str, values: np.ndarray, *, whole: bool) -> dict[str, Any]:
        """The attribute of one column drafted from numbers, with private edges."""
        self.attributes.append(name)
        grid = coarse_grid(whole=whole)
        q25, q75 = sorted(self._quantile(values, grid, alpha) for alpha in (0.25, 0.75))
        spread = q75 - q25 + _grid_step(grid, q75)
        fine = _fine_grid(q25 - SPREADS * spread, q75 + SPREADS * spread, whole=whole)
        inner = sorted(self._quantile(values, fine, i / self.bins) for i in range(1, self.bins))
        anchors = inner if len(inner) >= 2 else [q25, q75]
        step = fine[1] - fine[0]
        below = max(anchors[1] - anchors[0], step) * EXTEND
        above = max(anchors[-1] - anchors[-2], step) * EXTEND
        low = self._quantile(
            values, _fine_grid(anchors[0] - below, anchors[0], whole=whole), RANGE_ALPHA
        )
        high = self._quantile(
            values, _fine_grid(anchors[-1], anchors[-1] + above, whole=whole), 1 - RANGE_ALPHA
        )
        if whole and high - low + 1 <= MAX_INTEGER_CODES:
            return {
                "name": name,
                "type": "integer",
                "min": int(low),
                "max": int(high),
                "clip": True,
            }
        if high <= low:
            high = low + step
        edges = quantile_edges(low, high, inner, whole=whole)
        return {"name": name, "type": "numeric", "bins": edges, "clip": True}

    def record(self) -> dict[str, Any]:
        """The schema's `private_bins` field: the ρ the draft was given (an upper bound
        on what it spent) and the attributes whose edges it released."""
        return {"rho": self.rho, "attributes": list(self.attributes)}
