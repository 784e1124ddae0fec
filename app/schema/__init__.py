"""Dataset schema: the public domain of every attribute, as the curator declares it.

The schema — not the data — fixes each attribute's codes (DESIGN.md, privacy model):
- ``categorical``: an ordered list of string values; code i is ``values[i]``.
- ``numeric``: bin edges e_0 < e_1 < … < e_k; code i is the half-open bin
  [e_i, e_{i+1}), except the last bin [e_{k-1}, e_k], which is closed. With ``clip``,
  values below e_0 (or above e_k) are clamped to that edge, so they count in the
  first (or last) bin.
- ``integer``: whole numbers ``min``..``max`` (both held); code i is the integer
  min + i, or with ``width`` w the bin [min + i·w, min + (i+1)·w), the last one closed
  at max. Labels are the integers themselves (width 1) or bin labels. The size form
  ``{"type": "integer", "size": n}`` and the plain size map ``{"age": 85}`` of API.md
  (as in ``adult-domain.json``) mean min 0, max n-1.
- Any kind with ``"missing": true``: one more code, the last, for "no value" (a CSV
  cell equal to one of ``missing_values``, default ``[""]``, or a Parquet null). Its
  label is None (JSON null); it lies in no range and has no midpoint.

`parse_schema` accepts both JSON forms of API.md and validates strictly; every
`SchemaError` names the attribute and what is wrong. `DatasetSchema.to_json` gives the
canonical full form, which `parse_schema` reads back to an equal schema.

Modules: `rules` (kinds, limits, `SchemaError`), `attribute` (`Attribute`), `dataset`
(`DatasetSchema`) and `parsing` (`parse_schema`); this package gathers their public
names.

Query helpers (`Attribute.encode_labels`, `Attribute.codes_in_range`) translate
values given in the original terms into codes. A range must not cut a bin: ``ge``
and ``lt`` must each fall on a bin edge (or outside the edges), and ``le`` on the top
edge, which the closed last bin holds, because the data inside a bin is not known to
the model; the error names the edges, which are public.
"""

from app.schema.attribute import Attribute
from app.schema.dataset import DatasetSchema
from app.schema.parsing import parse_schema
from app.schema.rules import (
    ATTRIBUTE_KINDS,
    DEFAULT_MISSING_VALUES,
    FORBIDDEN_NAME_CHARACTERS,
    MAX_ATTRIBUTE_SIZE,
    MAX_ATTRIBUTES,
    MAX_NAME_LENGTH,
    MAX_VALUE_LENGTH,
    AttributeKind,
    Label,
    SchemaError,
    format_number,
)

__all__ = [
    "ATTRIBUTE_KINDS",
    "DEFAULT_MISSING_VALUES",
    "FORBIDDEN_NAME_CHARACTERS",
    "MAX_ATTRIBUTES",
    "MAX_ATTRIBUTE_SIZE",
    "MAX_NAME_LENGTH",
    "MAX_VALUE_LENGTH",
    "Attribute",
    "AttributeKind",
    "DatasetSchema",
    "Label",
    "SchemaError",
    "format_number",
    "parse_schema",
]
