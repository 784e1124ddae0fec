"""`parse_schema`: either JSON form of API.md (full form or size map), read strictly;
every refusal is a `SchemaError` naming the attribute and what is wrong."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from app.schema.attribute import Attribute
from app.schema.dataset import DatasetSchema
from app.schema.private_bins import parse_private_bins
from app.schema.rules import (
    ATTRIBUTE_KINDS,
    DEFAULT_MISSING_VALUES,
    MAX_ATTRIBUTES,
    SchemaError,
    check_name,
    is_real_number,
    quote,
)

_MISSING_KEYS = frozenset({"missing", "missing_values"})
_ALLOWED_KEYS: dict[str, frozenset[str]] = {
    "categorical": frozenset({"name", "type", "values"}) | _MISSING_KEYS,
    "numeric": frozenset({"name", "type", "bins", "clip"}) | _MISSING_KEYS,
    "integer": frozenset({"name", "type", "size", "min", "max", "width", "clip"}) | _MISSING_KEYS,
}
_REQUIRED_KEY = {"categorical": "values", "numeric": "bins", "integer": "size"}
_INTEGER_KEYS = ("min", "max", "width")


def _pairs_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise SchemaError(f"duplicate key {quote(key)} in schema JSON")
        result[key] = value
    return result


def parse_schema(obj: object) -> DatasetSchema:
    """Read either schema form of API.md (a dict, or its JSON text) and validate it.

    Full form: ``{"attributes": [{"name", "type": "categorical", "values": [...]},
    {"name", "type": "numeric", "bins": [...], "clip"?}, {"name", "type": "integer",
    "min", "max", "width"?, "clip"?} or its older form {"name", "type": "integer", "size",
    "clip"?} (min 0, max size-1), ...]}``; any attribute may add ``"missing": true`` and
    ``"missing_values": [...]`` (default ``[""]``); a drafted schema may add
    ``"private_bins": {"rho", "attributes"?}`` (`app.schema.private_bins`). Size map:
    ``{"age": 85, "sex": 2}`` (integer codes).
    Pass the JSON text when you have it: only then are duplicate keys detected.
    """
    if isinstance(obj, (bytes, bytearray)):
        try:
            obj = bytes(obj).decode("utf-8-sig")  # a file part may start with a BOM
        except UnicodeDecodeError:
            raise SchemaError("schema is not valid UTF-8") from None
    if isinstance(obj, str):
        try:
            obj = json.loads(obj, object_pairs_hook=_pairs_without_duplicates)
        except json.JSONDecodeError as exc:
            raise SchemaError(
                f"schema is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
        except SchemaError:
            raise  # a duplicate key, found by the hook
        except ValueError:  # a number of more digits than Python converts (4300)
            raise SchemaError("schema is not valid JSON: a number has too many digits") from None
    if not isinstance(obj, Mapping):
        raise SchemaError(
            'schema must be a JSON object: {"attributes": [...]} or a size map {"age": 85, ...}'
        )
    if "attributes" in obj and isinstance(obj["attributes"], list):
        unknown = sorted(set(obj) - {"attributes", "private_bins"})
        if unknown:
            raise SchemaError(
                f"unknown schema key(s) {', '.join(map(quote, unknown))}; the full form has "
                '"attributes" and, from a draft with private bins, "private_bins"'
            )
        entries = obj["attributes"]
        if len(entries) > MAX_ATTRIBUTES:
            raise SchemaError(
                f"schema has {len(entries)} attributes; at most {MAX_ATTRIBUTES} are allowed"
            )
        private_bins = parse_private_bins(obj["private_bins"]) if "private_bins" in obj else None
        return DatasetSchema(
            tuple(_parse_attribute(i, e) for i, e in enumerate(entries)), private_bins
        )
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
        check_name(name)
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
    name = check_name(entry["name"])
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
            f"{where}: unknown key(s) {', '.join(map(quote, map(str, unknown)))} for a {kind} "
            f"attribute (allowed: {', '.join(sorted(allowed))})"
        )
    required = _REQUIRED_KEY[kind]
    if kind == "integer" and required not in entry and not ("min" in entry and "max" in entry):
        raise SchemaError(f"{where}: an integer attribute needs 'min' and 'max' (or 'size')")
    if kind != "integer" and required not in entry:
        raise SchemaError(f"{where}: a {kind} attribute needs {required!r}")
    clip = entry.get("clip", False)
    if not isinstance(clip, bool):
        raise SchemaError(f"{where}: clip must be true or false, got {_json_type(clip)}")
    missing = entry.get("missing", False)
    if not isinstance(missing, bool):
        raise SchemaError(f"{where}: missing must be true or false, got {_json_type(missing)}")
    missing_values = entry.get("missing_values", list(DEFAULT_MISSING_VALUES))
    if not isinstance(missing_values, list):
        raise SchemaError(
            f"{where}: missing_values must be a list of strings, got {_json_type(missing_values)}"
        )
    if "missing_values" in entry and not missing:
        raise SchemaError(f'{where}: missing_values needs "missing": true')
    options: dict[str, Any] = {"missing": missing, "missing_values": missing_values}
    if kind == "categorical":
        values = entry["values"]
        if not isinstance(values, list):
            raise SchemaError(
                f"{where}: values must be a list of strings, got {_json_type(values)}"
            )
        return Attribute.categorical(name, values, **options)
    if kind == "numeric":
        bins = entry["bins"]
        if not isinstance(bins, list):
            raise SchemaError(f"{where}: bins must be a list of numbers, got {_json_type(bins)}")
        for edge_position, edge in enumerate(bins):
            if not is_real_number(edge):
                raise SchemaError(
                    f"{where}: bin edge {edge_position} must be a number, got {_json_type(edge)}"
                )
        return Attribute.numeric(name, bins, clip=clip, **options)
    return _parse_integer(where, name, entry, clip, options)


def _parse_integer(
    where: str, name: str, entry: Mapping[str, Any], clip: bool, options: dict[str, Any]
) -> Attribute:
    """`{"size": n}` (min 0, max n-1) or `{"min", "max", "width"?}`."""
    if "size" in entry:
        both = [key for key in ("min", "max") if key in entry]
        if both:
            raise SchemaError(
                f"{where}: give either size or min and max, not both (found size and "
                f"{' and '.join(both)})"
            )
        size = entry["size"]
        if not isinstance(size, int) or isinstance(size, bool):
            raise SchemaError(f"{where}: size must be a positive integer, got {_json_type(size)}")
    for key in _INTEGER_KEYS:
        if key in entry and (not isinstance(entry[key], int) or isinstance(entry[key], bool)):
            raise SchemaError(f"{where}: {key} must be an integer, got {_json_type(entry[key])}")
    width = entry.get("width", 1)
    if "size" in entry:
        return Attribute.integer(name, entry["size"], clip=clip, width=width, **options)
    return Attribute.integer(
        name, min=entry["min"], max=entry["max"], width=width, clip=clip, **options
    )
