"""What the gate's reader counts, and how it answers from what it counted.

An access asks for every marginal it needs at once (a measurement job's list) or names
the marginals the job will need later (`preload`: AIM's or MWEM's workload, whose
subsets are every candidate). The reader counts only the maximal sets among them, in
one scan of the records, and keeps those counts for the job's later rounds; every
smaller marginal is summed from a kept superset (the other axes summed, the rest
transposed to the order asked for). A request no kept superset covers is counted
again, in a new scan.

Pure numpy over counts: this module never sees a row. The counting itself (a bincount
of stored columns, or an engine's scan of a registered source) is the gate's
(`app.services.gate`), which records the access before it reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from app.pgm.domain import Domain

Marginal = tuple[str, ...]


def marginals_of(requests: Iterable[Sequence[str]]) -> list[Marginal]:
    """The requests as attribute tuples (duplicates dropped, order kept); TypeError for a
    bare string, which would otherwise read as a marginal over its letters."""
    found: list[Marginal] = []
    for request in requests:
        if isinstance(request, str):
            raise TypeError("a marginal is a sequence of attribute names, not a string")
        marginal = tuple(request)
        if len(set(marginal)) != len(marginal):
            raise ValueError(f"duplicate attributes in marginal {marginal}")
        if marginal not in found:
            found.append(marginal)
    return found


def maximal(marginals: Iterable[Marginal]) -> list[Marginal]:
    """The marginals that no other one contains (a set counted once, the first order it
    was asked in), in the order first asked."""
    unique: dict[frozenset[str], Marginal] = {}
    for marginal in marginals:
        unique.setdefault(frozenset(marginal), marginal)
    # Only a larger set can contain another: compare each with the larger ones only.
    by_size = sorted(unique, key=len, reverse=True)
    kept: set[frozenset[str]] = set()
    for position, candidate in enumerate(by_size):
        larger = (s for s in by_size[:position] if len(s) > len(candidate))
        if not any(candidate < s for s in larger):
            kept.add(candidate)
    return [m for key, m in unique.items() if key in kept]


def project(counts: np.ndarray, have: Marginal, want: Marginal) -> np.ndarray:
    """Counts over `want` (flat, row-major in its order, a new array) from `counts` over
    `have` (shaped by its attributes' sizes), which contains every attribute of `want`."""
    drop = tuple(i for i, a in enumerate(have) if a not in want)
    summed = counts.sum(axis=drop) if drop else counts
    remaining = [a for a in have if a in want]
    order = [remaining.index(a) for a in want]
    return np.array(summed.transpose(order), dtype=np.int64, copy=True).ravel()


class CountedMarginals:
    """The counts one job has made so far (one array per maximal set counted), kept while
    their total stays within `max_cells`; the oldest go first when a new scan needs room.

    `plan` says what a new scan must count; `add` keeps its counts; `get` answers from a
    kept superset. Never read outside an open gate: the gate guards every call.
    """

    def __init__(self, domain: Domain, max_cells: int) -> None:
        if max_cells < 1:
            raise ValueError("max_cells must be positive")
        self.domain = domain
        self.max_cells = max_cells
        self._kept: dict[Marginal, np.ndarray] = {}

    @property
    def kept(self) -> list[Marginal]:
        return list(self._kept)

    @property
    def cells(self) -> int:
        return sum(int(a.size) for a in self._kept.values())

    def cover(self, attrs: Marginal) -> Marginal | None:
        """The smallest kept marginal containing every attribute of `attrs`, or None."""
        wanted = set(attrs)
        covering = [m for m in self._kept if wanted <= set(m)]
        if not covering:
            return None
        return min(covering, key=lambda m: self.domain.cells(m))

    def plan(self, needed: Sequence[Marginal], preload: Sequence[Marginal] = ()) -> list[Marginal]:
        """The maximal sets one scan should count: enough to answer every `needed` marginal
        no kept one covers, plus what of `preload` is uncovered and fits in the room
        `max_cells` leaves beside them and the kept counts (in the order given; what does
        not fit is counted when asked for, so a later scan never pushes out counts for a
        preload). Empty if every needed marginal is covered already."""
        uncovered = [m for m in needed if self.cover(m) is None]
        if not uncovered:
            return []
        optional = [
            m for m in preload if self.cover(m) is None and self.domain.cells(m) <= self.max_cells
        ]
        pool = maximal([*uncovered, *optional])
        chosen: list[Marginal] = []
        total = self.cells
        for m in uncovered:
            if any(set(m) <= set(c) for c in chosen):
                continue
            # the smallest set of the pool containing m that fits the room left, else m
            fitting = [
                p
                for p in pool
                if set(m) <= set(p) and total + self.domain.cells(p) <= self.max_cells
            ]
            pick = min(fitting, key=self.domain.cells) if fitting else m
            chosen.append(pick)
            total += self.domain.cells(pick)
        for p in pool:
            if any(set(p) <= set(c) for c in chosen):
                continue
            cells = self.domain.cells(p)
            if total + cells <= self.max_cells:
                chosen.append(p)
                total += cells
        return maximal(chosen)

    def add(self, counted: Mapping[Marginal, np.ndarray]) -> None:
        """Keep a scan's counts (flat or shaped; int64), dropping the oldest kept arrays (not
        these) while the total is over `max_cells`, and any kept one a new one contains."""
        shaped = {
            m: np.asarray(a, dtype=np.int64).reshape(self.domain.shape(m))
            for m, a in counted.items()
        }
        for m in list(self._kept):
            if any(set(m) <= set(new) for new in shaped):
                del self._kept[m]
        total = self.cells + sum(int(a.size) for a in shaped.values())
        for m in list(self._kept):
            if total <= self.max_cells:
                break
            total -= int(self._kept.pop(m).size)
        self._kept.update(shaped)

    def get(self, attrs: Marginal) -> np.ndarray:
        """Exact counts over `attrs` (flat int64, row-major in that order) from a kept
        superset; KeyError if none covers it (the caller plans a scan first)."""
        have = self.cover(attrs)
        if have is None:
            raise KeyError(attrs)
        return project(self._kept[have], have, attrs)

    def forget(self) -> None:
        self._kept.clear()
