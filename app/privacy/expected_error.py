"""Expected error of a noisy count: E|Z| of the discrete noise privq draws.

A dry run tells an analyst how accurate a measurement would be before any ρ is spent.
The noise on each count is OpenDP's discrete Gaussian (scale σ: P(k) ∝ exp(−k²/2σ²))
or discrete Laplace (scale b: P(k) ∝ exp(−|k|/b)), so the expected absolute error of
one cell is exactly

- discrete Laplace: E|Z| = 2p / (1 − p²) with p = exp(−1/b) (a geometric series);
- discrete Gaussian: E|Z| = Σ|k|·e^(−k²/2σ²) / Σ e^(−k²/2σ²), summed over |k| ≤ 40σ + 10
  (the tail beyond is below 1e-300 of the mass). For σ > 1e4 the sum would be long and
  agrees with the continuous σ·√(2/π) to far better than a count's precision.

A marginal's expected L1 error is its cells times the per-cell error: linearity of
expectation, whatever the counts are. Errors are in counts, never in fractions of the
(private) number of records.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

Noise = Literal["gaussian", "laplace"]

CONTINUOUS_GAUSSIAN_ABOVE = 1e4


def discrete_laplace_abs_mean(scale: float) -> float:
    """E|Z| for the discrete Laplace with scale b."""
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    p = math.exp(-1.0 / scale)
    # 2p/(1 − p²) = 1/sinh(1/b): the second form keeps precision when p is close to 1.
    return 1.0 / math.sinh(1.0 / scale) if p > 0.5 else 2.0 * p / (1.0 - p * p)


def discrete_gaussian_abs_mean(sigma: float) -> float:
    """E|Z| for the discrete Gaussian with scale σ."""
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be a positive finite number, got {sigma!r}")
    if sigma > CONTINUOUS_GAUSSIAN_ABOVE:
        return sigma * math.sqrt(2.0 / math.pi)
    bound = math.ceil(40.0 * sigma) + 10
    k = np.arange(1, bound + 1, dtype=float)
    weights = np.exp(-(k * k) / (2.0 * sigma * sigma))
    # Symmetric: Σ_{k≠0} = 2 Σ_{k≥1}; the k = 0 term has weight 1 and |k| = 0.
    return float(2.0 * np.sum(k * weights) / (1.0 + 2.0 * np.sum(weights)))


def expected_abs_error(noise: Noise, scale: float) -> float:
    """E|Z| per cell for `noise` at `scale` (σ for Gaussian, b for Laplace)."""
    if noise == "gaussian":
        return discrete_gaussian_abs_mean(scale)
    if noise == "laplace":
        return discrete_laplace_abs_mean(scale)
    raise ValueError(f"unknown noise {noise!r}")
