"""Domain: the ordered, named attributes of a table and the number of codes of each.

Every array in `app.pgm` is laid out over a domain: one axis per attribute, in the
domain's order, of the attribute's size. A clique or query names a subset of the
attributes; `Domain.project` gives the sub-domain in canonical (domain) order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from math import prod


class DomainError(ValueError):
    """An attribute name or size that the domain does not admit."""


@dataclass(frozen=True)
class Domain:
    attributes: tuple[str, ...]
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.attributes) != len(self.sizes):
            raise DomainError("attributes and sizes differ in length")
        if len(set(self.attributes)) != len(self.attributes):
            raise DomainError("duplicate attribute names")
        for name, size in zip(self.attributes, self.sizes, strict=True):
            if int(size) != size or size < 1:
                raise DomainError(f"attribute {name!r} must have a positive integer size")

    @classmethod
    def from_sizes(cls, sizes: Mapping[str, int]) -> Domain:
        return cls(tuple(sizes), tuple(int(s) for s in sizes.values()))

    @cached_property
    def _position(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.attributes)}

    def __contains__(self, name: object) -> bool:
        return name in self._position

    def __len__(self) -> int:
        return len(self.attributes)

    def __iter__(self) -> Iterator[str]:
        return iter(self.attributes)

    def index(self, name: str) -> int:
        try:
            return self._position[name]
        except KeyError:
            raise DomainError(f"unknown attribute {name!r}") from None

    def size_of(self, name: str) -> int:
        return self.sizes[self.index(name)]

    def canonical(self, attrs: Iterable[str]) -> tuple[str, ...]:
        """The attributes, deduplicated, in domain order."""
        wanted = set(attrs)
        for name in wanted:
            self.index(name)
        return tuple(a for a in self.attributes if a in wanted)

    def project(self, attrs: Iterable[str]) -> Domain:
        """The sub-domain over `attrs`, in the order given (`canonical` first for domain order)."""
        names = tuple(attrs)
        if len(set(names)) != len(names):
            raise DomainError("duplicate attribute names")
        return Domain(names, tuple(self.size_of(a) for a in names))

    def shape(self, attrs: Iterable[str] | None = None) -> tuple[int, ...]:
        if attrs is None:
            return self.sizes
        return tuple(self.size_of(a) for a in attrs)

    def cells(self, attrs: Iterable[str] | None = None) -> int:
        """Number of cells of the table over `attrs` (all attributes by default)."""
        return prod(self.shape(attrs))

    def to_dict(self) -> dict[str, int]:
        return dict(zip(self.attributes, self.sizes, strict=True))
