"""`Attribute`: one attribute's public codes, checked when built, and the translations
between them and a request's own terms (labels, values, ranges)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from app.schema.rules import (
    ATTRIBUTE_KINDS,
    DEFAULT_MISSING_VALUES,
    MAX_ATTRIBUTE_SIZE,
    MAX_MISSING_VALUES,
    MAX_VALUE_LENGTH,
    AttributeKind,
    SchemaError,
    check_name,
    format_number,
    is_real_number,
    is_valid_unicode,
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
    integer_size: int | None = None
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
        size: int,
        clip: bool = False,
        *,
        missing: bool = False,
        missing_values: Iterable[str] = DEFAULT_MISSING_VALUES,
    ) -> Attribute:
        return cls(
            name=name,
            kind="integer",
            integer_size=size,
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
            self._check_categorical(where)
        elif self.kind == "numeric":
            self._check_numeric(where)
        else:
            self._check_integer(where)
        self._check_missing(where)

    def _check_missing(self, where: str) -> None:
        if not isinstance(self.missing, bool):
            raise SchemaError(f"{where}: missing must be true or false")
        texts = self.missing_values
        if not isinstance(texts, tuple):
            raise SchemaError(f"{where}: missing_values must be a list of strings")
        if not self.missing:
            if texts != DEFAULT_MISSING_VALUES:
                raise SchemaError(f'{where}: missing_values needs "missing": true')
            return
        if not texts:
            raise SchemaError(f"{where}: missing_values must not be empty")
        if len(texts) > MAX_MISSING_VALUES:
            raise SchemaError(f"{where}: at most {MAX_MISSING_VALUES} missing_values")
        if self.value_size + 1 > MAX_ATTRIBUTE_SIZE:
            raise SchemaError(
                f"{where}: with the missing code, more than {MAX_ATTRIBUTE_SIZE} codes"
            )
        values = set(self.values or ())
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

    def _check_categorical(self, where: str) -> None:
        if self.bins is not None or self.integer_size is not None or self.clip:
            raise SchemaError(f"{where}: a categorical attribute has only values")
        values = self.values
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

    def _check_numeric(self, where: str) -> None:
        if self.values is not None or self.integer_size is not None:
            raise SchemaError(f"{where}: a numeric attribute has only bins and clip")
        bins = self.bins
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

    def _check_integer(self, where: str) -> None:
        if self.values is not None or self.bins is not None:
            raise SchemaError(f"{where}: an integer attribute has only size and clip")
        size = self.integer_size
        if not isinstance(size, (int, np.integer)) or isinstance(size, (bool, np.bool_)):
            raise SchemaError(f"{where}: size must be a positive integer")
        if size < 1:
            raise SchemaError(f"{where}: size must be at least 1, got {size}")
        if size > MAX_ATTRIBUTE_SIZE:
            raise SchemaError(f"{where}: size {size} is larger than {MAX_ATTRIBUTE_SIZE}")

    # -- codes ----------------------------------------------------------------------

    @property
    def value_size(self) -> int:
        """Number of codes that stand for a value (all but the missing code, if any)."""
        if self.kind == "categorical":
            return len(self.categories)
        if self.kind == "numeric":
            return len(self.edges) - 1
        if self.integer_size is None:
            raise SchemaError(f"attribute {self.name!r} has no size")
        return int(self.integer_size)

    @property
    def size(self) -> int:
        """Number of codes (cells along this attribute's axis), the missing code included."""
        return self.value_size + (1 if self.missing else 0)

    @property
    def missing_code(self) -> int | None:
        """The code of "no value" (the last), or None without `missing`."""
        return self.value_size if self.missing else None

    def value_labels(self) -> list[str]:
        """One label per code with a value: the value, the bin "[lo, hi)" (last
        "[lo, hi]"), or "i"."""
        if self.kind == "categorical":
            return list(self.categories)
        if self.kind == "numeric":
            edges = [format_number(e) for e in self.edges]
            labels = [f"[{edges[i]}, {edges[i + 1]})" for i in range(len(edges) - 1)]
            labels[-1] = labels[-1][:-1] + "]"
            return labels
        return [str(code) for code in range(self.value_size)]

    def labels(self) -> list[str | None]:
        """One label per code: `value_labels`, then None (JSON null) for the missing code."""
        labels: list[str | None] = list(self.value_labels())
        if self.missing:
            labels.append(None)
        return labels

    def midpoints(self) -> np.ndarray:
        """The numeric value of each code *with a value* (the missing code has none, so
        the array has `value_size` entries): bin midpoints, or the integer code."""
        if self.kind == "numeric":
            edges = np.asarray(self.bins, dtype=np.float64)
            return (edges[:-1] + edges[1:]) / 2.0
        if self.kind == "integer":
            return np.arange(self.value_size, dtype=np.float64)
        raise SchemaError(
            f"attribute {self.name!r} is categorical and has no numeric value (moments and "
            "ranges need a numeric or integer attribute)"
        )

    @cached_property
    def _code_of_label(self) -> dict[str, int]:
        if self.kind == "numeric":
            # Bin labels are matched without their spaces: "[0,18)" is "[0, 18)".
            return {label.replace(" ", ""): i for i, label in enumerate(self.value_labels())}
        return {label: i for i, label in enumerate(self.value_labels())}

    def encode_labels(self, labels: Iterable[object]) -> np.ndarray:
        """Codes of the given values (a query's `where` set or a group), sorted, unique.

        Categorical: the exact schema values. Numeric: bin labels as `labels()` prints
        them (spaces optional). Integer: the codes, as integers or integer strings.
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
        if self.kind == "numeric":
            return lookup.get(label.replace(" ", "")) if isinstance(label, str) else None
        # integer codes: 3, "3", 3.0
        if isinstance(label, (bool, np.bool_)):
            return None
        if isinstance(label, (int, np.integer)):
            code = int(label)
        elif isinstance(label, (float, np.floating)):
            if not float(label).is_integer():
                return None
            code = int(label)
        elif isinstance(label, str):
            try:
                code = int(label)
            except ValueError:
                return None
        else:
            return None
        return code if 0 <= code < self.value_size else None

    def codes_in_range(self, ge: float | None = None, lt: float | None = None) -> np.ndarray:
        """Codes whose values all lie in the half-open range [ge, lt) of original values.

        The missing code is never in a range (it has no value).
        Integer: the codes c with ge <= c < lt. Numeric: the bins inside the range; each
        bound given must lie on a bin edge or outside [e_0, e_k], or the range would cut
        a bin and is refused with the bin's edges. The last bin is closed, so `lt` cuts
        it unless lt > e_k (or lt is omitted). Clipped values count as the edge they were
        clamped to. A range that lies outside the edges selects no codes.
        """
        for bound_name, bound in (("ge", ge), ("lt", lt)):
            if bound is not None and (not is_real_number(bound) or math.isnan(float(bound))):
                raise SchemaError(
                    f"attribute {self.name!r}: range bound {bound_name} must be a number"
                )
        if ge is not None and lt is not None and not float(ge) < float(lt):
            raise SchemaError(
                f"attribute {self.name!r}: empty range, ge ({ge}) must be less than lt ({lt})"
            )
        lo = -math.inf if ge is None else float(ge)
        hi = math.inf if lt is None else float(lt)
        if self.kind == "categorical":
            raise SchemaError(
                f"attribute {self.name!r} is categorical: give a set of values, not a range"
            )
        if self.kind == "integer":
            codes = np.arange(self.value_size, dtype=np.int64)
            return codes[(codes >= lo) & (codes < hi)]
        edges = self.edges
        first, last = edges[0], edges[-1]
        # A bound cuts a bin when it lies strictly inside one; lt == e_k cuts the
        # closed last bin (it holds the value e_k itself).
        for bound_name, bound in (("ge", lo), ("lt", hi)):
            inside = first < bound < last or (bound_name == "lt" and bound == last)
            if inside and bound not in edges[:-1]:
                position = int(np.searchsorted(edges, bound, side="right")) - 1
                position = min(position, len(edges) - 2)
                cut = self.value_labels()[position]
                hint = (
                    f"use lt > {format_number(last)} or omit lt to include it"
                    if bound == last
                    else "use a bin edge"
                )
                raise SchemaError(
                    f"attribute {self.name!r}: range bound {bound_name}={format_number(bound)} "
                    f"cuts the bin {cut}; {hint} (edges: "
                    f"{', '.join(format_number(e) for e in edges)})"
                )
        lower = np.asarray(edges[:-1])
        upper = np.asarray(edges[1:])
        selected = (lower >= lo) & (upper <= hi)
        # The closed last bin holds e_k itself, so it needs hi > e_k.
        selected[-1] = lower[-1] >= lo and hi > last
        return np.flatnonzero(selected).astype(np.int64)

    # -- serialisation --------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any]
        if self.kind == "categorical":
            out = {"name": self.name, "type": "categorical", "values": list(self.values or ())}
        elif self.kind == "numeric":
            bins = [int(e) if e.is_integer() and abs(e) < 2**53 else e for e in self.bins or ()]
            out = {"name": self.name, "type": "numeric", "bins": bins, "clip": self.clip}
        else:
            out = {"name": self.name, "type": "integer", "size": self.value_size, "clip": self.clip}
        if self.missing:
            out["missing"] = True
            if self.missing_values != DEFAULT_MISSING_VALUES:
                out["missing_values"] = list(self.missing_values)
        return out


def _tuple_of(texts: Iterable[str]) -> tuple[str, ...]:
    if isinstance(texts, (str, bytes)):
        raise SchemaError("missing_values must be a list of strings, not one string")
    return tuple(texts)
