"""Exact ρ amounts: integer counts of pico-ρ units (1 unit = 1e-12 ρ).

Every ρ the service stores or sums is an integer number of units, so budget
arithmetic is exact on every backend: twenty charges of 0.05 are exactly 1.0.

- `rho_units(value)` — a ρ given by a client, exactly; refuses zero, negatives,
  non-finite values and more precision than 1e-12 (422).
- `rho_units_ceil(value)` — a ρ computed by the service (e.g. 1/(2σ²) from a
  client's σ), rounded UP to the next unit so a charge never under-counts the
  privacy loss.
- `units_to_rho(units)` (float for JSON) and `units_to_decimal_str(units)` (exact).
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from numbers import Real

from app.errors import InvalidRequest

RHO_UNIT_EXPONENT = 12
UNITS_PER_RHO = 10**RHO_UNIT_EXPONENT


def _as_decimal(value: Decimal | float | str, field: str) -> Decimal:
    if isinstance(value, bool):
        raise InvalidRequest(f"{field} must be a number")
    try:
        # str() of a float is its shortest round-trip decimal: 0.05 stays 0.05.
        number = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise InvalidRequest(f"{field} must be a number, got {value!r}") from None
    if not number.is_finite():
        raise InvalidRequest(f"{field} must be finite")
    return number


def rho_units(value: Decimal | float | str, *, field: str = "rho") -> int:
    """The exact number of units in a client-given ρ; 422 unless positive with ≤12 decimals."""
    number = _as_decimal(value, field)
    if number <= 0:
        raise InvalidRequest(f"{field} must be positive, got {number}")
    units = number.scaleb(RHO_UNIT_EXPONENT)
    if units != units.to_integral_value():
        raise InvalidRequest(
            f"{field} has more precision than the ledger keeps (at most 12 decimal places): "
            f"{number}"
        )
    return int(units)


def rho_units_ceil(value: Fraction | Decimal | float, *, field: str = "rho") -> int:
    """Units for a ρ the service computed, rounded up (never under-charge); at least 1."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidRequest(f"{field} must be finite")
    if isinstance(value, float):
        exact = Fraction(Decimal(str(value)))
    elif isinstance(value, Decimal):
        exact = Fraction(_as_decimal(value, field))
    elif isinstance(value, (Fraction, int, Real)):
        exact = Fraction(value)
    else:
        raise InvalidRequest(f"{field} must be a number")
    if exact <= 0:
        raise InvalidRequest(f"{field} must be positive")
    units: int = math.ceil(exact * UNITS_PER_RHO)
    return max(1, units)


def units_to_decimal(units: int) -> Decimal:
    return Decimal(units).scaleb(-RHO_UNIT_EXPONENT)


def units_to_decimal_str(units: int) -> str:
    """The exact decimal, without exponent or trailing zeros: 50000000000 → "0.05"."""
    text = format(units_to_decimal(units), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text or "0"


def units_to_rho(units: int) -> float:
    """The nearest float, for JSON numbers (exact strings are given alongside)."""
    return float(units_to_decimal(units))
