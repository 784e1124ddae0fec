"""`Attribute`: one attribute's public codes, checked when built, and the translations
between them and a request's own terms (labels, values, ranges)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from app.schema.checks import check_categorical, check_integer, check_missing, check_numeric
from app.schema.rules import (
    ATTRIBUTE_KINDS,
    DEFAULT_MISSING_VALUES,
    MAX_ATTRIBUTE_SIZE,
    AttributeKind,
    SchemaError,
    check_name,
    format_number,
    is_integer_value,
    is_real_number,
    quote,
)


@dataclass(frozen=True)
class Attribute:
    """One attribute of a dataset and its public codes.

    Build with `Attribute.categorical`, `Attribute.numeric` or `Attribute.integer`;
    the fields are checked when the value is built.
    """

    name: str
    kind: AttributeKind
    values: tuple[str, ...] | None = None
    bins: tuple[float, ...] | None = None
    clip: bool = False
    # An integer attribute's values min..max (both held); codes are bins of `width`
    # consecutive integers, the last one closed at max (width 1: one code per value).
    integer_min: int | None = None
    integer_max: int | None = None
    integer_width: int | None = None
    # One more code, the last, for "no value" (an empty cell, a Parquet null).
    missing: bool = False
    # The cells that mean "no value" in a CSV (stripped), when `missing` is set.
    missing_values: tuple[str, ...] = DEFAULT_MISSING_VALUES

    @property
    def categories(self) -> tuple[str, ...]:
        """A categorical attribute's values, in code order."""
        if self.values is None:
            raise SchemaError(f"attribute {self.name!r} is {self.kind}, not categorical")
        return self.values

    @property
    def edges(self) -> tuple[float, ...]:
        """A numeric attribute's bin edges."""
        if self.bins is None:
            raise SchemaError(f"attribute {self.name!r} is {self.kind}, not numeric")
        return self.bins

    # -- construction -------------------------------------------------------------

    @classmethod
    def categorical(
        cls,
        name: str,
        values: Iterable[str],
        *,
        missing: bool = False,
        missing_values: Iterable[str] = DEFAULT_MISSING_VALUES,
    ) -> Attribute:
        return cls(
            name=name,
            kind="categorical",
            values=tuple(values),
            missing=missing,
            missing_values=_tuple_of(missing_values),
        )

    @classmethod
    def numeric(
        cls,
        name: str,
        bins: Iterable[float],
        clip: bool = False,
        *,
        missing: bool = False,
        missing_values: Iterable[str] = DEFAULT_MISSING_VALUES,
    ) -> Attribute:
        try:
            edges = tuple(float(e) for e in bins)
        except (TypeError, ValueError, OverflowError):
            raise SchemaError(f"attribute {name!r}: bins must be finite numbers") from None
        return cls(
            name=name,
            kind="numeric",
            bins=edges,
            clip=clip,
            missing=missing,
            missing_values=_tuple_of(missing_values),
        )

    @classmethod
    def integer(
        cls,
        name: str,
        size: int | None = None,
        clip: bool = False,
        *,
        min: int | None = None,
        max: int | None = None,
        width: int = 1,
        missing: bool = False,
        missing_values: Iterable[str] = DEFAULT_MISSING_VALUES,
    ) -> Attribute:
        """Integer values min..max (inclusive), one code per `width` consecutive values.

        `Attribute.integer("age", 85)` is the size form: min 0, max 84, width 1.
        Give either `size` or both `min` and `max`.
        """
        where = f"attribute {name!r}"
        if size is not None:
            if min is not None or max is not None:
                raise SchemaError(f"{where}: give either size or min and max, not both")
            if not is_integer_value(size):
                raise SchemaError(f"{where}: size must be a positive integer")
            if size < 1:
                raise SchemaError(f"{where}: size must be at least 1, got {size}")
            if size > MAX_ATTRIBUTE_SIZE:
                raise SchemaError(f"{where}: size {size} is larger than {MAX_ATTRIBUTE_SIZE}")
            low, high = 0, int(size) - 1
        else:
            if min is None or max is None:
                raise SchemaError(f"{where}: an integer attribute needs min and max (or size)")
            low, high = min, max
        return cls(
            name=name,
            kind="integer",
            integer_min=low,
            integer_max=high,
            integer_width=width,
            clip=clip,
            missing=missing,
            missing_values=_tuple_of(missing_values),
        )

    def __post_init__(self) -> None:
        check_name(self.name)
        where = f"attribute {self.name!r}"
        if self.kind not in ATTRIBUTE_KINDS:
            raise SchemaError(
                f"{where}: type must be one of {', '.join(ATTRIBUTE_KINDS)}, got {self.kind!r}"
            )
        if not isinstance(self.clip, bool):
            raise SchemaError(f"{where}: clip must be true or false")
        if self.kind == "categorical":
            check_categorical(self, where)
        elif self.kind == "numeric":
            check_numeric(self, where)
        else:
            check_integer(self, where)
        check_missing(self, where)

    # -- codes ----------------------------------------------------------------------

    @property
    def integer_range(self) -> tuple[int, int, int]:
        """An integer attribute's (min, max, width)."""
        low, high, width = self.integer_min, self.integer_max, self.integer_width
        if low is None or high is None or width is None:
            raise SchemaError(f"attribute {self.name!r} is {self.kind}, not integer")
        return int(low), int(high), int(width)

    @property
    def value_size(self) -> int:
        """Number of codes that stand for a value (all but the missing code, if any)."""
        if self.kind == "categorical":
            return len(self.categories)
        if self.kind == "numeric":
            return len(self.edges) - 1
        low, high, width = self.integer_range
        return (high - low) // width + 1

    @property
    def size(self) -> int:
        """Number of codes (cells along this attribute's axis), the missing code included."""
        return self.value_size + (1 if self.missing else 0)

    @property
    def missing_code(self) -> int | None:
        """The code of "no value" (the last), or None without `missing`."""
        return self.value_size if self.missing else None

    @property
    def is_binned(self) -> bool:
        """Whether a code stands for more than one value: a numeric bin, or an integer
        bin of width > 1 (a one-integer last bin does not change that)."""
        if self.kind == "numeric":
            return True
        return self.kind == "integer" and self.integer_range[2] > 1

    def bin_interval(self, code: int) -> tuple[float, float, bool]:
        """The values code `code` holds: (low, high, closed_high).

        Numeric: the bin [e_i, e_{i+1}) — (e_i, e_{i+1}, False) — or the last bin
        [e_{k-1}, e_k] — closed_high True. Integer: the integers low..high it holds,
        both included (closed_high is always True; width 1 gives low == high).
        """
        if not 0 <= code < self.value_size:
            raise SchemaError(f"attribute {self.name!r} has no value code {code}")
        if self.kind == "numeric":
            edges = self.edges
            return edges[code], edges[code + 1], code == len(edges) - 2
        if self.kind == "integer":
            low, high = self.integer_bin(code)
            return low, high, True
        raise SchemaError(f"attribute {self.name!r} is categorical: its codes have no interval")

    def intervals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`bin_interval` of every value code at once: (lows, highs, closed_highs), float
        and bool arrays of `value_size` entries."""
        if self.kind == "numeric":
            edges = np.asarray(self.edges, dtype=np.float64)
            closed = np.zeros(len(edges) - 1, dtype=bool)
            closed[-1] = True
            return edges[:-1], edges[1:], closed
        if self.kind == "integer":
            edges = self.integer_edges()
            lows = edges[:-1].astype(np.float64)
            return lows, (edges[1:] - 1).astype(np.float64), np.ones(len(lows), dtype=bool)
        raise SchemaError(f"attribute {self.name!r} is categorical: its codes have no interval")

    def integer_bin(self, code: int) -> tuple[int, int]:
        """The integers (first, last, both included) integer code `code` holds."""
        low, high, width = self.integer_range
        first = low + code * width
        return first, min(first + width - 1, high)

    def integer_edges(self) -> np.ndarray:
        """An integer attribute's codes as bins over the numbers: code c is
        [edge_c, edge_{c+1}) with edge_c its first integer, and the last code's upper edge
        is max + 1 (int64, value_size + 1 entries). A number x (an integer) has code c
        exactly when edge_c <= x < edge_{c+1}."""
        low, high, width = self.integer_range
        edges = low + width * np.arange(self.value_size + 1, dtype=np.int64)
        edges[-1] = high + 1
        return edges

    def value_labels(self) -> list[str | int]:
        """One label per code with a value: the categorical value; the bin "[lo, hi)"
        (the last "[lo, hi]"); an integer attribute's value (width 1) or its bin
        "[first, next first)" (the last "[first, max]")."""
        if self.kind == "categorical":
            return list(self.categories)
        if self.kind == "numeric":
            return _bin_labels([format_number(e) for e in self.edges])
        low, high, width = self.integer_range
        if width == 1:
            return list(range(low, high + 1))
        edges = [str(e) for e in self.integer_edges().tolist()]
        edges[-1] = str(high)
        return _bin_labels(edges)

    def labels(self) -> list[str | int | None]:
        """One label per code: `value_labels`, then None (JSON null) for the missing code."""
        labels: list[str | int | None] = list(self.value_labels())
        if self.missing:
            labels.append(None)
        return labels

    def midpoints(self) -> np.ndarray:
        """The numeric value of each code *with a value* (the missing code has none, so
        the array has `value_size` entries): a numeric bin's midpoint; an integer
        attribute's value (width 1) or the mean of its bin's integers."""
        if self.kind == "numeric":
            edges = np.asarray(self.bins, dtype=np.float64)
            return (edges[:-1] + edges[1:]) / 2.0
        if self.kind == "integer":
            edges = self.integer_edges().astype(np.float64)
            # The integers first..last average (first + last) / 2, last = next first - 1.
            return (edges[:-1] + edges[1:] - 1.0) / 2.0
        raise SchemaError(
            f"attribute {self.name!r} is categorical and has no numeric value (moments and "
            "ranges need a numeric or integer attribute)"
        )

    @cached_property
    def _code_of_label(self) -> dict[str, int]:
        if self.is_binned:
            # Bin labels are matched without their spaces: "[0,18)" is "[0, 18)".
            return {str(label).replace(" ", ""): i for i, label in enumerate(self.value_labels())}
        return {str(label): i for i, label in enumerate(self.value_labels())}

    def encode_labels(self, labels: Iterable[object]) -> np.ndarray:
        """Codes of the given values (a query's `where` set or a group), sorted, unique.

        Categorical: the exact schema values. Numeric, and integer with width > 1: bin
        labels as `labels()` prints them (spaces optional). Integer with width 1: the
        values, as integers or integer strings.
        None is the missing code of an attribute with `missing`.
        An unknown label is a `SchemaError` naming it (and at most a few others).
        """
        if isinstance(labels, (str, bytes)):
            raise SchemaError(
                f"attribute {self.name!r}: expected a list of values, got a single string"
            )
        lookup = self._code_of_label
        codes: list[int] = []
        unknown: list[str] = []
        for label in labels:
            code = self._label_code(label, lookup)
            if code is None:
                unknown.append(quote(str(label)))
            else:
                codes.append(code)
        if unknown:
            shown = ", ".join(unknown[:5]) + (
                f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            )
            raise SchemaError(f"attribute {self.name!r}: unknown value(s) {shown}")
        return np.unique(np.asarray(codes, dtype=np.int64))

    def _label_code(self, label: object, lookup: Mapping[str, int]) -> int | None:
        if label is None:
            return self.missing_code
        if self.kind == "categorical":
            return lookup.get(label) if isinstance(label, str) else None
        if self.is_binned:
            return lookup.get(label.replace(" ", "")) if isinstance(label, str) else None
        # integer values: 3, "3", 3.0
        if isinstance(label, (bool, np.bool_)):
            return None
        if isinstance(label, (int, np.integer)):
            value = int(label)
        elif isinstance(label, (float, np.floating)):
            if not float(label).is_integer():
                return None
            value = int(label)
        elif isinstance(label, str):
            try:
                value = int(label)
            except ValueError:
                return None
        else:
            return None
        code = value - self.integer_range[0]
        return code if 0 <= code < self.value_size else None

    def codes_in_range(
        self, ge: float | None = None, lt: float | None = None, *, le: float | None = None
    ) -> np.ndarray:
        """Codes whose values all lie in the range of original values from `ge`
        (included) up to `lt` (excluded) or `le` (included); any bound may be omitted.

        The missing code is never in a range (it has no value). A code is selected when
        every value it holds is in the range; a range that holds some but not all of a
        code's values cuts it and is refused naming the bin. Numeric bins are
        [e_i, e_{i+1}) and the last [e_{k-1}, e_k]: `ge` and `lt` may fall on any edge,
        and `le` on the top edge e_k (which the closed last bin holds, so `lt` = e_k cuts
        it). Integer attributes hold integers, so a bound between two integers cuts
        nothing (`lt: 4.5` is `le: 4`). Clipped values count as the edge they were
        clamped to. A range outside the values selects no codes.
        """
        where = f"attribute {self.name!r}"
        if lt is not None and le is not None:
            raise SchemaError(f"{where}: give lt or le, not both")
        for bound_name, bound in (("ge", ge), ("lt", lt), ("le", le)):
            if bound is not None and (not is_real_number(bound) or math.isnan(float(bound))):
                raise SchemaError(f"{where}: range bound {bound_name} must be a number")
        if self.kind == "categorical":
            raise SchemaError(f"{where} is categorical: give a set of values, not a range")
        upper_name, upper = ("le", le) if le is not None else ("lt", lt)
        closed = le is not None
        if (
            ge is not None
            and upper is not None
            and not (float(ge) <= float(upper) if closed else float(ge) < float(upper))
        ):
            relation = "at most" if closed else "less than"
            raise SchemaError(
                f"{where}: empty range, ge ({format_number(float(ge))}) must be "
                f"{relation} {upper_name} ({format_number(float(upper))})"
            )
        lo = -math.inf if ge is None else float(ge)
        hi = math.inf if upper is None else float(upper)
        # An integer code holds the integers lows[c]..highs[c] (closed_highs all True).
        lows, highs, closed_highs = self.intervals()
        above = lows >= lo
        below = highs <= hi if closed else np.where(closed_highs, highs < hi, highs <= hi)
        none_above = np.where(closed_highs, highs < lo, highs <= lo)
        none_below = lows > hi if closed else lows >= hi
        cut = ~(above & below) & ~(none_above | none_below)
        if cut.any():
            code = int(np.flatnonzero(cut)[0])
            bound_name = "ge" if not above[code] else upper_name
            raise self._cut_error(code, bound_name, lo if bound_name == "ge" else hi)
        return np.flatnonzero(above & below).astype(np.int64)

    def _cut_error(self, code: int, bound_name: str, bound: float) -> SchemaError:
        label = self.value_labels()[code]
        if self.kind == "integer":
            low, high, width = self.integer_range
            hint = (
                f"bins hold {width} integers each from {low}; the last ends at {high}: use "
                "a bin's first integer for ge and lt, or its last for le"
            )
        else:
            edges = self.edges
            top = format_number(edges[-1])
            shown = ", ".join(format_number(e) for e in edges)
            if bound_name == "ge" and bound == edges[-1]:
                hint = f"ge: {top} holds only the value {top} itself, part of the last bin"
            elif bound_name == "lt" and bound == edges[-1]:
                hint = f"the last bin holds {top} itself: use le: {top} (or omit lt) to include it"
            elif bound_name == "le":
                hint = f"le must be the top edge {top}, or use lt at a bin edge (edges: {shown})"
            else:
                hint = f"use a bin edge (edges: {shown})"
        return SchemaError(
            f"attribute {self.name!r}: range bound {bound_name}={format_number(bound)} cuts "
            f"the bin {label}; {hint}"
        )

    # -- serialisation --------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any]
        if self.kind == "categorical":
            out = {"name": self.name, "type": "categorical", "values": list(self.values or ())}
        elif self.kind == "numeric":
            bins = [int(e) if e.is_integer() and abs(e) < 2**53 else e for e in self.bins or ()]
            out = {"name": self.name, "type": "numeric", "bins": bins, "clip": self.clip}
        else:
            low, high, width = self.integer_range
            if low == 0 and width == 1:  # the size form, as schemas have long written it
                out = {"name": self.name, "type": "integer", "size": high + 1, "clip": self.clip}
            else:
                out = {"name": self.name, "type": "integer", "min": low, "max": high}
                if width != 1:
                    out["width"] = width
                out["clip"] = self.clip
        if self.missing:
            out["missing"] = True
            if self.missing_values != DEFAULT_MISSING_VALUES:
                out["missing_values"] = list(self.missing_values)
        return out


def _tuple_of(texts: Iterable[str]) -> tuple[str, ...]:
    if isinstance(texts, (str, bytes)):
        raise SchemaError("missing_values must be a list of strings, not one string")
    return tuple(texts)


def _bin_labels(edges: list[str]) -> list[str | int]:
    """Labels of the bins between consecutive edges: "[a, b)", the last "[a, b]"."""
    labels: list[str | int] = [f"[{edges[i]}, {edges[i + 1]})" for i in range(len(edges) - 1)]
    labels[-1] = f"[{edges[-2]}, {edges[-1]}]"
    return labels
