"""What every schema obeys: the attribute kinds, the limits, `SchemaError`, and the
checks and formatting that attributes, datasets and the parser share."""

from __future__ import annotations

from typing import Literal

import numpy as np

AttributeKind = Literal["categorical", "numeric", "integer"]
# What answers show for a code: a categorical value or a bin "[a, b)" (str), an
# integer attribute's value (int), or None (JSON null) for the missing code.
Label = str | int | None
ATTRIBUTE_KINDS: tuple[str, ...] = ("categorical", "numeric", "integer")

# Limits that keep one schema reasonable to store, show and model; cell limits of
# marginals and models are enforced elsewhere (settings).
MAX_ATTRIBUTES = 256
MAX_ATTRIBUTE_SIZE = 1_000_000
MAX_NAME_LENGTH = 128
MAX_VALUE_LENGTH = 1_000
# An integer attribute's min and max: every integer up to 2^53 is exact as a double,
# which engines that read numbers as doubles (Spark SQL) compare with.
MAX_INTEGER = 2**53
# With `"missing": true`, the CSV cells that mean "no value" unless the schema says.
DEFAULT_MISSING_VALUES: tuple[str, ...] = ("",)
MAX_MISSING_VALUES = 100
# Attribute names appear in query strings such as `attrs=age,sex` and `where=sex:F,M`,
# so they may not contain the separators of those forms.
FORBIDDEN_NAME_CHARACTERS = frozenset(",:")


class SchemaError(ValueError):
    """A schema, or a query's use of it, that the schema does not admit."""


def quote(text: str, limit: int = 40) -> str:
    """A short, printable rendering of a (possibly long) string for messages."""
    shown = text if len(text) <= limit else text[: limit - 1] + "…"
    return repr(shown)


def format_number(x: float) -> str:
    """Bin edges as people write them: 18 rather than 18.0, 0.5 as 0.5."""
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(float(x))


def is_valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, e.g. from JSON "\udc80"
        return False
    return True


def check_name(name: object) -> str:
    if not isinstance(name, str):
        raise SchemaError(f"attribute name must be a string, got {type(name).__name__}")
    if not name:
        raise SchemaError("attribute name must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise SchemaError(
            f"attribute name {quote(name)} is longer than {MAX_NAME_LENGTH} characters"
        )
    if name != name.strip():
        raise SchemaError(f"attribute name {quote(name)} has leading or trailing whitespace")
    bad = sorted(FORBIDDEN_NAME_CHARACTERS.intersection(name))
    if bad:
        raise SchemaError(
            f"attribute name {quote(name)} contains {', '.join(map(repr, bad))}, "
            "which query strings use as separators"
        )
    if not name.isprintable() or not is_valid_unicode(name):
        raise SchemaError(f"attribute name {quote(name)} contains unprintable characters")
    return name


def is_real_number(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(
        x, (bool, np.bool_)
    )


def is_integer_value(x: object) -> bool:
    """An integer (Python's or numpy's), not a boolean."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
