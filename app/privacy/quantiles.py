"""A private quantile: OpenDP's `make_private_quantile` at a given ρ.

`private_quantile(values, candidates, alpha, rho, unit_rows)` releases one of the
`candidates` near the α-quantile of `values` (Smith 2011's exponential mechanism over
rank scores, which OpenDP samples with report-noisy-max under the
`ZeroConcentratedDivergence` output measure, from its cryptographic RNG). Neighbouring
inputs differ by one added or removed privacy unit of at most `unit_rows` rows, which
is OpenDP's `symmetric_distance` at d_in = `unit_rows`.

The noise scale is the smallest OpenDP's binary search finds whose privacy map at that
d_in is at most `rho`; the map of the measurement that releases is checked again
before anything is released (`BudgetOverspent` otherwise). The candidates are public:
the caller picks them without looking at the values (a fixed grid, or one placed by
earlier private releases).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from app.privacy.accounting import BudgetOverspent
from app.privacy.noise import opendp_prelude


def _measurement(candidates: list[float], alpha: float, scale: float) -> Any:
    dp = opendp_prelude()
    return dp.m.make_private_quantile(
        dp.vector_domain(dp.atom_domain(T=float, nan=False)),
        dp.symmetric_distance(),
        dp.zero_concentrated_divergence(),
        candidates=candidates,
        alpha=alpha,
        scale=scale,
    )


@lru_cache(maxsize=1024)
def _scale(alpha: float, rho: float, unit_rows: int) -> float:
    """The smallest scale OpenDP's binary search finds with a map of at most `rho`. The
    map does not depend on the candidates, so the search runs on two of them (building
    the measurement costs time in their number); the caller checks the map again on
    the measurement it releases with."""
    dp = opendp_prelude()
    return float(
        dp.binary_search_param(
            lambda s: _measurement([0.0, 1.0], alpha, s), d_in=unit_rows, d_out=rho, T=float
        )
    )


def quantile_measurement(
    candidates: Sequence[float], alpha: float, rho: float, unit_rows: int = 1
) -> Any:
    """The OpenDP measurement that releases the α-quantile at cost at most `rho`
    (ρ-zCDP for units of `unit_rows` rows)."""
    points = [float(c) for c in candidates]
    if not points or any(not math.isfinite(c) for c in points):
        raise ValueError("candidates must be finite numbers, at least one")
    if any(b <= a for a, b in itertools.pairwise(points)):
        raise ValueError("candidates must be strictly increasing")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError("alpha must lie in [0, 1]")
    if not (rho > 0 and math.isfinite(rho)):
        raise ValueError("rho must be positive and finite")
    if unit_rows < 1:
        raise ValueError("unit_rows must be at least 1")
    measurement = _measurement(points, alpha, _scale(alpha, float(rho), unit_rows))
    spent = float(measurement.map(unit_rows))
    if spent > rho:
        raise BudgetOverspent(f"a private quantile would spend rho={spent} of its {rho}")
    return measurement


def private_quantile(
    values: np.ndarray,
    candidates: Sequence[float],
    alpha: float,
    rho: float,
    unit_rows: int = 1,
) -> float:
    """One candidate near the α-quantile of `values`, released at cost at most `rho`."""
    data = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(data)):
        raise ValueError("values must be finite")
    measurement = quantile_measurement(candidates, alpha, rho, unit_rows)
    return float(measurement(data.tolist()))
