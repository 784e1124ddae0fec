"""`DatasetSchema`: the ordered attributes of a dataset, and the domain they make."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from app.pgm.domain import Domain
from app.schema.attribute import Attribute
from app.schema.private_bins import PrivateBins
from app.schema.rules import MAX_ATTRIBUTES, SchemaError, quote


@dataclass(frozen=True)
class DatasetSchema:
    """The ordered attributes of a dataset; its order is the domain's order."""

    attributes: tuple[Attribute, ...]
    # What the schema's draft spent on private bin edges (charged at upload), if any.
    private_bins: PrivateBins | None = None

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
            raise SchemaError(f"unknown attribute {quote(str(name))}") from None

    def domain(self) -> Domain:
        return Domain(self.names, tuple(a.size for a in self.attributes))

    def to_json(self) -> dict[str, Any]:
        """Canonical full form (API.md); `parse_schema` reads it back to an equal schema."""
        out: dict[str, Any] = {"attributes": [a.to_json() for a in self.attributes]}
        if self.private_bins is not None:
            out["private_bins"] = self.private_bins.to_json()
        return out
