"""Junction tree: coverage, running intersection, tree shape, cell counts and the cap."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from app.pgm.domain import Domain
from app.pgm.junction_tree import ModelTooLarge, build_junction_tree, model_cells, model_cells_with

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


def _plain_greedy_cliques(domain: Domain, sets, heuristic: str) -> list[frozenset[str]]:
    """Greedy elimination written out plainly with sets (the reference for the bitsets)."""
    size = dict(zip(domain.attributes, domain.sizes, strict=True))
    position = {a: i for i, a in enumerate(domain.attributes)}
    adjacency: dict[str, set[str]] = {a: set() for a in domain.attributes}
    for s in sets:
        for a in s:
            adjacency[a].update(b for b in s if b != a)

    def cost(a: str) -> tuple[int, int, int]:
        weight = size[a] * int(np.prod([size[b] for b in adjacency[a]], dtype=np.int64))
        fill = sum(
            1 for b, c in itertools.combinations(sorted(adjacency[a]), 2) if c not in adjacency[b]
        )
        return (
            (weight, 0, position[a]) if heuristic == "min_weight" else (fill, weight, position[a])
        )

    found: list[frozenset[str]] = []
    while adjacency:
        victim = min(adjacency, key=cost)
        neighbours = adjacency.pop(victim)
        found.append(frozenset(neighbours | {victim}))
        for a in neighbours:
            adjacency[a].discard(victim)
            adjacency[a].update(neighbours - {a})
    return [c for c in dict.fromkeys(found) if not any(c < other for other in found)]


@pytest.mark.parametrize("heuristic", ["min_fill", "min_weight"])
def test_greedy_elimination_matches_a_plain_reference(heuristic: str) -> None:
    rng = np.random.default_rng(1)
    for _ in range(60):
        count = int(rng.integers(1, 30))
        names = tuple(f"x{i}" for i in range(count))
        domain = Domain(names, tuple(int(s) for s in rng.integers(2, 20, size=count)))
        sets = [
            tuple(rng.choice(names, size=int(rng.integers(1, min(4, count) + 1)), replace=False))
            for _ in range(int(rng.integers(0, 40)))
        ]
        expected = _plain_greedy_cliques(domain, sets, heuristic)
        tree = build_junction_tree(domain, sets, heuristic=heuristic)
        assert {frozenset(c) for c in tree.cliques} == set(expected)
        assert model_cells(domain, sets, heuristic) == sum(domain.cells(c) for c in expected)


def test_model_cells_with_each_candidate_equals_model_cells_of_the_union() -> None:
    rng = np.random.default_rng(2)
    names = tuple(f"x{i}" for i in range(25))
    domain = Domain(names, tuple(int(s) for s in rng.integers(2, 20, size=len(names))))
    sets = [tuple(rng.choice(names, size=2, replace=False)) for _ in range(30)]
    # some candidates already measured together (the shortcut), some new
    candidates = sets[:5] + [tuple(rng.choice(names, size=2, replace=False)) for _ in range(20)]
    assert model_cells_with(domain, sets, candidates) == [
        model_cells(domain, [*sets, c]) for c in candidates
    ]
    cycle = CLIQUE_SETS["cycle"]
    # an edge the graph has, or one attribute, leaves the model as it is
    current = model_cells(_domain(), cycle)
    assert model_cells_with(_domain(), cycle, [("a", "b"), ("c",)]) == [current, current]
