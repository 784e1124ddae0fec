"""Accounting: costs, their inverses, and the CKS ρ → (ε, δ) conversion."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from app.privacy.accounting import (
    epsilon_for_rho_exponential,
    epsilon_from_rho,
    epsilon_from_rho_loose,
    exact_rho,
    exact_rho_exponential,
    exact_rho_gaussian,
    exact_rho_laplace,
    rho_exponential,
    rho_from_epsilon,
    rho_gaussian,
    rho_laplace,
    scale_for_rho,
    sigma_for_rho,
    smallest_scale_for_rho,
)


def _cks_on_grid(rho: float, delta: float) -> float:
    """Independent evaluation: the CKS formula in α directly, on a fine grid refined twice."""

    def f(alpha: np.ndarray) -> np.ndarray:
        return rho * alpha + (
            np.log(1 / delta) + (alpha - 1) * np.log(1 - 1 / alpha) - np.log(alpha)
        ) / (alpha - 1)

    alphas = np.linspace(1.0001, 200.0, 2_000_001)
    for _ in range(3):
        values = f(alphas)
        i = int(np.argmin(values))
        lo, hi = alphas[max(i - 2, 0)], alphas[min(i + 2, alphas.size - 1)]
        alphas = np.linspace(lo, hi, 200_001)
    return float(f(alphas).min())


def test_cks_matches_independent_grid() -> None:
    expected = _cks_on_grid(0.5, 1e-6)
    assert epsilon_from_rho(0.5, 1e-6) == pytest.approx(expected, rel=1e-6)
    # published-style sanity: tight is clearly below the loose bound here
    assert epsilon_from_rho(0.5, 1e-6) < epsilon_from_rho_loose(0.5, 1e-6) - 0.3


def test_cks_matches_opendp_conversion() -> None:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    space = dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float)
    for rho in (1e-3, 0.0149, 0.5, 3.0):
        gaussian = dp.m.make_gaussian(*space, scale=1 / math.sqrt(2 * rho))
        approx = dp.c.make_zCDP_to_approxDP(gaussian)
        opendp_rho = float(gaussian.map(1.0))
        for delta in (1e-5, 1e-9):
            theirs = approx.map(1.0).epsilon(delta)
            assert epsilon_from_rho(opendp_rho, delta) == pytest.approx(theirs, rel=1e-9)


@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-9, 1e-12])
def test_tight_never_above_loose(delta: float) -> None:
    for rho in np.geomspace(1e-7, 1e3, 41):
        tight = epsilon_from_rho(float(rho), delta)
        assert 0 <= tight <= epsilon_from_rho_loose(float(rho), delta) + 1e-12


def test_epsilon_increasing_in_rho() -> None:
    values = [epsilon_from_rho(float(r), 1e-9) for r in np.geomspace(1e-6, 10, 50)]
    assert all(a < b for a, b in itertools.pairwise(values))


@pytest.mark.parametrize("epsilon,delta", [(0.1, 1e-9), (1.0, 1e-9), (1.0, 1e-6), (8.0, 1e-5)])
def test_rho_from_epsilon_inverts(epsilon: float, delta: float) -> None:
    rho = rho_from_epsilon(epsilon, delta)
    assert epsilon_from_rho(rho, delta) <= epsilon
    assert epsilon_from_rho(rho, delta) == pytest.approx(epsilon, rel=1e-9)
    assert epsilon_from_rho(rho * (1 + 1e-6), delta) > epsilon


def test_adult_bench_budget() -> None:
    # ε = 1, δ = 1e-9 — the AIM benchmark's budget; the tight conversion buys more ρ
    rho = rho_from_epsilon(1.0, 1e-9)
    assert rho > 0.0149
    assert epsilon_from_rho_loose(rho, 1e-9) > 1.0


def test_gaussian_round_trips() -> None:
    for rho in (1e-4, 0.1, 2.0):
        for k in (1, 3, 20):
            sigma = sigma_for_rho(rho, k)
            assert k * rho_gaussian(sigma) == pytest.approx(rho, rel=1e-12)
    assert rho_gaussian(2.0, sensitivity=3.0) == pytest.approx(9 / 8)


def test_laplace_round_trips() -> None:
    assert rho_laplace(2.0) == pytest.approx(0.125)
    for rho in (1e-4, 0.1, 2.0):
        for k in (1, 7):
            assert k * rho_laplace(scale_for_rho(rho, k)) == pytest.approx(rho, rel=1e-12)


def test_exponential_cost() -> None:
    assert rho_exponential(2.0) == pytest.approx(0.5)
    assert rho_exponential(epsilon_for_rho_exponential(0.037)) == pytest.approx(0.037, rel=1e-12)


def test_exact_costs_are_the_rationals_of_the_floats_used() -> None:
    assert exact_rho_gaussian(2.0, 3) == Fraction(3, 8)
    assert exact_rho_laplace(0.5) == Fraction(2)
    assert exact_rho_exponential(2.0) == Fraction(1, 2)
    assert exact_rho("gaussian", 4.0, 2) == exact_rho("laplace", 4.0, 2) == Fraction(1, 16)
    # 0.1 is not a binary fraction: its exact cost is not 50, and the float cost rounds it.
    exact = exact_rho_gaussian(0.1)
    assert exact != 50 and float(exact) == pytest.approx(rho_gaussian(0.1), rel=1e-15)
    assert float(exact_rho_exponential(0.3)) == pytest.approx(rho_exponential(0.3), rel=1e-15)
    with pytest.raises(ValueError):
        exact_rho("uniform", 1.0)


def test_smallest_scale_fits_its_share_and_the_next_float_down_does_not() -> None:
    for units, k in itertools.product((1, 37, 5 * 10**10, 10**12, 3 * 10**12 + 7), (1, 3, 24)):
        rho = Fraction(units, 10**12)
        scale = smallest_scale_for_rho(rho, k)
        assert exact_rho_gaussian(scale, k) <= rho
        assert exact_rho_gaussian(math.nextafter(scale, 0.0), k) > rho


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError):
        rho_gaussian(0.0)
    with pytest.raises(ValueError):
        epsilon_from_rho(0.1, 1.5)
    with pytest.raises(ValueError):
        sigma_for_rho(-1.0)
    assert epsilon_from_rho(0.0, 1e-9) == 0.0


def test_rho_from_epsilon_ends_when_the_answer_is_next_to_zero() -> None:
    # ε far below what any representable ρ > 0 gives: the bisection runs down to
    # adjacent floats near zero, where rtol·hi underflows; it must stop there.
    rho = rho_from_epsilon(1e-300, 1e-300)
    assert rho == 0.0 or epsilon_from_rho(rho, 1e-300) <= 1e-300
