"""How a bin's records are spread within it, when a question needs more than its count.

Without more knowledge the spread is uniform. Where the bin's mean is measured
(within-bin means), the spread is the linear density on the bin whose mean is that
mean: on the bin's fraction t ∈ [0, 1], f(t) = 1 + k·(t − ½) with k = 12·(μ − ½), μ the
mean's place in the bin. f stays non-negative for |k| ≤ 2 (μ within the middle third
of the bin); a mean closer to an edge takes the steepest such density, k = ±2. Then

- the share of the bin's records in [0, t] is F(t) = t + k·(t² − t)/2;
- their first moment is G(t) = t²/2 + k·(t³/3 − t²/4) (so the bin's mean is
  G(1) = ½ + k/12);
- the fraction below which a share q lies solves F(t) = q (a quadratic).

An integer bin low..high is spread over the axis [low − ½, high + ½]. Pure numpy.
"""

from __future__ import annotations

import math

import numpy as np

STEEPEST = 2.0


def tilts(low: np.ndarray, high: np.ndarray, means: np.ndarray) -> np.ndarray:
    """Per bin, the slope k of the linear density whose mean is the bin's mean (0 where
    the mean is NaN or the bin has no width)."""
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    width = high - low
    with np.errstate(divide="ignore", invalid="ignore"):
        place = (np.asarray(means, dtype=float) - low) / width
    slope = 12.0 * (place - 0.5)
    return np.where(np.isfinite(slope) & (width > 0), np.clip(slope, -STEEPEST, STEEPEST), 0.0)


def share_below(k: float, t: float) -> float:
    """F(t): the share of a bin's records in its first fraction t."""
    t = min(max(t, 0.0), 1.0)
    return t + k * (t * t - t) / 2.0


def moment_below(k: float, t: float) -> float:
    """G(t): Σ of the fractions of the bin's records in its first fraction t, per record
    of the bin."""
    t = min(max(t, 0.0), 1.0)
    return t * t / 2.0 + k * (t**3 / 3.0 - t * t / 4.0)


def fraction_at(k: float, share: float) -> float:
    """The fraction t of the bin below which `share` of its records lie."""
    q = min(max(share, 0.0), 1.0)
    if abs(k) < 1e-12:
        return q
    # (k/2)·t² + (1 − k/2)·t − q = 0, the root in [0, 1]
    b = 1.0 - k / 2.0
    root = (-b + math.sqrt(max(b * b + 2.0 * k * q, 0.0))) / k
    return min(max(root, 0.0), 1.0)
