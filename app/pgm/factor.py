"""Factor: a float64 numpy array whose axes are named attributes of a domain.

Products broadcast over the union of the two factors' attributes; marginalising
sums an axis out (or log-sum-exps it, for log-space factors). The axis order of a
factor is its `domain.attributes`; `transpose`/`expand` move it to another order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from app.pgm.domain import Domain, DomainError


@dataclass(frozen=True, eq=False)
class Factor:
    domain: Domain
    values: np.ndarray

    def __post_init__(self) -> None:
        if self.values.shape != self.domain.sizes:
            raise DomainError(
                f"factor values of shape {self.values.shape} "
                f"do not match domain {self.domain.sizes}"
            )

    @classmethod
    def zeros(cls, domain: Domain) -> Factor:
        return cls(domain, np.zeros(domain.sizes))

    @classmethod
    def ones(cls, domain: Domain) -> Factor:
        return cls(domain, np.ones(domain.sizes))

    @property
    def attributes(self) -> tuple[str, ...]:
        return self.domain.attributes

    def transpose(self, attrs: Iterable[str]) -> Factor:
        """The same factor with its axes in the order `attrs` (a permutation of its own)."""
        order = tuple(attrs)
        if set(order) != set(self.attributes) or len(order) != len(self.attributes):
            raise DomainError(f"{order} is not a permutation of {self.attributes}")
        axes = [self.attributes.index(a) for a in order]
        return Factor(self.domain.project(order), np.transpose(self.values, axes))

    def expand(self, domain: Domain) -> Factor:
        """Broadcast to `domain` (a superset of this factor's attributes), in its order."""
        missing = [a for a in self.attributes if a not in domain]
        if missing:
            raise DomainError(f"cannot expand: {missing} not in target domain")
        own = [a for a in domain.attributes if a in set(self.attributes)]
        values = self.transpose(own).values
        shape = [domain.size_of(a) if a in set(self.attributes) else 1 for a in domain.attributes]
        values = values.reshape(shape)
        return Factor(domain, np.broadcast_to(values, domain.sizes).copy())

    def _aligned(self, other: Factor) -> tuple[Domain, np.ndarray, np.ndarray]:
        names = self.attributes + tuple(
            a for a in other.attributes if a not in set(self.attributes)
        )
        sizes = self.domain.sizes + tuple(
            other.domain.size_of(a) for a in names[len(self.attributes) :]
        )
        joint = Domain(names, sizes)

        def view(f: Factor) -> np.ndarray:
            own = [a for a in names if a in set(f.attributes)]
            v = f.transpose(own).values
            return v.reshape([joint.size_of(a) if a in set(f.attributes) else 1 for a in names])

        return joint, view(self), view(other)

    def __mul__(self, other: Factor | float) -> Factor:
        if not isinstance(other, Factor):
            return Factor(self.domain, self.values * other)
        joint, a, b = self._aligned(other)
        return Factor(joint, a * b)

    def __add__(self, other: Factor | float) -> Factor:
        if not isinstance(other, Factor):
            return Factor(self.domain, self.values + other)
        joint, a, b = self._aligned(other)
        return Factor(joint, a + b)

    def __sub__(self, other: Factor | float) -> Factor:
        if not isinstance(other, Factor):
            return Factor(self.domain, self.values - other)
        joint, a, b = self._aligned(other)
        return Factor(joint, a - b)

    def _axes(self, attrs: Iterable[str]) -> tuple[int, ...]:
        return tuple(self.attributes.index(a) for a in attrs)

    def sum_out(self, attrs: Iterable[str]) -> Factor:
        drop = set(attrs)
        keep = tuple(a for a in self.attributes if a not in drop)
        values = self.values.sum(axis=self._axes(a for a in self.attributes if a in drop))
        return Factor(self.domain.project(keep), np.asarray(values, dtype=float))

    def logsumexp_out(self, attrs: Iterable[str]) -> Factor:
        drop = set(attrs)
        keep = tuple(a for a in self.attributes if a not in drop)
        axes = self._axes(a for a in self.attributes if a in drop)
        values = logsumexp(self.values, axis=axes) if axes else self.values
        return Factor(self.domain.project(keep), np.asarray(values, dtype=float))

    def project(self, attrs: Iterable[str]) -> Factor:
        """Sum out every attribute not in `attrs`; axes in the order of `attrs`."""
        order = tuple(attrs)
        keep = set(order)
        return self.sum_out(a for a in self.attributes if a not in keep).transpose(order)

    def log_project(self, attrs: Iterable[str]) -> Factor:
        """Log-sum-exp out every attribute not in `attrs` (log-space marginal)."""
        order = tuple(attrs)
        keep = set(order)
        return self.logsumexp_out(a for a in self.attributes if a not in keep).transpose(order)

    def exp(self) -> Factor:
        return Factor(self.domain, np.exp(self.values))

    def log(self) -> Factor:
        with np.errstate(divide="ignore"):
            return Factor(self.domain, np.log(self.values))

    def total(self) -> float:
        return float(self.values.sum())

    def logsumexp(self) -> float:
        return float(logsumexp(self.values))
