"""Selection: OpenDP's Gumbel noisy-max is the exponential mechanism and costs ε²/8."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from app.privacy.accounting import rho_exponential
from app.privacy.selection import exponential_mechanism, selection_rho


def test_frequencies_match_exponential_weights() -> None:
    scores = np.array([0.0, 1.5, 3.0, 2.2])
    epsilon, sensitivity = 1.0, 0.5  # weights ∝ exp(score)
    draws = 5_000
    picks = np.array([exponential_mechanism(scores, epsilon, sensitivity) for _ in range(draws)])
    observed = np.bincount(picks, minlength=scores.size)
    weights = np.exp(epsilon * scores / (2 * sensitivity))
    expected = draws * weights / weights.sum()
    assert chisquare(observed, expected).pvalue > 1e-4
    # and clearly not uniform / not argmax-only
    assert observed[0] > 0 and observed[2] < draws


def test_huge_gap_is_deterministic() -> None:
    scores = np.zeros(200)
    scores[137] = 1e6
    assert all(exponential_mechanism(scores, 1.0, 1.0) == 137 for _ in range(50))


def test_float_scores_and_scale() -> None:
    # fractional, large-magnitude scores work (exact conversion of floats inside OpenDP)
    scores = np.array([1e9 + 0.25, 1e9 + 0.75, -3.5])
    assert exponential_mechanism(scores, 1e-3, 1.0) in (0, 1, 2)


@pytest.mark.parametrize("epsilon,sensitivity", [(0.1, 1.0), (1.0, 7.0), (2.5, 0.3)])
def test_opendp_map_is_epsilon_squared_over_8(epsilon: float, sensitivity: float) -> None:
    assert selection_rho(epsilon, sensitivity) == pytest.approx(rho_exponential(epsilon), rel=1e-9)


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError):
        exponential_mechanism(np.array([]), 1.0, 1.0)
    with pytest.raises(ValueError):
        exponential_mechanism(np.array([1.0, np.inf]), 1.0, 1.0)
    assert exponential_mechanism(np.array([5.0]), 1.0, 1.0) == 0
