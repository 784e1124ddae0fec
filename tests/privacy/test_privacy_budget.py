"""Mechanism budget: round costs (float and exact), the round split, the ρ ledger."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from app.privacy.accounting import BudgetOverspent
from app.privacy.mechanisms.budget import RhoLedger, exact_round_cost, round_cost, split_round


def test_a_split_round_spends_at_most_its_share_exactly_and_in_floats() -> None:
    for rho_round in (1e-6, 0.0123, 0.5):
        for share in (0.5, 0.9):
            sigma, epsilon = split_round(rho_round, share)
            assert round_cost(sigma, epsilon) <= rho_round
            assert round_cost(sigma, epsilon) == pytest.approx(rho_round, rel=1e-12)
            assert float(exact_round_cost(sigma, epsilon)) == pytest.approx(rho_round, rel=1e-12)


def test_a_measure_round_costs_the_gaussian_alone() -> None:
    assert exact_round_cost(2.0, 0.0) == Fraction(1, 8)
    assert exact_round_cost(2.0, 2.0) == Fraction(1, 8) + Fraction(1, 2)


def test_the_ledger_refuses_to_spend_more_than_its_charge() -> None:
    ledger = RhoLedger(1.0)
    ledger.spend(0.6)
    assert ledger.fits(0.4) and not ledger.fits(0.41)
    assert math.isclose(ledger.remaining, 0.4)
    with pytest.raises(BudgetOverspent):
        ledger.spend(0.41)
