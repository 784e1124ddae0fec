"""Counting a request's marginals batch by batch: the largest counted, the rest summed.

A request names marginals, many of them inside others (AIM's one-way marginals inside
its pairs). Only the maximal ones — those whose attributes are no proper subset of
another requested marginal's — are counted over the rows, one bincount per batch
each; a marginal with the same attributes as a counted one in another order, or
fewer, is summed from the smallest counted superset (axes summed, then permuted into
the requested order). Every count is exact integer arithmetic, so the sums equal a
count of their own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from app.pgm.domain import Domain
from app.records.engine import Marginal

# Above this many cells (and more cells than the batch has rows), a batch is counted by
# sorting its cell indices, not by a bincount as long as the marginal.
_SPARSE_CELLS = 1 << 22

# A thread pool's `map` (or the builtin): runs a function over items, results in order.
Mapper = Callable[[Callable[[Any], Any], Iterable[Any]], Iterable[Any]]


class MarginalCounter:
    """Accumulates the counts of a request's maximal marginals over batches of codes."""

    def __init__(self, domain: Domain, marginals: Sequence[Marginal]) -> None:
        self.domain = domain
        self.requested: list[Marginal] = list(dict.fromkeys(tuple(m) for m in marginals))
        for marginal in self.requested:
            if len(set(marginal)) != len(marginal):
                raise ValueError(f"the marginal {marginal!r} names an attribute twice")
            domain.shape(marginal)  # unknown attributes fail here, before any read
        self.counted: list[Marginal] = maximal(self.requested)
        self.shapes = [domain.shape(m) for m in self.counted]
        self.totals = [np.zeros(math.prod(shape), dtype=np.int64) for shape in self.shapes]
        self.rows = 0

    @property
    def attributes(self) -> tuple[str, ...]:
        """The attributes any counted marginal needs, in the domain's order."""
        needed = {a for m in self.counted for a in m}
        return tuple(a for a in self.domain.attributes if a in needed)

    def add(self, codes: Mapping[str, np.ndarray], rows: int, mapper: Mapper | None = None) -> None:
        """Count one batch: `codes` by attribute (non-negative integers, `rows` of each).
        `mapper` (a thread pool's `map`) may count the marginals side by side: each
        task adds to its own marginal's totals only."""
        tasks = range(len(self.counted))
        run = mapper if mapper is not None else map
        for _ in run(lambda index: self._add_one(index, codes, rows), tasks):
            pass
        self.rows += rows

    def _add_one(self, index: int, codes: Mapping[str, np.ndarray], rows: int) -> None:
        marginal, shape, totals = self.counted[index], self.shapes[index], self.totals[index]
        flat = flat_cells(marginal, shape, codes, rows)
        if totals.size > _SPARSE_CELLS and totals.size > rows:
            cells, counts = np.unique(flat, return_counts=True)
            totals[cells] += counts
        else:
            totals += np.bincount(flat, minlength=totals.size)

    def result(self) -> dict[Marginal, np.ndarray]:
        """Every requested marginal: counted, or summed from its smallest counted superset."""
        out: dict[Marginal, np.ndarray] = {}
        for marginal in self.requested:
            supersets = [i for i, m in enumerate(self.counted) if set(marginal) <= set(m)]
            best = min(supersets, key=lambda i: self.totals[i].size)
            out[marginal] = summed(
                self.totals[best], self.counted[best], self.shapes[best], marginal
            )
        return out


def maximal(marginals: Sequence[Marginal]) -> list[Marginal]:
    """The marginals whose attributes are in no other's (one of each set of attributes)."""
    chosen: list[Marginal] = []
    seen: set[frozenset[str]] = set()
    sets = [frozenset(m) for m in marginals]
    for marginal, attrs in zip(marginals, sets, strict=True):
        if attrs in seen or any(attrs < other for other in sets):
            continue
        seen.add(attrs)
        chosen.append(marginal)
    return chosen


def flat_cells(
    marginal: Marginal, shape: tuple[int, ...], codes: Mapping[str, np.ndarray], rows: int
) -> np.ndarray:
    """Each row's cell of the marginal, row-major over `shape` (intp)."""
    if not marginal:
        return np.zeros(rows, dtype=np.intp)
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    # A fresh array (the codes are shared by every marginal), accumulated in place.
    flat: np.ndarray = np.multiply(codes[marginal[0]], strides[0], dtype=np.intp)
    for attribute, stride in zip(marginal[1:], strides[1:], strict=True):
        column = codes[attribute]
        if stride == 1:
            flat += column
        else:
            flat += np.multiply(column, stride, dtype=np.intp)
    return flat


def summed(
    totals: np.ndarray, counted: Marginal, shape: tuple[int, ...], marginal: Marginal
) -> np.ndarray:
    """The counts of `marginal` (row-major in its order) from those of a superset."""
    if tuple(marginal) == tuple(counted):
        return totals.copy()
    table = totals.reshape(shape)
    dropped = tuple(i for i, a in enumerate(counted) if a not in marginal)
    if dropped:
        table = table.sum(axis=dropped, dtype=np.int64)
    remaining = [a for a in counted if a in marginal]
    order = [remaining.index(a) for a in marginal]
    return np.ascontiguousarray(np.transpose(table, order)).reshape(-1)
