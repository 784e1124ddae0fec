"""Workloads: the marginals a mechanism answers, their candidates, and the size filter.

A workload is a weighted set of marginals (`normalise_workload`: attribute lists, or
(attributes, weight) pairs, in domain order). AIM's candidates are its downward
closure, weighted by their overlap with it (`candidate_weights`; `capped_weights`
caps them at the pairs'); MWEM's are the workload itself. `size_filter` keeps the
candidates whose junction tree, added to what is measured, stays within a cell limit;
`check_workload` refuses a workload none of whose marginals fits the model cap, before
anything is charged.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations

from app.pgm.domain import Domain
from app.pgm.junction_tree import model_cells, model_cells_with
from app.privacy.mechanisms.rounds import Attrs

WorkloadItem = Sequence[str] | tuple[Sequence[str], float]


def _marginal_and_weight(item: WorkloadItem) -> tuple[Attrs, float]:
    """(attributes, weight) of a workload item: an attribute list, or (attributes, weight)."""
    if isinstance(item, str):
        raise TypeError("a workload item is a list of attributes, not a string")
    if len(item) == 2:
        names, weight = item[0], item[1]
        if not isinstance(names, str) and isinstance(weight, (int, float)):
            return tuple(names), float(weight)
    attrs: list[str] = []
    for name in item:
        if not isinstance(name, str):
            raise ValueError(f"unknown attribute {name!r}: attribute names are strings")
        attrs.append(name)
    return tuple(attrs), 1.0


def normalise_workload(domain: Domain, workload: Iterable[WorkloadItem]) -> dict[Attrs, float]:
    """{marginal (domain order): weight}. Items are attribute lists or (attributes, weight)."""
    result: dict[Attrs, float] = {}
    for item in workload:
        attrs, weight = _marginal_and_weight(item)
        if not attrs:
            raise ValueError("a workload marginal names at least one attribute")
        if len(set(attrs)) != len(attrs):
            raise ValueError(f"duplicate attributes in workload marginal {attrs}")
        if not (weight > 0 and math.isfinite(weight)):
            raise ValueError("workload weights must be positive")
        key = domain.canonical(attrs)
        result[key] = result.get(key, 0.0) + weight
    if not result:
        raise ValueError("the workload is empty")
    return result


def downward_closure(domain: Domain, sets: Iterable[Attrs]) -> list[Attrs]:
    """Every non-empty subset of the sets, in domain order, smallest first."""
    found: set[Attrs] = set()
    for s in sets:
        s = domain.canonical(s)
        for k in range(1, len(s) + 1):
            found.update(combinations(s, k))
    position = {a: i for i, a in enumerate(domain.attributes)}
    return sorted(found, key=lambda c: (len(c), [position[a] for a in c]))


def candidate_weights(domain: Domain, workload: Mapping[Attrs, float]) -> dict[Attrs, float]:
    """AIM's candidates: the workload's downward closure, w_r = Σ_s c_s·|r ∩ s|."""
    return {
        r: math.fsum(c * len(set(r) & set(s)) for s, c in workload.items())
        for r in downward_closure(domain, workload)
    }


def capped_weights(weights: Mapping[Attrs, float]) -> dict[Attrs, float]:
    """The weights with none above the heaviest candidate's of at most two attributes.

    w_r grows with r's size, and the exponential mechanism's sensitivity is the largest
    w_r it is offered: with every 3-way marginal in the workload, the triples' weights
    (1.5 times the pairs' over ten attributes) would set it for every round they take
    part in, and make the selection among pairs as noisy. Capped, a triple scores at
    most as a pair with the same error less noise. A downward closure always holds its
    one-way marginals, so there is a cap."""
    cap = max(w for r, w in weights.items() if len(r) <= 2)
    return {r: min(w, cap) for r, w in weights.items()}


def covered_by(attrs: Attrs, measured: Iterable[Attrs]) -> bool:
    """Is `attrs` in the downward closure of the measured sets?"""
    wanted = set(attrs)
    return any(wanted <= set(m) for m in measured)


def check_workload(domain: Domain, workload: Mapping[Attrs, float], max_model_cells: int) -> None:
    """Refuse (ValueError) a workload none of whose marginals fits the model cap.

    Meant for the request validation, before anything is charged.
    """
    if not any(model_cells(domain, [r]) <= max_model_cells for r in workload):
        raise ValueError("no workload marginal fits within max_model_cells")


def size_filter(
    domain: Domain,
    measured: Sequence[Attrs],
    candidates: Iterable[Attrs],
    limit: float,
    hard_cap: int,
) -> list[Attrs]:
    """Candidates whose addition keeps the junction tree within `limit` cells.

    A candidate that does not grow the model (its hypothetical size is no more than the
    current one, e.g. a subset of a clique) is always allowed, as in AIM's code; nothing
    above `hard_cap` ever is.
    """
    current = model_cells(domain, measured)
    candidates = list(candidates)
    sizes = model_cells_with(domain, measured, candidates)
    return [
        r
        for r, cells in zip(candidates, sizes, strict=True)
        if cells <= hard_cap and (cells <= limit or cells <= current)
    ]
