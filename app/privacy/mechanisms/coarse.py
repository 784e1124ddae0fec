"""Coarse marginals: counts over groups of consecutive values instead of single values.

A coarse marginal over attributes A splits each attribute's n_i codes (0..n_i − 1, in the
schema's order: a numeric attribute's bins from low to high) into g_i = min(n_i, G) runs
of consecutive codes of nearly equal width (`numpy.array_split`'s) and counts the rows
in every combination of runs. Its answer is Q·μ_A for a 0/1 matrix Q, a linear query
the fit (`app.pgm`) takes as it is, and adding or removing one row moves it by one in
one cell, as it moves the full marginal: the same sensitivity, so a measurement at σ
costs what the full marginal's does.

AIM offers a pair's coarse form (`coarse_form`: the pair's attribute of at most G values
kept whole, the other's values in G runs; G is `MechanismOptions.coarse_groups`) where
its noise filter leaves the full pair out (`with_coarse_forms`,
`without_needless_forms`). On a small table a pair of a three-valued attribute and a
nine-valued one has 27 cells, most holding few rows and many carrying more noise than
rows; its 3 × 3 form has nine cells of many rows each and keeps the small attribute's
dependence on where the other's values lie. Which forms are offered follows from public
sizes and the noise filter's decision (post-processing), so offering them costs
nothing; the exponential mechanism picks among full and coarse candidates alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import scipy.sparse as sp

from app.pgm.domain import Domain

Attrs = tuple[str, ...]


@dataclass(frozen=True)
class Coarse:
    """A coarse marginal: attribute i's `sizes[i]` codes in `groups[i]` runs."""

    attributes: Attrs
    sizes: tuple[int, ...]
    groups: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", tuple(self.attributes))
        object.__setattr__(self, "sizes", tuple(int(n) for n in self.sizes))
        object.__setattr__(self, "groups", tuple(int(g) for g in self.groups))
        if not (len(self.attributes) == len(self.sizes) == len(self.groups) > 0):
            raise ValueError("a coarse marginal names one size and one group count an attribute")
        if any(not 1 <= g <= n for g, n in zip(self.groups, self.sizes, strict=True)):
            raise ValueError("an attribute's groups must number between 1 and its values")

    def __len__(self) -> int:
        """How many attributes (as `len` of a marginal's attribute tuple)."""
        return len(self.attributes)

    @property
    def cells(self) -> int:
        return math.prod(self.groups)

    def ranges(self) -> list[list[tuple[int, int]]]:
        """Per attribute, each group's first and last code."""
        return [
            [(int(run[0]), int(run[-1])) for run in np.array_split(np.arange(n), g)]
            for n, g in zip(self.sizes, self.groups, strict=True)
        ]

    def project(self, counts: np.ndarray) -> np.ndarray:
        """The coarse answer (flat, row-major over the groups) of a full marginal's counts,
        Q·μ: integer counts stay integer."""
        return np.asarray(self.query @ np.asarray(counts).ravel())

    @cached_property
    def query(self) -> sp.csr_matrix:
        """Q, the 0/1 matrix of the groups: one row per coarse cell, over the full cells
        (int64; a `Measurement` takes it as floats)."""
        matrix = sp.csr_matrix(np.ones((1, 1), dtype=np.int64))
        for n, runs in zip(self.sizes, self.ranges(), strict=True):
            widths = [last - first + 1 for first, last in runs]
            rows = np.repeat(np.arange(len(runs)), widths)
            ones = np.ones(n, dtype=np.int64)
            one = sp.csr_matrix((ones, (rows, np.arange(n))), shape=(len(runs), n))
            matrix = sp.kron(matrix, one, format="csr")
        return matrix

    def to_dict(self) -> dict[str, Any]:
        return {"sizes": list(self.sizes), "groups": list(self.groups)}

    @classmethod
    def from_dict(cls, attributes: Sequence[str], data: Mapping[str, Any]) -> Coarse:
        return cls(tuple(attributes), tuple(data["sizes"]), tuple(data["groups"]))


Candidate = Attrs | Coarse


def coarse_form(domain: Domain, pair: Attrs, groups: int) -> Coarse | None:
    """The pair's coarse form: its attribute of at most `groups` values kept whole, the
    other's values in `groups` runs; None unless exactly one has more than `groups`."""
    sizes = tuple(domain.size_of(a) for a in pair)
    if len(pair) != 2 or sum(n > groups for n in sizes) != 1:
        return None
    return Coarse(pair, sizes, tuple(min(n, groups) for n in sizes))


def attributes_of(candidate: Candidate) -> Attrs:
    return candidate.attributes if isinstance(candidate, Coarse) else candidate


def with_coarse_forms(
    domain: Domain,
    candidates: Sequence[Attrs],
    weights: Mapping[Attrs, float],
    groups: int | None,
) -> tuple[list[Candidate], dict[Candidate, float]]:
    """The candidates and the coarse forms of their pairs (at most `groups` groups an
    attribute; None: no forms), each form weighted as its pair (the workload marginals
    it informs are the pair's)."""
    offered: list[Candidate] = list(candidates)
    offered_weights: dict[Candidate, float] = {r: w for r, w in weights.items()}
    if groups is None:
        return offered, offered_weights
    for r in candidates:
        form = coarse_form(domain, r, groups) if len(r) == 2 else None
        if form is not None:
            offered.append(form)
            offered_weights[form] = weights[r]
    return offered, offered_weights


def without_needless_forms(passing: Sequence[Candidate]) -> list[Candidate]:
    """What the noise filter passed, less the coarse form of a pair that passed in full:
    a form is for the pairs whose full marginal is too noisy to measure."""
    full = {r for r in passing if not isinstance(r, Coarse)}
    return [r for r in passing if not (isinstance(r, Coarse) and r.attributes in full)]
