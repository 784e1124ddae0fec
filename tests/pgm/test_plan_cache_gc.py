"""Cached query plans and the garbage collector."""

from __future__ import annotations

import gc

import numpy as np

from app.pgm.calibrated_tree import CalibratedTree
from app.pgm.domain import Domain
from app.pgm.junction_tree import JunctionTree


def test_cached_plans_are_untracked_by_the_garbage_collector() -> None:
    """Plans are cached by the thousand in the API: their contents must be atoms and
    tuples of atoms, which the collector stops tracking, or every full collection walks
    them all (it stalled the event loop for ~100 ms at 10k plans)."""
    rng = np.random.default_rng(3)
    domain = Domain(("a", "b", "c", "d", "e"), (3, 4, 2, 5, 3))
    cliques = [("a", "b", "c"), ("c", "d"), ("d", "e")]
    marginals = []
    for clique in cliques:
        table = rng.random(domain.shape(clique))
        marginals.append(table / table.sum())
    tree = CalibratedTree.from_potentials(
        JunctionTree(domain, cliques, [(0, 1), (1, 2)]),
        {c: np.log(m) for c, m in zip(cliques, marginals, strict=True)},
    )
    plan = tree.plan(("a", "e", "b"))
    assert any(op[0] == "einsum" for op in plan.elimination.operations)
    # A collection untracks a tuple once its items are untracked: one level of nesting
    # per pass.
    for _ in range(5):
        gc.collect()
    for part in (plan.elimination.operations, plan.sources, plan.scopes, *tree._plans):
        assert not gc.is_tracked(part), part
