"""Validated request types: strict, bounded numbers and safe text, shared by every route.

Each type is an `Annotated` alias a request model (or a path, query or header parameter)
uses as its annotation; the bounds show in the OpenAPI schema and a value outside them
is a 422 naming the field and the whole range (`app.api.errors`).

- Numbers in JSON bodies are JSON numbers: booleans, strings, NaN and ±Infinity are
  refused (`json.loads` accepts `NaN` and `Infinity`, and `1e400` becomes infinity).
  Ranges come from `app.limits`: `Rho`, `Epsilon`, `Delta`, `Sigma`, `LaplaceScale`,
  `QueryWeight`, `Coordinate`; `NumberRange` makes more (`whole=True` for counts);
  `RHO_TOTAL` checks the upload form's `rho_total` (exact decimal text).
- Text has no control characters or lone surrogates: `SafeText`, `Name` (1–200),
  `AttributeName`, `ResourceId` (path and body ids), `IdempotencyKeyText`; `JsonText`
  (a JSON form field) admits JSON's whitespace (tab, line feed, carriage return).

New routes reuse these rather than plain `float`/`str`, so every number that reaches a
service is finite and in range and every string can be stored and logged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, StringConstraints
from pydantic_core import PydanticCustomError

from app import limits

# The longest text `check_decimal_text` reads as a number (a form field's own limit).
MAX_DECIMAL_TEXT = 100


@dataclass(frozen=True)
class NumberRange:
    """The bounds of one kind of number, its 422 message and its OpenAPI constraints.

    Use as `Annotated[float, r.field(), BeforeValidator(r.check)]` (`r.check_text` for
    query parameters, which arrive as text; `r.check_decimal_text` for a form field kept
    as exact decimal text). The error names the whole range
    ("must be a number with 0 < rho ≤ 1e6"), whichever end was crossed.
    """

    name: str
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    whole: bool = False

    @property
    def text(self) -> str:
        low = (
            f"{limits.format_limit(self.gt)} < "
            if self.gt is not None
            else f"{limits.format_limit(self.ge)} ≤ "
            if self.ge is not None
            else ""
        )
        high = (
            f" < {limits.format_limit(self.lt)}"
            if self.lt is not None
            else f" ≤ {limits.format_limit(self.le)}"
            if self.le is not None
            else ""
        )
        return f"{low}{self.name}{high}"

    def _refuse(self, kind: str) -> PydanticCustomError:
        what = "a whole number" if self.whole else "a number"
        return PydanticCustomError(kind, f"must be {what} with {{range}}", {"range": self.text})

    def contains(self, value: float) -> bool:
        return not (
            (self.gt is not None and not value > self.gt)
            or (self.ge is not None and not value >= self.ge)
            or (self.lt is not None and not value < self.lt)
            or (self.le is not None and not value <= self.le)
        )

    def check(self, value: Any) -> Any:
        """A JSON number in range: no booleans, strings, NaN or infinities."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._refuse("number_type")
        if self.whole and not isinstance(value, int):
            raise self._refuse("integer_type")
        if isinstance(value, float) and not math.isfinite(value):
            raise self._refuse("number_range")
        # Compared before any conversion: a huge JSON integer does not fit in a float.
        if not self.contains(value):
            raise self._refuse("number_range")
        return value if self.whole else float(value)

    def check_text(self, value: Any) -> Any:
        """`check` for a query parameter: the text of a number."""
        if isinstance(value, str):
            text = value.strip()
            if len(text) > 40:
                raise self._refuse("number_type")
            try:
                value = int(text) if self.whole else float(text)
            except ValueError:
                raise self._refuse("number_type") from None
        return self.check(value)

    def check_decimal_text(self, value: Any) -> Any:
        """`check` for a form field read as an exact decimal (a ρ with any number of
        digits): the text of a finite number in range, returned as text; None or "" is
        None (the field was left out). No "true", "nan", "inf" or exponent overflow."""
        if value is None or value == "":
            return None
        if not isinstance(value, str) or len(value) > MAX_DECIMAL_TEXT:
            raise self._refuse("number_type")
        try:
            number = Decimal(value.strip())
        except (InvalidOperation, ValueError):
            raise self._refuse("number_type") from None
        # float() of a huge exponent is inf, out of range; of a tiny one 0, out of a range
        # that starts above 0 as a ρ's does (and finer than the ledger's unit anyway).
        if not number.is_finite() or not self.contains(float(number)):
            raise self._refuse("number_range")
        return value.strip()

    def field(self, description: str = "", **extra: Any) -> Any:
        """The OpenAPI side: the same bounds, and the range in the description."""
        text = f"{description} Range: {self.text}.".strip()
        if self.whole:
            return Field(ge=self.ge, le=self.le, description=text, **extra)
        return Field(
            gt=self.gt,
            ge=self.ge,
            lt=self.lt,
            le=self.le,
            allow_inf_nan=False,
            description=text,
            **extra,
        )


def _no_control_characters(value: str) -> str:
    found = limits.control_character(value)
    if found is not None:
        raise PydanticCustomError(
            "control_character",
            "must not contain control characters (found {character})",
            {"character": limits.describe_character(found)},
        )
    return value


def _no_control_characters_but_json_whitespace(value: str) -> str:
    found = limits.json_control_character(value)
    if found is not None:
        raise PydanticCustomError(
            "control_character",
            "must not contain control characters other than JSON's whitespace (found {character})",
            {"character": limits.describe_character(found)},
        )
    return value


def _text(min_length: int, max_length: int) -> StringConstraints:
    return StringConstraints(strict=True, min_length=min_length, max_length=max_length)


NoControlCharacters = AfterValidator(_no_control_characters)

# Strings of bounded length without control characters or lone surrogates.
SafeText = Annotated[str, _text(0, 10_000), NoControlCharacters]
Name = Annotated[
    str,
    StringConstraints(
        strict=True, strip_whitespace=True, min_length=1, max_length=limits.MAX_NAME_LENGTH
    ),
    NoControlCharacters,
]
# A JSON document sent as a form field (a schema, a privacy unit): pretty-printed is
# fine, other control characters are not. Form fields are bounded by the form parser.
JsonText = Annotated[
    str,
    _text(0, limits.MAX_JSON_FIELD_CHARS),
    AfterValidator(_no_control_characters_but_json_whitespace),
]
AttributeName = Annotated[str, _text(1, limits.MAX_NAME_LENGTH), NoControlCharacters]
# A value label in a query (`"F"`, `"[18, 30)"`); numbers may also be given as numbers.
LabelText = Annotated[str, _text(0, limits.MAX_NAME_LENGTH), NoControlCharacters]
ResourceId = Annotated[str, _text(1, limits.MAX_ID_LENGTH), NoControlCharacters]
IdempotencyKeyText = Annotated[
    str, _text(1, limits.MAX_IDEMPOTENCY_KEY_LENGTH), NoControlCharacters
]

RHO = NumberRange("rho", gt=0, le=limits.MAX_RHO)
RHO_TOTAL = NumberRange("rho_total", gt=0, le=limits.MAX_RHO)
EPSILON = NumberRange("epsilon", gt=0, le=limits.MAX_EPSILON)
# δ below 1e-300 is subnormal: log(1/δ) overflows and so would ε. This is the range
# the arithmetic takes; the service's own maximum (`Settings.max_delta`, default 1e-3)
# is checked where the settings are known (`app.services.rho.check_delta`).
DELTA = NumberRange("delta", ge=limits.MIN_DELTA, lt=1)
# What every δ parameter's description says of that maximum.
MAX_DELTA_NOTE = (
    f"At most the service's maximum, PRIVQ_MAX_DELTA (default "
    f"{limits.format_limit(limits.DEFAULT_MAX_DELTA)}); larger is a 422."
)
SIGMA = NumberRange("sigma", ge=limits.MIN_NOISE_SCALE, le=limits.MAX_NOISE_SCALE)
LAPLACE_SCALE = NumberRange("scale", ge=limits.MIN_NOISE_SCALE, le=limits.MAX_NOISE_SCALE)
QUERY_WEIGHT = NumberRange("weight", ge=-limits.MAX_QUERY_WEIGHT, le=limits.MAX_QUERY_WEIGHT)
COORDINATE = NumberRange("value", ge=-limits.MAX_COORDINATE, le=limits.MAX_COORDINATE)

Rho = Annotated[
    float,
    RHO.field("ρ (zCDP); any number of digits is accepted."),
    BeforeValidator(RHO.check),
]
Epsilon = Annotated[float, EPSILON.field("ε of (ε, δ)-DP."), BeforeValidator(EPSILON.check)]
Delta = Annotated[
    float, DELTA.field(f"δ of (ε, δ)-DP. {MAX_DELTA_NOTE}"), BeforeValidator(DELTA.check)
]
Sigma = Annotated[
    float,
    SIGMA.field("Gaussian noise standard deviation on every count."),
    BeforeValidator(SIGMA.check),
]
LaplaceScale = Annotated[
    float,
    LAPLACE_SCALE.field("Laplace noise scale b on every count."),
    BeforeValidator(LAPLACE_SCALE.check),
]
QueryWeight = Annotated[float, QUERY_WEIGHT.field(), BeforeValidator(QUERY_WEIGHT.check)]
# An original value on a numeric attribute's scale (range ends, numeric labels).
Coordinate = Annotated[float, COORDINATE.field(), BeforeValidator(COORDINATE.check)]


def check_label(value: Any) -> Any:
    """A value label in a query: safe text, or a finite number within ±MAX_COORDINATE."""
    if isinstance(value, str):
        if len(value) > limits.MAX_NAME_LENGTH:
            raise PydanticCustomError(
                "label_length",
                "a label has at most {length} characters",
                {"length": limits.MAX_NAME_LENGTH},
            )
        return _no_control_characters(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PydanticCustomError("label_type", "a label is a string or a number")
    return COORDINATE.check(value) if isinstance(value, float) else _whole_label(value)


def _whole_label(value: int) -> int:
    if not COORDINATE.contains(value):
        raise PydanticCustomError(
            "number_range", "must be a number with {range}", {"range": COORDINATE.text}
        )
    return value
