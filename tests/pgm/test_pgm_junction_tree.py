"""Junction tree: coverage, running intersection, tree shape, cell counts and the cap."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from app.pgm.domain import Domain
from app.pgm.junction_tree import ModelTooLarge, build_junction_tree, model_cells

CLIQUE_SETS = {
    "tree": [("a", "b"), ("b", "c"), ("b", "d"), ("d", "e")],
    "cycle": [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("e",)],
    "dense_cycle": [("a", "b", "c"), ("c", "d"), ("d", "e"), ("e", "a"), ("b", "e")],
    "singletons": [("a",), ("c",)],
    "disconnected": [("a", "b"), ("d", "e")],
}


def _domain() -> Domain:
    return Domain(("a", "b", "c", "d", "e", "f"), (2, 3, 4, 2, 3, 2))


def _assert_running_intersection(tree) -> None:
    # For every attribute, the cliques containing it form a connected subtree.
    for attr in tree.domain.attributes:
        holders = {i for i, c in enumerate(tree.cliques) if attr in c}
        assert holders, attr
        start = next(iter(holders))
        seen, frontier = {start}, [start]
        while frontier:
            i = frontier.pop()
            for j in tree.neighbours[i]:
                if j in holders and j not in seen:
                    seen.add(j)
                    frontier.append(j)
        assert seen == holders, f"{attr} held by a disconnected set of cliques"


@pytest.mark.parametrize("name", sorted(CLIQUE_SETS))
@pytest.mark.parametrize("heuristic", ["min_fill", "min_weight", "best"])
def test_junction_tree_properties(name: str, heuristic: str) -> None:
    domain = _domain()
    sets = CLIQUE_SETS[name]
    tree = build_junction_tree(domain, sets, heuristic=heuristic)
    # One tree over all cliques.
    assert len(tree.edges) == len(tree.cliques) - 1
    _assert_running_intersection(tree)
    # Every attribute set and every domain attribute is covered by a clique.
    for s in sets:
        assert any(set(s) <= set(c) for c in tree.cliques), s
    assert {a for c in tree.cliques for a in c} == set(domain.attributes)
    # Cliques are maximal and in domain order.
    for c, other in itertools.permutations(tree.cliques, 2):
        assert not set(c) <= set(other)
    for c in tree.cliques:
        assert c == domain.canonical(c)
    assert tree.total_cells == sum(int(np.prod(domain.shape(c))) for c in tree.cliques)
    assert model_cells(domain, sets, heuristic) == tree.total_cells
    # The message schedule visits every edge once in each direction, children first.
    assert len(tree.upward) == len(tree.edges)
    done: set[int] = set()
    for child, parent in tree.upward:
        assert parent not in done
        done.add(child)


def test_cycle_is_triangulated_with_a_chord() -> None:
    domain = _domain()
    tree = build_junction_tree(domain, CLIQUE_SETS["cycle"])
    # A 4-cycle a-b-c-d needs one chord: two triangles.
    three = [c for c in tree.cliques if len(c) == 3]
    assert len(three) == 2
    assert tree.separator(*tree.edges[0]) == domain.canonical(tree.separator(*tree.edges[0]))


def test_cap_refuses_with_cells_in_message() -> None:
    domain = _domain()
    cells = model_cells(domain, CLIQUE_SETS["dense_cycle"])
    build_junction_tree(domain, CLIQUE_SETS["dense_cycle"], max_cells=cells)
    with pytest.raises(ModelTooLarge) as info:
        build_junction_tree(domain, CLIQUE_SETS["dense_cycle"], max_cells=cells - 1)
    assert str(cells) in str(info.value).replace(",", "")
    assert info.value.cells == cells and info.value.cap == cells - 1
    assert isinstance(info.value, ValueError)


def test_clique_containing_picks_a_superset() -> None:
    tree = build_junction_tree(_domain(), CLIQUE_SETS["tree"])
    k = tree.clique_containing(("d", "b"))
    assert {"b", "d"} <= set(tree.cliques[k])
    with pytest.raises(KeyError):
        tree.clique_containing(("a", "e"))


def test_best_heuristic_takes_the_smaller_triangulation() -> None:
    # On random workloads the two greedy rules often disagree (in either direction);
    # "best" must always match the smaller of the two.
    rng = np.random.default_rng(0)
    disagreements = 0
    for _ in range(40):
        names = tuple("abcdefghij")
        domain = Domain(names, tuple(int(s) for s in rng.integers(2, 50, size=len(names))))
        sets = [
            tuple(rng.choice(names, size=int(rng.integers(2, 4)), replace=False)) for _ in range(6)
        ]
        fill = model_cells(domain, sets, "min_fill")
        weight = model_cells(domain, sets, "min_weight")
        disagreements += fill != weight
        best = build_junction_tree(domain, sets)  # the default
        assert best.total_cells == min(fill, weight) == model_cells(domain, sets)
        # Rebuilding from the chosen cliques (as a persisted model does) keeps them.
        assert set(build_junction_tree(domain, best.cliques).cliques) == set(best.cliques)
    assert disagreements > 0
