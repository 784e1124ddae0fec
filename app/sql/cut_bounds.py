"""Guaranteed bounds when the WHERE clause cuts a bin (`app.sql.pieces`).

The estimate spreads a cut bin's records uniformly within it; the bounds do not trust
that. Two bound plans (`SqlPlan.bound_plan`) count the bins wholly inside the clause
(lower) and the bins wholly or partly inside it (upper). The lower plan's records all
satisfy the clause; of the records only the upper plan holds, any number may — none,
some, or all of the cut bin. Each of those lies in the part of its bin the clause can
keep: the hull of its pieces that some box of the clause keeps (`narrowed`), or the
whole bin when the clause cuts another attribute.

Per group cell, with L the lower plan's sums and U − L the uncertain records':

- COUNT(*): [L's count, U's count]; COUNT(a) the same over records with a value.
- SUM: each certain record between its low and high end, each uncertain one between
  min(low, 0) and max(high, 0) (left out, it adds 0).
- AVG: certain records' sum S over their count N, plus m uncertain records; a set of
  m of them sums at least max(m·a, T − (N_u − m)·b) (T their low ends' sum, a and b
  the least and greatest low end). Over m, the least average is at m = 0, m = N_u or
  where the two terms meet; the greatest the same with the high ends.
- VAR, STDDEV: from 0 up to (b − a)²/4 — the widest spread of values in [a, b], a
  and b the ends of the codes the upper plan holds records of — times n/(n − 1) for
  the sample forms, n at least the certain count and 2.

Every pair is widened a hair and holds the estimate; NaN where the estimate is NULL.
Pure numpy over the totals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from app.pgm.bin_bounds import widen
from app.sql.results import BOUNDED, AggregateSpec, Totals

if TYPE_CHECKING:
    from app.sql.compile import SqlPlan

_NONE = 1e-9  # a count below this holds no record


@dataclass(frozen=True)
class CutTotals:
    """The totals of the lower and upper bound plans, per group cell."""

    low: Totals
    high: Totals


def cut_bounds(
    plan: SqlPlan, spec: AggregateSpec, cut: CutTotals, estimate: np.ndarray, cells: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """One aggregate's [least, greatest] per group cell in `cells` (whose estimates are
    `estimate`); None for an aggregate without bounds (quantiles: their `bins`)."""
    attribute = spec.attribute
    lower, upper = cut.low, cut.high
    if spec.function == "count":
        if attribute is None:
            least, greatest = lower.count[cells], upper.count[cells]
        else:
            least = lower.sums[attribute][cells, 0]
            greatest = upper.sums[attribute][cells, 0]
        least, greatest = np.maximum(least, 0.0), np.maximum(greatest, 0.0)
        known = np.isfinite(estimate)
        return (
            np.where(known, np.minimum(least, estimate), np.nan),
            np.where(known, np.maximum(greatest, estimate), np.nan),
        )
    if attribute is None or spec.function not in BOUNDED:
        return None
    low, high = plan.bound_plan(upper=True).codes[attribute].value_ranges
    with np.errstate(divide="ignore", invalid="ignore"):
        if spec.function == "sum":
            least, greatest = _sum(lower.edges[attribute][cells], upper.edges[attribute][cells])
        elif spec.function == "avg":
            least, greatest = _average(
                lower.sums[attribute][cells, 0],
                upper.sums[attribute][cells, 0],
                lower.edges[attribute][cells],
                upper.edges[attribute][cells],
                (low, high),
            )
        else:
            least, greatest = _variance(
                spec.function,
                lower.sums[attribute][cells, 0],
                upper.histograms[attribute][cells],
                (low, high),
            )
    least, greatest = widen(np.asarray(least, dtype=float), np.asarray(greatest, dtype=float))
    known = np.isfinite(estimate) & np.isfinite(least) & np.isfinite(greatest)
    return (
        np.where(known, np.minimum(least, estimate), np.nan),
        np.where(known, np.maximum(greatest, estimate), np.nan),
    )


def _sum(lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edge sums (cells × 4: Σ low, Σ high, Σ min(low, 0), Σ max(high, 0))."""
    uncertain = upper - lower
    return lower[:, 0] + np.minimum(uncertain[:, 2], 0.0), lower[:, 1] + np.maximum(
        uncertain[:, 3], 0.0
    )


def _average(
    certain: np.ndarray,
    possible: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    ends: tuple[np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    count = np.maximum(certain, 0.0)
    extra = np.maximum(possible - certain, 0.0)
    low, high = ends
    least = _extreme_average(
        count, extra, lower[:, 0], upper[:, 0] - lower[:, 0], float(low.min()), float(low.max())
    )
    # The greatest average is the least one of the values negated.
    greatest = -_extreme_average(
        count,
        extra,
        -lower[:, 1],
        -(upper[:, 1] - lower[:, 1]),
        -float(high.max()),
        -float(high.min()),
    )
    return least, greatest


def _extreme_average(
    count: np.ndarray,
    extra: np.ndarray,
    total: np.ndarray,
    uncertain: np.ndarray,
    a: float,
    b: float,
) -> np.ndarray:
    """The least (S + Σ of m of the uncertain values) / (N + m) over 0 ≤ m ≤ N_u, each
    uncertain value in [a, b] and all of them summing to `uncertain`."""
    uncertain = np.clip(uncertain, extra * a, extra * b)
    meet = np.where(b > a, (extra * b - uncertain) / max(b - a, 1e-300), 0.0)
    best = np.full(count.shape, np.inf)
    for m in (np.zeros_like(extra), extra, np.clip(meet, 0.0, extra)):
        chosen = np.maximum(m * a, uncertain - (extra - m) * b)
        size = count + m
        value = np.where(size > _NONE, (total + chosen) / np.where(size > _NONE, size, 1.0), np.inf)
        best = np.minimum(best, value)
    return np.where(np.isfinite(best), best, np.nan)


def _variance(
    function: str, certain: np.ndarray, histogram: np.ndarray, ends: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    low, high = ends
    held = histogram[:, : len(low)] > _NONE
    a = np.where(held, low, np.inf).min(axis=1)
    b = np.where(held, high, -np.inf).max(axis=1)
    spread = np.where(held.any(axis=1), (b - a) ** 2 / 4.0, np.nan)
    if function.endswith("_samp"):
        n = np.maximum(certain, 2.0)
        spread = spread * n / (n - 1.0)
    if function.startswith("stddev"):
        spread = np.sqrt(spread)
    return np.zeros_like(spread), spread
