"""Values in a request's own terms → codes: `where` filters, value lists and ranges."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from app.schema import Attribute, DatasetSchema, SchemaError
from app.services.answers.common import attribute_of, invalid

# The missing code in a query string's value list (`where=income:null`).
NULL_TEXT = "null"


def _split_values(attribute: Attribute, text: str) -> list[str]:
    """Comma-separated values; bin labels ("[0, 18)") keep their inner comma."""
    if not attribute.is_binned:
        return [part.strip() for part in text.split(",")]
    parts: list[str] = []
    current: list[str] = []
    inside_bin = False
    for character in text:
        if character == "[":
            inside_bin = True
        elif character in ")]":
            inside_bin = False
        if character == "," and not inside_bin:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(character)
    parts.append("".join(current).strip())
    return parts


def _parse_bound(text: str, parameter: str, attribute: Attribute) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise invalid(
            parameter, f"range bound {text!r} of {attribute.name!r} is not a number"
        ) from None
    if math.isnan(value):
        raise invalid(parameter, f"range bound of {attribute.name!r} is not a number")
    return value


def codes_in_range(
    attribute: Attribute,
    ge: float | None,
    lt: float | None,
    parameter: str,
    le: float | None = None,
) -> np.ndarray:
    if ge is None and lt is None and le is None:
        raise invalid(parameter, f"the range on {attribute.name!r} needs a lower or upper bound")
    try:
        return attribute.codes_in_range(ge, lt, le=le)
    except SchemaError as error:
        raise invalid(parameter, str(error)) from None


def codes_of_labels(attribute: Attribute, labels: Sequence[object], parameter: str) -> np.ndarray:
    if not labels:
        raise invalid(parameter, f"give at least one value of {attribute.name!r}")
    try:
        return attribute.encode_labels(labels)
    except SchemaError as error:
        raise invalid(parameter, str(error)) from None


def parse_where(
    schema: DatasetSchema, text: str, *, parameter: str = "where"
) -> tuple[str, np.ndarray]:
    """`attr:v1,v2` (a value set), `attr:lo..hi` (from lo up to hi, hi excluded) or
    `attr:lo..=hi` (hi included) → (attribute, codes).

    `null` among the values is the missing code of an attribute with `missing`."""
    name, separator, rest = text.partition(":")
    if not separator:
        raise invalid(
            parameter,
            f"expected attr:value1,value2 or attr:lo..hi, got {text[:60]!r}",
        )
    attribute = attribute_of(schema, name.strip(), parameter)
    rest = rest.strip()
    if attribute.kind != "categorical" and ".." in rest:
        low, _, high = rest.partition("..")
        ge = _parse_bound(low, parameter, attribute)
        if high.startswith("="):  # lo..=hi: hi included
            le = _parse_bound(high[1:], parameter, attribute)
            return attribute.name, codes_in_range(attribute, ge, None, parameter, le)
        lt = _parse_bound(high, parameter, attribute)
        return attribute.name, codes_in_range(attribute, ge, lt, parameter)
    values = _split_values(attribute, rest) if rest else []
    if any(not v for v in values):
        raise invalid(parameter, f"empty value in the list for {attribute.name!r}")
    return attribute.name, codes_of_labels(attribute, _nulls(attribute, values), parameter)


def _nulls(attribute: Attribute, values: list[str]) -> list[str | None]:
    """`null` in a query string is the missing code (None), unless the attribute has a
    value spelled "null" itself (then that value wins)."""
    if not attribute.missing or NULL_TEXT in (attribute.values or ()):
        return list(values)
    return [None if value == NULL_TEXT else value for value in values]
