"""One attribute's predicate → the codes where it is true and the codes where it is false.

SQL's three-valued logic: on the "no value" code (an attribute with `missing`) every
comparison is unknown — neither true nor false — and only IS [NOT] NULL decides it.
Keeping both sets lets NOT, AND and OR combine predicates exactly as SQL does.

Values are compared as the schema defines the attribute's codes:
- categorical: its string values (=, <>, IN, LIKE; <, > compare strings);
- integer: the values (min..max); with a bin width > 1 binned as numeric attributes are;
- numeric (binned): per bin, a comparison holds for all its values (true), none
  (false), or some — it cuts the bin. `compare` gives the bins wholly true and wholly
  false (what the bounds of a cut answer count); `compare_pieces` the same over the
  pieces the WHERE clause's cut points split the bins into (`app.sql.pieces`), which
  the estimate counts. `=`/IN also take a bin's label ("[18, 30)"). HAVING on a
  grouped attribute has whole groups only: there a cut bin is refused.
Masks are Python integers: bit c is code (or piece) c.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np
import orjson

from app.pgm.bin_bounds import BinValues
from app.schema import Attribute, SchemaError, format_number
from app.sql.errors import Position, bad_sql, unsupported
from app.sql.pieces import Pieces
from app.sql.quantiles import CodeIntervals, code_intervals, with_means
from app.sql.statement import Value

Masks = tuple[int, int]  # (true on, false on)


@dataclass(frozen=True)
class AttributeCodes:
    """An attribute's codes as the model's domain has them, and what each code means."""

    attribute: Attribute
    size: int  # codes in the model's domain, the null code included
    # What each code stands for in sums (`app.services.answers.bin_values`); None: bin
    # midpoints and integers, as the schema gives them.
    values: BinValues | None = None

    @property
    def name(self) -> str:
        return self.attribute.name

    @property
    def kind(self) -> str:
        return self.attribute.kind

    @cached_property
    def null_code(self) -> int | None:
        """The last code, when the attribute admits missing values."""
        return self.size - 1 if getattr(self.attribute, "missing", False) else None

    @property
    def value_count(self) -> int:
        return self.size - 1 if self.null_code is not None else self.size

    @property
    def full(self) -> int:
        return (1 << self.size) - 1

    @property
    def values_mask(self) -> int:
        return (1 << self.value_count) - 1

    @cached_property
    def labels(self) -> list[str | int | None]:
        """What a row shows for each code: the value, the bin label, the integer; None
        for the null code."""
        shown: list[str | int | None] = list(self.attribute.labels()[: self.value_count])
        if self.null_code is not None:
            shown.append(None)
        return shown

    @cached_property
    def labels_json(self) -> list[bytes]:
        """`labels`, each encoded as JSON."""
        return [orjson.dumps(label) for label in self.labels]

    @cached_property
    def points(self) -> np.ndarray:
        """The number each code stands for (`values`, else bin midpoints and integers);
        0 on the null code and on a categorical attribute's codes (COUNT(a) reads only
        which have a value)."""
        values = np.zeros(self.size)
        values = np.zeros(self.size)
        if self.kind == "categorical":
            return values
        given = self.values.values if self.values is not None else self.attribute.midpoints()
        values[: self.value_count] = np.asarray(given, dtype=float)[: self.value_count]
        return values

    @property
    def binned(self) -> bool:
        """Whether a code holds more than one value: a numeric bin, an integer bin (its
        sums have bounds; a WHERE comparison may cut it)."""
        if self.values is not None:
            return not self.values.exact
        return self.attribute.is_binned

    @property
    def estimate(self) -> str:
        """How `points` were chosen: "midpoint", "within-bin means" or "exact"."""
        if self.values is not None:
            return self.values.method
        return "midpoint" if self.binned else "exact"

    @cached_property
    def value_ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """Per code with a value, the least and greatest value it holds (`values`' ends
        when given: in a bound plan, only the part of a cut bin WHERE keeps)."""
        count = self.value_count
        if self.values is not None:
            return self.values.low[:count], self.values.high[:count]
        if self.kind == "categorical":
            points = self.points[:count]
            return points, points
        intervals = self.intervals
        return intervals.low[:count], intervals.high[:count]

    @cached_property
    def code_intervals(self) -> list[tuple[float, float, bool]]:
        """Each value code's (low, high, closed_high), as `Attribute.bin_interval`."""
        lows, highs, closed = self.attribute.intervals()
        return list(zip(lows.tolist(), highs.tolist(), closed.tolist(), strict=True))

    @cached_property
    def intervals(self) -> CodeIntervals:
        """The interval of values each code with a value stands for (quantiles, cuts),
        with the spread of its measured mean where `values` are within-bin means."""
        found = code_intervals(self.attribute)
        if self.values is not None and self.values.method == "within-bin means":
            found = with_means(found, self.values.values[: self.value_count])
        return found

    @cached_property
    def non_null(self) -> np.ndarray:
        present = np.zeros(self.size)
        present[: self.value_count] = 1.0
        return present

    def sort_key(self, code: int) -> str | int:
        """ORDER BY: categorical values as strings, bins and integers in code order."""
        if self.kind == "categorical":
            return str(self.labels[code])
        return code


def narrowed(codes: AttributeCodes, pieces: Pieces, kept: int) -> AttributeCodes:
    """The attribute's codes with each cut bin's range narrowed to its pieces in `kept`
    (where the records a WHERE clause keeps can lie): what a bound plan sums."""
    low, high = pieces.hull(kept, *codes.value_ranges)
    count = codes.value_count
    ends = [np.full(codes.size, np.nan) for _ in range(3)]
    ends[0][:count], ends[1][:count] = low, high
    ends[2][:count] = np.clip(codes.points[:count], low, high)
    values = BinValues(ends[2], codes.estimate, ends[0], ends[1])
    return replace(codes, values=values)


def mask_of(codes: list[int] | np.ndarray) -> int:
    mask = 0
    for code in codes:
        mask |= 1 << int(code)
    return mask


def _bin_truth(low: float, high: float, closed: bool, op: str, value: float) -> bool | None:
    """Whether `x op value` holds for every x in the bin (True), none (False), or some."""
    below_high = high < value if closed else high <= value  # every x < value
    if op == "<":
        return True if below_high else (False if low >= value else None)
    if op == "<=":
        return True if high <= value else (False if low > value else None)
    if op == ">":
        return True if low > value else (False if high <= value else None)
    if op == ">=":
        return True if low >= value else (False if below_high else None)
    outside = value < low or (value > high if closed else value >= high)
    if op == "=":
        return False if outside else None
    return True if outside else None  # "<>"


def _number(codes: AttributeCodes, value: Value, at: Position | None) -> float:
    if isinstance(value, bool) or value is None:
        raise bad_sql(f"compare {codes.name!r} with a number", at)
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise bad_sql(
                f"{value!r} is not a number ({codes.name!r} is {codes.kind})", at
            ) from None
    else:
        number = float(value)
    if math.isnan(number):
        raise bad_sql(f"compare {codes.name!r} with a number", at)
    return number


def _compare_values(op: str, left: object, right: object) -> bool:
    if op == "=":
        return left == right
    if op == "<>":
        return left != right
    ordered_left: Any = left
    if op == "<":
        return bool(ordered_left < right)
    if op == "<=":
        return bool(ordered_left <= right)
    if op == ">":
        return bool(ordered_left > right)
    return bool(ordered_left >= right)


def compare(codes: AttributeCodes, op: str, value: Value, at: Position | None) -> Masks:
    """`attribute op value`."""
    if value is None:
        raise bad_sql(f"a comparison with NULL is never true; write {codes.name} IS [NOT] NULL", at)
    values = codes.values_mask
    if codes.kind == "categorical":
        if not isinstance(value, str):
            raise bad_sql(f"{codes.name!r} is categorical: compare it with a quoted value", at)
        if op in ("=", "<>"):
            true = mask_of(_known_codes(codes, [value], at))
            return (true, values & ~true) if op == "=" else (values & ~true, true)
        chosen = [
            c for c in range(codes.value_count) if _compare_values(op, codes.labels[c], value)
        ]
        true = mask_of(chosen)
        return true, values & ~true
    if codes.kind == "numeric" and isinstance(value, str):
        if op not in ("=", "<>"):
            raise bad_sql(
                f"{codes.name!r} is numeric: order comparisons take numbers, not bin labels", at
            )
        true = mask_of(_known_codes(codes, [value], at))
        return (true, values & ~true) if op == "=" else (values & ~true, true)
    if codes.attribute.is_binned and isinstance(value, str) and op in ("=", "<>"):
        true = mask_of(_known_codes(codes, [value], at))  # a bin's label
        return (true, values & ~true) if op == "=" else (values & ~true, true)
    number = _number(codes, value, at)
    true = false = 0
    for code, (low, high, closed) in enumerate(codes.code_intervals):
        if codes.kind == "integer" and op in ("=", "<>"):
            holds: bool | None = _integers_equal(int(low), int(high), number)
            holds = holds if holds is None or op == "=" else not holds
        else:
            holds = _bin_truth(low, high, closed, op, number)
        if holds is True:
            true |= 1 << code
        elif holds is False:
            false |= 1 << code
    return true, false


def _integers_equal(low: int, high: int, value: float) -> bool | None:
    """Whether every integer low..high equals `value` (True), none does (False), or some."""
    if not value.is_integer() or not low <= value <= high:
        return False
    return True if low == high else None


def compare_pieces(
    codes: AttributeCodes, pieces: Pieces, op: str, value: Value, at: Position | None
) -> Masks:
    """`attribute op value` over the pieces of a binned attribute: each piece wholly
    true or false (a comparison with a bin's label: the pieces of its bins)."""
    if isinstance(value, str) or value is None:
        true, false = compare(codes, op, value, at)
        return pieces.of_codes(true), pieces.of_codes(false)
    number = _number(codes, value, at)
    true = false = 0
    point_equality = not codes.intervals.integer and op in ("=", "<>")
    for index, point in enumerate(pieces.point.tolist()):
        if point != point:  # the null code: unknown
            continue
        # A continuous piece is an open interval: it holds no single value.
        holds = (op == "<>") if point_equality else _compare_values(op, point, number)
        if holds:
            true |= 1 << index
        else:
            false |= 1 << index
    return true, false


def _known_codes(codes: AttributeCodes, labels: list[Value], at: Position | None) -> list[int]:
    if codes.kind == "integer" and not codes.attribute.is_binned:
        found = []
        first = codes.attribute.integer_range[0]
        for label in labels:
            number = _number(codes, label, at)
            if number.is_integer() and 0 <= number - first < codes.value_count:
                found.append(int(number) - first)
        return found
    try:
        return [int(c) for c in codes.attribute.encode_labels(labels)]
    except SchemaError as error:
        known = ", ".join(repr(label) for label in codes.labels[:12] if label is not None)
        more = " …" if codes.value_count > 12 else ""
        raise bad_sql(f"{error} (values: {known}{more})", at) from None


def in_list(codes: AttributeCodes, values: list[Value], at: Position | None) -> Masks:
    """`attribute IN (values)`: a NULL in the list makes the non-matching rows unknown."""
    true, false = 0, codes.values_mask
    for value in values:
        if value is None:
            false = 0
            continue
        value_true, value_false = compare(codes, "=", value, at)
        true |= value_true
        false &= value_false
    return true, false


def is_null(codes: AttributeCodes) -> Masks:
    null = 0 if codes.null_code is None else 1 << codes.null_code
    return null, codes.values_mask


def _like_pattern(pattern: str, escape: str | None, case_insensitive: bool) -> re.Pattern[str]:
    escape_character = "\\" if escape is None else escape
    parts: list[str] = []
    index = 0
    while index < len(pattern):
        character = pattern[index]
        if character == escape_character and index + 1 < len(pattern):
            parts.append(re.escape(pattern[index + 1]))
            index += 2
            continue
        parts.append(
            ".*" if character == "%" else "." if character == "_" else re.escape(character)
        )
        index += 1
    flags = re.DOTALL | (re.IGNORECASE if case_insensitive else 0)
    return re.compile("".join(parts), flags)


def like(
    codes: AttributeCodes,
    pattern: Value,
    escape: str | None,
    case_insensitive: bool,
    at: Position | None,
) -> Masks:
    """`attribute [I]LIKE pattern` over a categorical attribute's values."""
    if codes.kind != "categorical":
        raise unsupported(
            f"LIKE on the {codes.kind} attribute {codes.name!r}",
            at,
            "LIKE matches categorical values; compare numbers with <, >=, BETWEEN",
        )
    if not isinstance(pattern, str):
        raise bad_sql("LIKE takes a quoted pattern", at)
    compiled = _like_pattern(pattern, escape, case_insensitive)
    chosen = [c for c in range(codes.value_count) if compiled.fullmatch(str(codes.labels[c]))]
    true = mask_of(chosen)
    return true, codes.values_mask & ~true


def undecided(codes: AttributeCodes, masks: Masks) -> int:
    """The bins (codes with a value) a predicate holds on for part only: it cuts them."""
    true, false = masks
    return codes.values_mask & ~(true | false) if codes.binned else 0


def check_whole_bins(codes: AttributeCodes, masks: Masks, text: str, at: Position | None) -> None:
    """Refuse a predicate on a binned attribute that holds for part of a bin only
    (HAVING on a grouped attribute: a group is a whole bin)."""
    cut = undecided(codes, masks)
    if not cut:
        return
    first = (cut & -cut).bit_length() - 1
    if codes.kind == "integer":
        edges = ", ".join(str(e) for e in codes.attribute.integer_edges().tolist())
    else:
        edges = ", ".join(format_number(e) for e in codes.attribute.edges)
    raise bad_sql(
        f"{text} cuts the bin {codes.labels[first]} of {codes.name!r}: the model counts "
        f"values per bin, not where they lie inside one; compare with bin edges ({edges})",
        at,
    )
