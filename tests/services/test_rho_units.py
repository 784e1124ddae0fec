"""Exact ρ units: conversion from client decimals, rounding of computed ρ, formatting."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

from app.errors import InvalidRequest
from app.services.rho import (
    UNITS_PER_RHO,
    rho_units,
    rho_units_ceil,
    units_to_decimal_str,
    units_to_rho,
)


def test_twenty_charges_of_a_twentieth_exhaust_one_exactly() -> None:
    limit = rho_units(1.0)
    spent = 0
    charges = 0
    while spent + rho_units(0.05) <= limit:
        spent += rho_units(0.05)
        charges += 1
    assert charges == 20
    assert spent == limit
    # The float sum that this representation avoids really is short of 1.0.
    assert sum([0.05] * 20) != 1.0


@pytest.mark.parametrize(
    ("value", "units"),
    [
        (0.05, 50_000_000_000),
        ("0.1", 100_000_000_000),
        (1, UNITS_PER_RHO),
        (Decimal("1e-12"), 1),
        (2.5, 2_500_000_000_000),
        ("0.000000000001", 1),
    ],
)
def test_client_rho_converts_exactly(value: object, units: int) -> None:
    assert rho_units(value) == units  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -0.1, "1e-13", 0.1 + 0.2, "nan", "inf", "abc", True])
def test_client_rho_refused_when_not_positive_or_too_precise(value: object) -> None:
    with pytest.raises(InvalidRequest):
        rho_units(value)  # type: ignore[arg-type]


def test_computed_rho_rounds_up_never_down() -> None:
    # 1/(2·3²) = 0.0555… : the ledger must hold at least that much.
    units = rho_units_ceil(Fraction(1, 18))
    assert Fraction(units, UNITS_PER_RHO) >= Fraction(1, 18)
    assert Fraction(units - 1, UNITS_PER_RHO) < Fraction(1, 18)
    assert rho_units_ceil(Fraction(1, 10**15)) == 1  # never free
    assert rho_units_ceil(0.05) == 50_000_000_000  # an exact decimal is not bumped
    with pytest.raises(InvalidRequest):
        rho_units_ceil(0)


def test_units_format_as_exact_decimals() -> None:
    assert units_to_decimal_str(50_000_000_000) == "0.05"
    assert units_to_decimal_str(UNITS_PER_RHO) == "1"
    assert units_to_decimal_str(0) == "0"
    assert units_to_decimal_str(-1) == "-0.000000000001"
    assert units_to_rho(250_000_000_000) == 0.25
