"""The checks an `Attribute` passes when it is built: one function per kind, and the
missing values any kind may add. Each refusal is a `SchemaError` naming the attribute."""

from __future__ import annotations

import math
from typing import Protocol

from app.schema.rules import (
    DEFAULT_MISSING_VALUES,
    MAX_ATTRIBUTE_SIZE,
    MAX_INTEGER,
    MAX_MISSING_VALUES,
    MAX_VALUE_LENGTH,
    SchemaError,
    format_number,
    is_integer_value,
    is_valid_unicode,
    quote,
)


class Attribute(Protocol):
    """What the checks read of an `app.schema.Attribute` (which imports this module)."""

    @property
    def values(self) -> tuple[str, ...] | None: ...
    @property
    def bins(self) -> tuple[float, ...] | None: ...
    @property
    def clip(self) -> bool: ...
    @property
    def integer_min(self) -> int | None: ...
    @property
    def integer_max(self) -> int | None: ...
    @property
    def integer_width(self) -> int | None: ...
    @property
    def integer_range(self) -> tuple[int, int, int]: ...
    @property
    def missing(self) -> bool: ...
    @property
    def missing_values(self) -> tuple[str, ...]: ...
    @property
    def value_size(self) -> int: ...


def check_missing(attribute: Attribute, where: str) -> None:
    if not isinstance(attribute.missing, bool):
        raise SchemaError(f"{where}: missing must be true or false")
    texts = attribute.missing_values
    if not isinstance(texts, tuple):
        raise SchemaError(f"{where}: missing_values must be a list of strings")
    if not attribute.missing:
        if texts != DEFAULT_MISSING_VALUES:
            raise SchemaError(f'{where}: missing_values needs "missing": true')
        return
    if not texts:
        raise SchemaError(f"{where}: missing_values must not be empty")
    if len(texts) > MAX_MISSING_VALUES:
        raise SchemaError(f"{where}: at most {MAX_MISSING_VALUES} missing_values")
    if attribute.value_size + 1 > MAX_ATTRIBUTE_SIZE:
        raise SchemaError(f"{where}: with the missing code, more than {MAX_ATTRIBUTE_SIZE} codes")
    values = set(attribute.values or ())
    seen: set[str] = set()
    for position, text in enumerate(texts):
        if not isinstance(text, str):
            raise SchemaError(f"{where}: missing value {position} must be a string")
        if text != text.strip():
            raise SchemaError(
                f"{where}: missing value {quote(text)} has leading or trailing whitespace "
                "(CSV cells are stripped, so it could never match)"
            )
        if len(text) > MAX_VALUE_LENGTH or not is_valid_unicode(text):
            raise SchemaError(f"{where}: missing value {position} is too long or not Unicode")
        if text in values:
            raise SchemaError(f"{where}: {quote(text)} is both a value and a missing value")
        if text in seen:
            raise SchemaError(f"{where}: duplicate missing value {quote(text)}")
        seen.add(text)


def check_categorical(attribute: Attribute, where: str) -> None:
    if attribute.bins is not None or attribute.integer_min is not None or attribute.clip:
        raise SchemaError(f"{where}: a categorical attribute has only values")
    values = attribute.values
    if not isinstance(values, tuple):
        raise SchemaError(f"{where}: values must be a list of strings")
    if not values:
        raise SchemaError(f"{where}: values must not be empty")
    if len(values) > MAX_ATTRIBUTE_SIZE:
        raise SchemaError(f"{where}: more than {MAX_ATTRIBUTE_SIZE} values")
    seen: set[str] = set()
    for position, value in enumerate(values):
        if not isinstance(value, str):
            raise SchemaError(
                f"{where}: value {position} must be a string, got {type(value).__name__} "
                "(quote numbers that are categories, or use a numeric attribute)"
            )
        if value != value.strip():
            raise SchemaError(
                f"{where}: value {quote(value)} has leading or trailing whitespace "
                "(CSV cells are stripped, so it could never match)"
            )
        if len(value) > MAX_VALUE_LENGTH:
            raise SchemaError(
                f"{where}: value {quote(value)} is longer than {MAX_VALUE_LENGTH} characters"
            )
        if not is_valid_unicode(value):
            raise SchemaError(f"{where}: value {position} is not valid Unicode")
        if value in seen:
            raise SchemaError(f"{where}: duplicate value {quote(value)}")
        seen.add(value)


def check_numeric(attribute: Attribute, where: str) -> None:
    if attribute.values is not None or attribute.integer_min is not None:
        raise SchemaError(f"{where}: a numeric attribute has only bins and clip")
    bins = attribute.bins
    if not isinstance(bins, tuple):
        raise SchemaError(f"{where}: bins must be a list of numbers")
    if len(bins) < 2:
        raise SchemaError(f"{where}: bins needs at least 2 edges (one bin), got {len(bins)}")
    if len(bins) - 1 > MAX_ATTRIBUTE_SIZE:
        raise SchemaError(f"{where}: more than {MAX_ATTRIBUTE_SIZE} bins")
    for position, edge in enumerate(bins):
        if not isinstance(edge, float) or not math.isfinite(edge):
            raise SchemaError(f"{where}: bin edge {position} must be a finite number")
    for position in range(1, len(bins)):
        if not bins[position] > bins[position - 1]:
            raise SchemaError(
                f"{where}: bins must be strictly increasing, but edge {position} "
                f"({format_number(bins[position])}) is not greater than edge "
                f"{position - 1} ({format_number(bins[position - 1])})"
            )


def check_integer(attribute: Attribute, where: str) -> None:
    if attribute.values is not None or attribute.bins is not None:
        raise SchemaError(f"{where}: an integer attribute has only min, max, width and clip")
    for key, value in (
        ("min", attribute.integer_min),
        ("max", attribute.integer_max),
        ("width", attribute.integer_width),
    ):
        if not is_integer_value(value):
            raise SchemaError(f"{where}: {key} must be an integer, got {value!r}")
    low, high, width = attribute.integer_range
    if abs(low) > MAX_INTEGER or abs(high) > MAX_INTEGER:
        raise SchemaError(f"{where}: min and max must lie within ±{MAX_INTEGER}")
    if low > high:
        raise SchemaError(f"{where}: min ({low}) must not be greater than max ({high})")
    if width < 1:
        raise SchemaError(f"{where}: width must be at least 1, got {width}")
    count = (high - low) // width + 1
    if count > MAX_ATTRIBUTE_SIZE:
        raise SchemaError(
            f"{where}: min {low} .. max {high} in bins of width {width} makes {count} "
            f"codes, more than {MAX_ATTRIBUTE_SIZE} (use a larger width)"
        )
