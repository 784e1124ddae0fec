"""Sensitivity k (rows per privacy unit) in every cost: measurements, rounds, AIM and MWEM.

Neighbouring datasets differ by one unit of at most k rows, so a marginal has L1 and L2
sensitivity k: Gaussian σ costs k²/(2σ²), Laplace b costs (k/b)²/2, the same ρ buys k
times the σ, and a selection keeps its ε with its scores' sensitivity multiplied by k.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from privacy_fixtures import ALL_PAIRS, DOMAIN, FAST, synthetic

from app.privacy import noise, selection
from app.privacy.accounting import (
    check_sensitivity,
    exact_rho,
    exact_rho_gaussian,
    exact_rho_laplace,
    rho_gaussian,
    rho_laplace,
    scale_for_rho,
    sigma_for_rho,
    smallest_scale_for_rho,
)
from app.privacy.mechanisms import MechanismOptions, Round, RoundsMismatch, run_aim, run_mwem
from app.privacy.mechanisms.aim import aim_schedule
from app.privacy.mechanisms.budget import exact_round_cost, round_cost, split_round
from app.privacy.mechanisms.rounds import check_replayed
from app.privacy.mechanisms.workload import candidate_weights, normalise_workload


@pytest.mark.parametrize("sigma", [0.7, 3.0, 12.345, 1e6])
@pytest.mark.parametrize("marginals", [1, 4])
def test_exact_costs_are_k_squared_times_the_row_level_ones(sigma: float, marginals: int) -> None:
    for k in (1, 2, 3, 10):
        assert exact_rho_gaussian(sigma, marginals, k) == k * k * exact_rho_gaussian(
            sigma, marginals
        )
        assert exact_rho_laplace(sigma, marginals, k) == k * k * exact_rho_laplace(sigma, marginals)
        assert (
            exact_rho("gaussian", sigma, marginals, k)
            == Fraction(marginals * k * k, 2) / Fraction(sigma) ** 2
        )
    assert rho_gaussian(sigma, 3) == pytest.approx(9 * rho_gaussian(sigma), rel=1e-15)
    assert rho_laplace(sigma, 3) == pytest.approx(9 * rho_laplace(sigma), rel=1e-15)


def test_laplace_cost_is_half_the_square_of_k_over_b() -> None:
    # b = 2 on a unit of 3 rows is (3/2)-DP, so (3/2)²/2 = 9/8 ρ.
    assert exact_rho_laplace(2.0, 1, 3) == Fraction(9, 8)
    assert rho_laplace(2.0, 3) == 9 / 8


@pytest.mark.parametrize("rho", [Fraction(1, 10), Fraction(7, 3), Fraction(1, 10**9)])
@pytest.mark.parametrize("marginals", [1, 3, 17])
def test_the_same_rho_buys_k_times_the_scale(rho: Fraction, marginals: int) -> None:
    row = smallest_scale_for_rho(rho, marginals)
    unit = smallest_scale_for_rho(rho, marginals, 3)
    assert unit == pytest.approx(3 * row, rel=1e-15)
    # its exact cost at k = 3 fits the ρ; the row-level scale's would be 9 times over
    assert exact_rho_gaussian(unit, marginals, 3) <= rho
    assert exact_rho_gaussian(row, marginals, 3) == 9 * exact_rho_gaussian(row, marginals)
    assert exact_rho_gaussian(row, marginals, 3) > 8 * rho
    assert sigma_for_rho(float(rho), marginals, 3) == pytest.approx(
        3 * sigma_for_rho(float(rho), marginals), rel=1e-15
    )
    assert scale_for_rho(float(rho), marginals, 3) == pytest.approx(
        3 * scale_for_rho(float(rho), marginals), rel=1e-15
    )


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None, "3"])
def test_a_sensitivity_must_be_a_positive_integer(bad: Any) -> None:
    with pytest.raises(ValueError, match="sensitivity"):
        check_sensitivity(bad)
    with pytest.raises(ValueError, match="sensitivity"):
        exact_rho_gaussian(1.0, 1, bad)
    with pytest.raises(ValueError, match="sensitivity"):
        MechanismOptions(sensitivity=bad)


def test_opendp_agrees_at_input_distance_k() -> None:
    # OpenDP's own maps of the same measurement at d_in = k: ρ = k²/(2σ²), ε = k/b.
    assert noise.privacy_map("gaussian", 4.0, 3) == pytest.approx(
        float(exact_rho_gaussian(4.0, 1, 3)), rel=1e-9
    )
    assert noise.privacy_map("laplace", 2.0, 3) == pytest.approx(1.5, rel=1e-9)
    # A selection at ε over scores of sensitivity k·Δ costs ε²/8 whatever k is.
    assert selection.selection_rho(0.5, 3.0) == pytest.approx(0.5**2 / 8, rel=1e-9)


@pytest.mark.parametrize("rho_round", [0.01, 0.3, 2.0])
def test_a_round_of_given_rho_gets_k_times_sigma_and_the_same_epsilon(rho_round: float) -> None:
    sigma1, epsilon1 = split_round(rho_round, 0.9)
    sigma3, epsilon3 = split_round(rho_round, 0.9, 3)
    assert sigma3 == pytest.approx(3 * sigma1, rel=1e-14)
    assert epsilon3 == pytest.approx(epsilon1, rel=1e-14)
    assert round_cost(sigma3, epsilon3, 3) <= rho_round
    assert round_cost(sigma3, epsilon3, 3) == pytest.approx(rho_round, rel=1e-12)
    assert exact_round_cost(sigma3, epsilon3, 3) == (
        Fraction(9, 2) / Fraction(sigma3) ** 2 + Fraction(epsilon3) ** 2 / 8
    )
    # The same σ and ε at k = 1 would be priced 9 times lower on the measurement.
    assert round_cost(sigma3, 0.0, 3) == pytest.approx(9 * round_cost(sigma3, 0.0), rel=1e-15)


def test_aim_schedule_scales_sigma_by_k() -> None:
    t1, sigma1, epsilon1 = aim_schedule(DOMAIN, 0.5, MechanismOptions())
    t3, sigma3, epsilon3 = aim_schedule(DOMAIN, 0.5, MechanismOptions(sensitivity=3))
    assert t1 == t3
    assert sigma3 == pytest.approx(3 * sigma1, rel=1e-14)
    assert epsilon3 == pytest.approx(epsilon1, rel=1e-14)


def test_rounds_carry_their_sensitivity_and_are_priced_with_it() -> None:
    values = np.arange(6)
    r = Round(0, "select+measure", ("a", "b"), 5.0, 0.25, round_cost(5.0, 0.25, 3), values)
    assert r.sensitivity == 1  # the default, which rounds stored before units had
    r3 = Round(
        0, "select+measure", ("a", "b"), 5.0, 0.25, round_cost(5.0, 0.25, 3), values, sensitivity=3
    )
    assert r3.exact_cost == Fraction(9, 50) + Fraction(1, 128)
    again = Round.from_dict(r3.to_dict())
    assert again.sensitivity == 3 and again.exact_cost == r3.exact_cost
    old = r3.to_dict()
    del old["sensitivity"]
    assert Round.from_dict(old).sensitivity == 1
    check_replayed([r3], 3)
    with pytest.raises(RoundsMismatch, match="sensitivity"):
        check_replayed([r3], 1)
    # A k = 1 round whose recorded ρ is the k = 3 price does not match its own price.
    with pytest.raises(RoundsMismatch, match="costs"):
        check_replayed([r], 1)


DRAW, SELECT = noise.discrete_gaussian, selection.exponential_mechanism


class Spy:
    """Records the σ of every Gaussian draw and the (ε, Δ) of every selection."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sigmas: list[float] = []
        self.selections: list[tuple[float, float]] = []
        draw, select = DRAW, SELECT  # the real ones, not an earlier spy's

        def drawing(counts: np.ndarray, sigma: float) -> np.ndarray:
            self.sigmas.append(sigma)
            return draw(counts, sigma)

        def selecting(scores: np.ndarray, epsilon: float, sensitivity: float) -> int:
            self.selections.append((epsilon, sensitivity))
            return select(scores, epsilon, sensitivity)

        monkeypatch.setattr(noise, "discrete_gaussian", drawing)
        monkeypatch.setattr(selection, "exponential_mechanism", selecting)


def test_mwem_rounds_scale_sigma_and_selection_sensitivity_by_k(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rho, rounds = 0.6, 4
    runs = {}
    for k in (1, 3):
        spy = Spy(monkeypatch)
        options = MechanismOptions(rounds=rounds, sensitivity=k, **FAST)
        result = run_mwem(DOMAIN, synthetic(4), rho, ALL_PAIRS, options=options)
        runs[k] = (spy, result)
        assert len(result.rounds) == rounds
        assert spy.sigmas == [r.sigma for r in result.rounds]
        assert [e for e, _ in spy.selections] == [r.epsilon for r in result.rounds]
        for r in result.rounds:
            assert r.sensitivity == k
            assert r.selection is not None and r.selection.sensitivity == k
            # the round's ρ: α on k²/(2σ²), 1 − α on ε²/8
            assert rho_gaussian(r.sigma, k) == pytest.approx(0.9 * rho / rounds, rel=1e-9)
        assert [d for _, d in spy.selections] == [float(k)] * rounds
        spent = sum((r.exact_cost for r in result.rounds), Fraction(0))
        # within float rounding of the charge (the service runs on a hair less than it)
        assert abs(spent - Fraction(rho)) <= Fraction(rho) * Fraction(1, 10**12)
    (spy1, _), (spy3, _) = runs[1], runs[3]
    for s1, s3 in zip(spy1.sigmas, spy3.sigmas, strict=True):
        assert s3 == pytest.approx(3 * s1, rel=1e-12)
    for (e1, _), (e3, _) in zip(spy1.selections, spy3.selections, strict=True):
        assert e3 == pytest.approx(e1, rel=1e-12)


def test_aim_prices_every_round_at_k(monkeypatch: pytest.MonkeyPatch) -> None:
    rho, k = 2.0, 3
    workload = ALL_PAIRS[:4]
    spy = Spy(monkeypatch)
    options = MechanismOptions(sensitivity=k, rounds=12, **FAST)
    result = run_aim(DOMAIN, synthetic(5), rho, workload, options=options)
    weights = candidate_weights(DOMAIN, normalise_workload(DOMAIN, workload))
    assert spy.sigmas == [r.sigma for r in result.rounds]
    selected = [r for r in result.rounds if r.kind == "select+measure"]
    assert selected and len(spy.selections) == len(selected)
    for r, (epsilon, sensitivity) in zip(selected, spy.selections, strict=True):
        assert r.sensitivity == k and epsilon == r.epsilon
        # k times the largest candidate weight: a multiple of k of some weight w_r
        assert r.selection is not None and r.selection.sensitivity == sensitivity
        assert any(sensitivity == pytest.approx(k * w) for w in weights.values())
    for r in result.rounds:
        assert r.sensitivity == k
        assert r.rho == pytest.approx(round_cost(r.sigma, r.epsilon, k), rel=1e-15)
    # The whole charge at k, never more: exactly what the service's ledger checks.
    spent = sum((r.exact_cost for r in result.rounds), Fraction(0))
    assert spent <= Fraction(rho) * (1 + Fraction(1, 10**12))
    assert spent > Fraction(rho) * Fraction(999, 1000)
    # The same float σ's at k = 1 would have cost 9 times less on their measurements.
    measured = sum((exact_rho_gaussian(r.sigma) for r in result.rounds), Fraction(0))
    assert sum((exact_rho_gaussian(r.sigma, 1, k) for r in result.rounds), Fraction(0)) == (
        9 * measured
    )


def test_a_resumed_run_refuses_rounds_of_another_sensitivity() -> None:
    options = MechanismOptions(rounds=2, sensitivity=3, **FAST)
    result = run_mwem(DOMAIN, synthetic(6), 0.4, ALL_PAIRS[:3], options=options)
    with pytest.raises(RoundsMismatch, match="sensitivity"):
        run_mwem(
            DOMAIN,
            synthetic(6),
            0.4,
            ALL_PAIRS[:3],
            options=MechanismOptions(rounds=2, **FAST),
            completed_rounds=[r.to_dict() for r in result.rounds[:1]],
        )
