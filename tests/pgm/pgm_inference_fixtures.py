"""Random small models and brute-force answers shared by the pgm inference tests.

Not a test module: imported by test_pgm_{model,elimination,queries,sampling}.py.
"""

from __future__ import annotations

import numpy as np

from app.pgm.domain import Domain
from app.pgm.junction_tree import build_junction_tree
from app.pgm.model import GraphicalModel

KINDS = ("tree", "cyclic", "singletons")


def random_clique_sets(
    kind: str, attrs: list[str], rng: np.random.Generator
) -> list[tuple[str, ...]]:
    n = len(attrs)
    if kind == "tree":
        return [(attrs[i], attrs[int(rng.integers(0, i))]) for i in range(1, n)]
    if kind == "cyclic":
        cycle = [(attrs[i], attrs[(i + 1) % n]) for i in range(n)]
        extra = tuple(str(a) for a in rng.choice(attrs, size=min(3, n), replace=False))
        return [*cycle, extra]
    if kind == "singletons":
        return [(a,) for a in attrs]
    raise ValueError(kind)


def random_model(kind: str, seed: int, attributes: int = 6, max_size: int = 4) -> GraphicalModel:
    """A model on a random domain (≤ 6 attributes, ≤ 4 values) over a triangulated clique set."""
    rng = np.random.default_rng(seed)
    names = tuple("abcdefghijklmnop"[:attributes])
    domain = Domain(names, tuple(int(s) for s in rng.integers(2, max_size + 1, size=attributes)))
    tree = build_junction_tree(domain, random_clique_sets(kind, list(names), rng))
    potentials = {c: rng.normal(scale=1.5, size=domain.shape(c)) for c in tree.cliques}
    return GraphicalModel(domain, tree.cliques, potentials, total=float(rng.integers(100, 5000)))


def chain_model(length: int, size: int, seed: int) -> GraphicalModel:
    """A chain x0 - x1 - … with pair cliques: far-apart attributes sit in far-apart cliques."""
    rng = np.random.default_rng(seed)
    names = tuple(f"x{i}" for i in range(length))
    domain = Domain(names, (size,) * length)
    tree = build_junction_tree(domain, [(names[i], names[i + 1]) for i in range(length - 1)])
    potentials = {c: rng.normal(scale=1.5, size=domain.shape(c)) for c in tree.cliques}
    return GraphicalModel(domain, tree.cliques, potentials, total=1000.0)


def brute_marginal(model: GraphicalModel, attrs: tuple[str, ...]) -> np.ndarray:
    """The marginal of `attrs` (axes in that order) summed from the dense joint."""
    joint = model.joint_probabilities()
    positions = [model.domain.index(a) for a in attrs]
    table = joint.sum(axis=tuple(i for i in range(len(model.domain)) if i not in positions))
    ascending = sorted(positions)
    return np.transpose(table, [ascending.index(p) for p in positions])
