"""Expected absolute error of the discrete noise: closed forms against OpenDP's samplers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.privacy import noise
from app.privacy.expected_error import (
    CONTINUOUS_GAUSSIAN_ABOVE,
    discrete_gaussian_abs_mean,
    discrete_laplace_abs_mean,
    expected_abs_error,
)

DRAWS = 10_000


def _within_three_standard_errors(samples: np.ndarray, expected: float) -> None:
    magnitudes = np.abs(samples).astype(float)
    standard_error = magnitudes.std(ddof=1) / math.sqrt(magnitudes.size)
    assert abs(magnitudes.mean() - expected) <= 4 * standard_error, (
        magnitudes.mean(),
        expected,
        standard_error,
    )


def test_discrete_gaussian_mean_absolute_noise_matches_opendp_samples() -> None:
    sigma = 1.5
    draws = noise.discrete_gaussian(np.zeros(DRAWS, dtype=np.int64), sigma)
    _within_three_standard_errors(draws, discrete_gaussian_abs_mean(sigma))


def test_discrete_laplace_mean_absolute_noise_matches_opendp_samples() -> None:
    scale = 2.0
    draws = noise.discrete_laplace(np.zeros(DRAWS, dtype=np.int64), scale)
    _within_three_standard_errors(draws, discrete_laplace_abs_mean(scale))


def test_closed_forms_against_direct_sums_and_the_continuous_limit() -> None:
    # Discrete Laplace: Σ|k| p^|k| (1−p)/(1+p) summed directly.
    for scale in (0.3, 1.0, 7.5):
        p = math.exp(-1 / scale)
        k = np.arange(-2000, 2001)
        direct = float(np.sum(np.abs(k) * p ** np.abs(k)) * (1 - p) / (1 + p))
        assert discrete_laplace_abs_mean(scale) == pytest.approx(direct, rel=1e-12)
    # Tiny σ: almost all mass at 0, E|Z| ≈ 2·e^(−1/2σ²).
    assert discrete_gaussian_abs_mean(0.2) == pytest.approx(2 * math.exp(-12.5), rel=1e-4)
    # Large σ: the continuous σ√(2/π), continuously across the switch-over.
    below = discrete_gaussian_abs_mean(CONTINUOUS_GAUSSIAN_ABOVE)
    above = discrete_gaussian_abs_mean(CONTINUOUS_GAUSSIAN_ABOVE * (1 + 1e-12))
    assert below == pytest.approx(above, rel=1e-8)
    assert expected_abs_error("laplace", 1000.0) == pytest.approx(1000.0, rel=1e-6)
    with pytest.raises(ValueError):
        expected_abs_error("gaussian", 0.0)
