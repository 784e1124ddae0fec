"""Dataset schema: the public domain of every attribute, as the curator declares it.

The schema — not the data — fixes each attribute's codes (DESIGN.md, privacy model):
- ``categorical``: an ordered list of string values; code i is ``values[i]``.
- ``numeric``: bin edges e_0 < e_1 < … < e_k; code i is the half-open bin
  [e_i, e_{i+1}), except the last bin [e_{k-1}, e_k], which is closed. With ``clip``,
  values below e_0 (or above e_k) are clamped to that edge, so they count in the
  first (or last) bin.
- ``integer``: codes 0..size-1 written as integers in the CSV (the plain size-map
  form ``{"age": 85}`` of API.md, as in ``adult-domain.json``).

`parse_schema` accepts both JSON forms of API.md and validates strictly; every
`SchemaError` names the attribute and what is wrong. `DatasetSchema.to_json` gives the
canonical full form, which `parse_schema` reads back to an equal schema.

Query helpers (`Attribute.encode_labels`, `Attribute.codes_in_range`) translate
values given in the original terms into codes. A numeric range must not cut a bin:
``ge`` and ``lt`` must each fall on a bin edge (or outside the edges), because the
data inside a bin is not known to the model; the error names the edges, which are
public.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np

from app.pgm.domain import Domain

AttributeKind = Literal["categorical", "numeric", "integer"]
ATTRIBUTE_KINDS: tuple[str, ...] = ("categorical", "numeric", "integer")

# Limits that keep one schema reasonable to store, show and model; cell limits of
# marginals and models are enforced elsewhere (settings).
MAX_ATTRIBUTES = 256
MAX_ATTRIBUTE_SIZE = 1_000_000
MAX_NAME_LENGTH = 128
MAX_VALUE_LENGTH = 1_000
# Attribute names appear in query strings such as `attrs=age,sex` and `where=sex:F,M`,
# so they may not contain the separators of those forms.
FORBIDDEN_NAME_CHARACTERS = frozenset(",:")

_ALLOWED_KEYS: dict[str, frozenset[str]] = {
    "categorical": frozenset({"name", "type", "values"}),
    "numeric": frozenset({"name", "type", "bins", "clip"}),
    "integer": frozenset({"name", "type", "size", "clip"}),
}
_REQUIRED_KEY = {"categorical": "values", "numeric": "bins", "integer": "size"}


class SchemaError(ValueError):
    """A schema, or a query's use of it, that the schema does not admit."""


def _quote(text: str, limit: int = 40) -> str:
    """A short, printable rendering of a (possibly long) string for messages."""
    shown = text if len(text) <= limit else text[: limit - 1] + "…"
    return repr(shown)


def format_number(x: float) -> str:
    """Bin edges as people write them: 18 rather than 18.0, 0.5 as 0.5."""
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(float(x))


def _is_valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, e.g. from JSON "\udc80"
        return False
    return True


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise SchemaError(f"attribute name must be a string, got {type(name).__name__}")
    if not name:
        raise SchemaError("attribute name must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise SchemaError(
            f"attribute name {_quote(name)} is longer than {MAX_NAME_LENGTH} characters"
        )
    if name != name.strip():
        raise SchemaError(f"attribute name {_quote(name)} has leading or trailing whitespace")
    bad = sorted(FORBIDDEN_NAME_CHARACTERS.intersection(name))
    if bad:
        raise SchemaError(
            f"attribute name {_quote(name)} contains {', '.join(map(repr, bad))}, "
            "which query strings use as separators"
        )
    if not name.isprintable() or not _is_valid_unicode(name):
        raise SchemaError(f"attribute name {_quote(name)} contains unprintable characters")
    return name


def _is_real_number(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(
        x, (bool, np.bool_)
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

    # -- construction -------------------------------------------------------------

    @classmethod
    def categorical(cls, name: str, values: Iterable[str]) -> Attribute:
        return cls(name=name, kind="categorical", values=tuple(values))

    @classmethod
    def numeric(cls, name: str, bins: Iterable[float], clip: bool = False) -> Attribute:
        try:
            edges = tuple(float(e) for e in bins)
        except (TypeError, ValueError, OverflowError):
            raise SchemaError(f"attribute {name!r}: bins must be finite numbers") from None
        return cls(name=name, kind="numeric", bins=edges, clip=clip)

    @classmethod
    def integer(cls, name: str, size: int, clip: bool = False) -> Attribute:
        return cls(name=name, kind="integer", integer_size=size, clip=clip)

    def __post_init__(self) -> None:
        _check_name(self.name)
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
                    f"{where}: value {_quote(value)} has leading or trailing whitespace "
                    "(CSV cells are stripped, so it could never match)"
                )
            if len(value) > MAX_VALUE_LENGTH:
                raise SchemaError(
                    f"{where}: value {_quote(value)} is longer than {MAX_VALUE_LENGTH} characters"
                )
            if not _is_valid_unicode(value):
                raise SchemaError(f"{where}: value {position} is not valid Unicode")
            if value in seen:
                raise SchemaError(f"{where}: duplicate value {_quote(value)}")
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
    def size(self) -> int:
        """Number of codes (cells along this attribute's axis)."""
        if self.kind == "categorical":
            assert self.values is not None
            return len(self.values)
        if self.kind == "numeric":
            assert self.bins is not None
            return len(self.bins) - 1
        assert self.integer_size is not None
        return int(self.integer_size)

    def labels(self) -> list[str]:
        """One label per code: the value, the bin "[lo, hi)" (last "[lo, hi]"), or "i"."""
        if self.kind == "categorical":
            assert self.values is not None
            return list(self.values)
        if self.kind == "numeric":
            assert self.bins is not None
            edges = [format_number(e) for e in self.bins]
            labels = [f"[{edges[i]}, {edges[i + 1]})" for i in range(len(edges) - 1)]
            labels[-1] = labels[-1][:-1] + "]"
            return labels
        return [str(code) for code in range(self.size)]

    def midpoints(self) -> np.ndarray:
        """The numeric value each code stands for: bin midpoints, or the integer code."""
        if self.kind == "numeric":
            edges = np.asarray(self.bins, dtype=np.float64)
            return (edges[:-1] + edges[1:]) / 2.0
        if self.kind == "integer":
            return np.arange(self.size, dtype=np.float64)
        raise SchemaError(
            f"attribute {self.name!r} is categorical and has no numeric value (moments and "
            "ranges need a numeric or integer attribute)"
        )

    @cached_property
    def _code_of_label(self) -> dict[str, int]:
        if self.kind == "numeric":
            # Bin labels are matched without their spaces: "[0,18)" is "[0, 18)".
            return {label.replace(" ", ""): i for i, label in enumerate(self.labels())}
        return {label: i for i, label in enumerate(self.labels())}

    def encode_labels(self, labels: Iterable[object]) -> np.ndarray:
        """Codes of the given values (a query's `where` set or a group), sorted, unique.

        Categorical: the exact schema values. Numeric: bin labels as `labels()` prints
        them (spaces optional). Integer: the codes, as integers or integer strings.
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
                unknown.append(_quote(str(label)))
            else:
                codes.append(code)
        if unknown:
            shown = ", ".join(unknown[:5]) + (
                f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            )
            raise SchemaError(f"attribute {self.name!r}: unknown value(s) {shown}")
        return np.unique(np.asarray(codes, dtype=np.int64))

    def _label_code(self, label: object, lookup: Mapping[str, int]) -> int | None:
        if self.kind == "categorical":
            return lookup.get(label) if isinstance(label, str) else None
        if self.kind == "numeric":
            return lookup.get(label.replace(" ", "")) if isinstance(label, str) else None
        # integer codes: 3, "3", 3.0
        if isinstance(label, (bool, np.bool_)):
            return None
        integral_float = isinstance(label, (float, np.floating)) and float(label).is_integer()
        if isinstance(label, (int, np.integer)) or integral_float:
            code = int(label)  # type: ignore[arg-type]
        elif isinstance(label, str):
            try:
                code = int(label)
            except ValueError:
                return None
        else:
            return None
        return code if 0 <= code < self.size else None

    def codes_in_range(self, ge: float | None = None, lt: float | None = None) -> np.ndarray:
        """Codes whose values all lie in the half-open range [ge, lt) of original values.

        Integer: the codes c with ge <= c < lt. Numeric: the bins inside the range; each
        bound given must lie on a bin edge or outside [e_0, e_k], or the range would cut
        a bin and is refused with the bin's edges. The last bin is closed, so `lt` cuts
        it unless lt > e_k (or lt is omitted). Clipped values count as the edge they were
        clamped to. A range that lies outside the edges selects no codes.
        """
        for bound_name, bound in (("ge", ge), ("lt", lt)):
            if bound is not None and (not _is_real_number(bound) or math.isnan(float(bound))):
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
            codes = np.arange(self.size, dtype=np.int64)
            return codes[(codes >= lo) & (codes < hi)]
        assert self.bins is not None
        edges = self.bins
        first, last = edges[0], edges[-1]
        # A bound cuts a bin when it lies strictly inside one; lt == e_k cuts the
        # closed last bin (it holds the value e_k itself).
        for bound_name, bound in (("ge", lo), ("lt", hi)):
            inside = first < bound < last or (bound_name == "lt" and bound == last)
            if inside and bound not in edges[:-1]:
                position = int(np.searchsorted(edges, bound, side="right")) - 1
                position = min(position, len(edges) - 2)
                cut = self.labels()[position]
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
        if self.kind == "categorical":
            return {"name": self.name, "type": "categorical", "values": list(self.values or ())}
        if self.kind == "numeric":
            bins = [int(e) if e.is_integer() and abs(e) < 2**53 else e for e in self.bins or ()]
            return {"name": self.name, "type": "numeric", "bins": bins, "clip": self.clip}
        return {"name": self.name, "type": "integer", "size": self.size, "clip": self.clip}


@dataclass(frozen=True)
class DatasetSchema:
    """The ordered attributes of a dataset; its order is the domain's order."""

    attributes: tuple[Attribute, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.attributes, tuple) or not all(
            isinstance(a, Attribute) for a in self.attributes
        ):
            raise SchemaError("attributes must be a tuple of Attribute")
        if not self.attributes:
            raise SchemaError("schema has no attributes")
        if len(self.attributes) > MAX_ATTRIBUTES:
            raise SchemaError(
                f"schema has {len(self.attributes)} attributes; "
                f"at most {MAX_ATTRIBUTES} are allowed"
            )
        seen: set[str] = set()
        for attribute in self.attributes:
            if attribute.name in seen:
                raise SchemaError(f"duplicate attribute name {attribute.name!r}")
            seen.add(attribute.name)

    @cached_property
    def _by_name(self) -> dict[str, Attribute]:
        return {a.name: a for a in self.attributes}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    def attribute(self, name: str) -> Attribute:
        try:
            return self._by_name[name]
        except (KeyError, TypeError):
            raise SchemaError(f"unknown attribute {_quote(str(name))}") from None

    def domain(self) -> Domain:
        return Domain(self.names, tuple(a.size for a in self.attributes))

    def to_json(self) -> dict[str, Any]:
        """Canonical full form (API.md); `parse_schema` reads it back to an equal schema."""
        return {"attributes": [a.to_json() for a in self.attributes]}


# -- parsing ----------------------------------------------------------------------------


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise SchemaError(f"duplicate key {_quote(key)} in schema JSON")
        result[key] = value
    return result


def parse_schema(obj: object) -> DatasetSchema:
    """Read either schema form of API.md (a dict, or its JSON text) and validate it.

    Full form: ``{"attributes": [{"name", "type": "categorical", "values": [...]},
    {"name", "type": "numeric", "bins": [...], "clip"?}, {"name", "type": "integer",
    "size", "clip"?}, ...]}``. Size map: ``{"age": 85, "sex": 2}`` (integer codes).
    Pass the JSON text when you have it: only then are duplicate keys detected.
    """
    if isinstance(obj, (bytes, bytearray)):
        try:
            obj = bytes(obj).decode("utf-8")
        except UnicodeDecodeError:
            raise SchemaError("schema is not valid UTF-8") from None
    if isinstance(obj, str):
        try:
            obj = json.loads(obj, object_pairs_hook=_pairs_without_duplicates)
        except json.JSONDecodeError as exc:
            raise SchemaError(
                f"schema is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
    if not isinstance(obj, Mapping):
        raise SchemaError(
            'schema must be a JSON object: {"attributes": [...]} or a size map {"age": 85, ...}'
        )
    if "attributes" in obj and isinstance(obj["attributes"], list):
        unknown = sorted(set(obj) - {"attributes"})
        if unknown:
            raise SchemaError(
                f"unknown schema key(s) {', '.join(map(_quote, unknown))}; the full form has only "
                '"attributes"'
            )
        entries = obj["attributes"]
        if len(entries) > MAX_ATTRIBUTES:
            raise SchemaError(
                f"schema has {len(entries)} attributes; at most {MAX_ATTRIBUTES} are allowed"
            )
        return DatasetSchema(tuple(_parse_attribute(i, e) for i, e in enumerate(entries)))
    return _parse_size_map(obj)


def _parse_size_map(sizes: Mapping[Any, Any]) -> DatasetSchema:
    if not sizes:
        raise SchemaError("schema has no attributes")
    if len(sizes) > MAX_ATTRIBUTES:
        raise SchemaError(
            f"schema has {len(sizes)} attributes; at most {MAX_ATTRIBUTES} are allowed"
        )
    attributes = []
    for name, size in sizes.items():
        _check_name(name)
        if not isinstance(size, int) or isinstance(size, bool):
            raise SchemaError(
                f"attribute {name!r}: size must be a positive integer, got {_json_type(size)} "
                '(a size map is {"name": size, ...}; or use {"attributes": [...]})'
            )
        attributes.append(Attribute.integer(name, size))
    return DatasetSchema(tuple(attributes))


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _parse_attribute(position: int, entry: object) -> Attribute:
    if not isinstance(entry, Mapping):
        raise SchemaError(f"attribute {position} must be an object, got {_json_type(entry)}")
    if "name" not in entry:
        raise SchemaError(f"attribute {position} has no name")
    name = _check_name(entry["name"])
    where = f"attribute {name!r}"
    kind = entry.get("type")
    if kind not in ATTRIBUTE_KINDS:
        raise SchemaError(
            f"{where}: type must be one of {', '.join(map(repr, ATTRIBUTE_KINDS))}, got "
            f"{_json_type(kind) if not isinstance(kind, str) else repr(kind)}"
        )
    allowed = _ALLOWED_KEYS[kind]
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise SchemaError(
            f"{where}: unknown key(s) {', '.join(map(_quote, map(str, unknown)))} for a {kind} "
            f"attribute (allowed: {', '.join(sorted(allowed))})"
        )
    required = _REQUIRED_KEY[kind]
    if required not in entry:
        raise SchemaError(f"{where}: a {kind} attribute needs {required!r}")
    clip = entry.get("clip", False)
    if not isinstance(clip, bool):
        raise SchemaError(f"{where}: clip must be true or false, got {_json_type(clip)}")
    if kind == "categorical":
        values = entry["values"]
        if not isinstance(values, list):
            raise SchemaError(
                f"{where}: values must be a list of strings, got {_json_type(values)}"
            )
        return Attribute.categorical(name, values)
    if kind == "numeric":
        bins = entry["bins"]
        if not isinstance(bins, list):
            raise SchemaError(f"{where}: bins must be a list of numbers, got {_json_type(bins)}")
        for edge_position, edge in enumerate(bins):
            if not _is_real_number(edge):
                raise SchemaError(
                    f"{where}: bin edge {edge_position} must be a number, got {_json_type(edge)}"
                )
        return Attribute.numeric(name, bins, clip=clip)
    size = entry["size"]
    if not isinstance(size, int) or isinstance(size, bool):
        raise SchemaError(f"{where}: size must be a positive integer, got {_json_type(size)}")
    return Attribute.integer(name, size, clip=clip)
