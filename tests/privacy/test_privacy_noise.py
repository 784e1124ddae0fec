"""Noise: OpenDP's discrete Gaussian / Laplace — support, moments, privacy maps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.privacy import noise
from app.privacy.accounting import rho_gaussian, rho_laplace


def _discrete_gaussian_variance(sigma: float) -> float:
    k = np.arange(-60 * math.ceil(sigma), 60 * math.ceil(sigma) + 1, dtype=float)
    weights = np.exp(-(k**2) / (2 * sigma**2))
    return float((k**2 * weights).sum() / weights.sum())


def _variance_tolerance(variance: float, n: int, fourth_moment: float) -> float:
    # 6 standard errors of the sample variance: sd ≈ √((μ4 − σ⁴)/n)
    return 6 * math.sqrt((fourth_moment - variance**2) / n)


def test_discrete_gaussian_moments() -> None:
    sigma, n = 3.0, 10_000
    counts = np.arange(n, dtype=np.int64) * 7 + 1_000
    noisy = noise.discrete_gaussian(counts, sigma)
    assert noisy.dtype == np.int64 and noisy.shape == counts.shape
    err = (noisy - counts).astype(float)
    variance = _discrete_gaussian_variance(sigma)
    # discrete Gaussian with σ=3 is within 1e-6 of σ² but computed exactly anyway
    assert abs(err.mean()) < 6 * math.sqrt(variance / n)
    k = np.arange(-200, 201, dtype=float)
    w = np.exp(-(k**2) / (2 * sigma**2))
    mu4 = float((k**4 * w).sum() / w.sum())
    assert abs(err.var() - variance) < _variance_tolerance(variance, n, mu4)
    assert len(np.unique(err)) > 10  # genuinely noisy, not a constant shift


def test_discrete_laplace_moments() -> None:
    b, n = 2.5, 10_000
    counts = np.full((100, 100), 50, dtype=np.int64)
    noisy = noise.discrete_laplace(counts, b)
    assert noisy.dtype == np.int64 and noisy.shape == (100, 100)
    err = (noisy - counts).ravel().astype(float)
    q = math.exp(-1 / b)
    variance = 2 * q / (1 - q) ** 2
    k = np.arange(-400, 401, dtype=float)
    w = q ** np.abs(k)
    assert float((k**2 * w).sum() / w.sum()) == pytest.approx(variance, rel=1e-9)
    mu4 = float((k**4 * w).sum() / w.sum())
    assert abs(err.mean()) < 6 * math.sqrt(variance / n)
    assert abs(err.var() - variance) < _variance_tolerance(variance, n, mu4)


def test_privacy_maps_match_accounting() -> None:
    for sigma in (0.5, 3.0, 40.0):
        assert noise.privacy_map("gaussian", sigma) == pytest.approx(rho_gaussian(sigma), rel=1e-12)
    for b in (0.5, 3.0):
        epsilon = noise.privacy_map("laplace", b)
        assert epsilon == pytest.approx(1 / b, rel=1e-12)
        assert epsilon**2 / 2 == pytest.approx(rho_laplace(b), rel=1e-12)


def test_large_counts_do_not_overflow() -> None:
    big = np.array([2**40, 2**50, 3 * 10**12], dtype=np.int64)
    noisy = noise.discrete_gaussian(big, 1.0)
    assert noisy.dtype == np.int64
    assert np.all(np.abs(noisy - big) < 50)


def test_chunked_path_matches_shape_and_order() -> None:
    # long vector: split over threads; each cell must keep its own count
    counts = (np.arange(50_000, dtype=np.int64) * 1000).reshape(50, 1000)
    noisy = noise.discrete_gaussian(counts, 1.0)
    assert noisy.shape == counts.shape
    assert np.all(np.abs(noisy - counts) < 20)


def test_rejects_non_integer_counts() -> None:
    with pytest.raises(TypeError):
        noise.discrete_gaussian(np.array([1.5, 2.0]), 1.0)
    with pytest.raises(ValueError):
        noise.discrete_laplace(np.array([1, 2]), 0.0)
