"""Calibrated tree: a fitted model's clique marginals, answering queries by elimination.

`CalibratedTree` holds the clique marginals μ_C of a calibrated junction tree, for
which p(x) = Π_C μ_C / Π_S μ_S. A query over attributes A only needs the smallest
subtree whose leaves each hold an attribute of A that no other clique of the subtree
holds: any other leaf L sums out exactly (Σ_{L∖S} μ_L/μ_S = 1) and vanishes. The
subtree is rooted at one clique and written as μ_root times the conditionals μ_C/μ_S
of the others, so the factors are probabilities and no division happens at query
time. A query inside one clique is a projection of μ_C.

The product over the subtree (times any extra query tables) is compiled by
`app.pgm.elimination` into a `TreePlan`. Plans are cached by the shape of the query
(its scopes), so repeated or batched queries over the same attributes only run their
einsums.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from app.pgm.belief_propagation import calibrate
from app.pgm.domain import Domain, DomainError
from app.pgm.elimination import EliminationPlan, InferenceTooLarge, Variable, plan_elimination
from app.pgm.junction_tree import JunctionTree

Clique = tuple[str, ...]

_PLAN_CACHE_LIMIT = 20_000


@dataclass(frozen=True)
class TreePlan:
    """A cached query plan on a calibrated tree: which tables feed which elimination."""

    subtree: tuple[int, ...]
    # (clique,) for the root's marginal, (clique, parent) for a conditional μ_C / μ_S.
    sources: tuple[tuple[int, ...], ...]
    elimination: EliminationPlan

    @property
    def max_intermediate_cells(self) -> int:
        return self.elimination.max_intermediate_cells


class CalibratedTree:
    """Calibrated clique marginals of a junction tree, answering queries by elimination.

    `cliques[i]` lists clique i's attributes (the axis order of `marginals[i]`),
    `edges` are the tree's edges (pairs of clique indices; a forest's components
    joined by empty separators are fine). Each marginal is a normalised probability
    table; the marginals must agree on their separators (they do after BP).
    """

    def __init__(
        self,
        domain: Domain,
        cliques: Sequence[Clique],
        edges: Sequence[tuple[int, int]],
        marginals: Sequence[np.ndarray],
    ) -> None:
        self.domain = domain
        self.cliques: tuple[Clique, ...] = tuple(tuple(c) for c in cliques)
        self.edges: tuple[tuple[int, int], ...] = tuple((int(a), int(b)) for a, b in edges)
        if len(marginals) != len(self.cliques):
            raise ValueError("one marginal per clique is required")
        if len(self.edges) != max(len(self.cliques) - 1, 0):
            raise ValueError("a junction tree over n cliques has n - 1 edges")
        tables = []
        for clique, table in zip(self.cliques, marginals, strict=True):
            array = np.array(table, dtype=float)
            if array.shape != domain.shape(clique):
                raise DomainError(f"marginal of {clique} has shape {array.shape}")
            array.setflags(write=False)
            tables.append(array)
        self.marginals: tuple[np.ndarray, ...] = tuple(tables)
        self.clique_sets: tuple[frozenset[str], ...] = tuple(frozenset(c) for c in self.cliques)
        self.neighbours: tuple[tuple[int, ...], ...] = tuple(
            tuple(
                sorted({b for a, b in self.edges if a == i} | {a for a, b in self.edges if b == i})
            )
            for i in range(len(self.cliques))
        )
        self.clique_cells: tuple[int, ...] = tuple(int(t.size) for t in self.marginals)
        # Bitmask of the cliques holding each attribute, for the single-clique test.
        holders: dict[str, int] = {name: 0 for name in domain.attributes}
        for i, clique in enumerate(self.cliques):
            for name in clique:
                holders[name] |= 1 << i
        missing = [name for name, mask in holders.items() if mask == 0]
        if missing:
            raise DomainError(f"attributes {missing} are in no clique")
        self._holders = holders
        self._sizes: dict[Variable, int] = dict(zip(domain.attributes, domain.sizes, strict=True))
        self._conditionals: dict[tuple[int, int], np.ndarray] = {}
        self._plans: dict[object, TreePlan] = {}
        self._lock = threading.Lock()
        self.log_z: float | None = None
        self.tree: JunctionTree = JunctionTree(domain, self.cliques, self.edges)

    @classmethod
    def from_potentials(
        cls, tree: JunctionTree, log_potentials: Mapping[tuple[str, ...], np.ndarray]
    ) -> CalibratedTree:
        """Calibrate log-potentials on `tree` by belief propagation (log Z kept as `log_z`)."""
        marginals, log_z = calibrate(tree, log_potentials)
        calibrated = cls(
            tree.domain, tree.cliques, tree.edges, [marginals[c] for c in tree.cliques]
        )
        calibrated.log_z = log_z
        calibrated.tree = tree
        return calibrated

    # ---- tables -------------------------------------------------------------------

    def separator(self, i: int, j: int) -> Clique:
        return tuple(a for a in self.cliques[i] if a in self.clique_sets[j])

    def conditional(self, clique: int, parent: int) -> np.ndarray:
        """μ_C / μ_S over C's axes, S the separator with `parent` (0 where μ_S = 0)."""
        key = (clique, parent)
        table = self._conditionals.get(key)
        if table is None:
            marginal = self.marginals[clique]
            sep = self.separator(clique, parent)
            # μ_S taken from μ_C itself makes Σ_{C∖S} conditional exactly 1.
            drop = tuple(k for k, a in enumerate(self.cliques[clique]) if a not in sep)
            sep_marginal = marginal.sum(axis=drop, keepdims=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                table = np.where(sep_marginal > 0, marginal / sep_marginal, 0.0)
            table.setflags(write=False)
            self._conditionals[key] = table
        return table

    def _table(self, source: tuple[int, ...]) -> np.ndarray:
        if len(source) == 1:
            return self.marginals[source[0]]
        return self.conditional(source[0], source[1])

    # ---- planning -----------------------------------------------------------------

    def check_attributes(self, attrs: Iterable[str]) -> tuple[str, ...]:
        names = tuple(attrs)
        for name in names:
            if name not in self._holders:
                raise DomainError(f"unknown attribute {name!r}")
        if len(set(names)) != len(names):
            raise DomainError("duplicate attribute names")
        return names

    def subtree(self, attrs: Iterable[str]) -> tuple[int, ...]:
        """The cliques of the pruned subtree needed for a query on `attrs` (root first)."""
        wanted = set(attrs)
        if not wanted:
            return (0,)
        common = -1
        for name in wanted:
            common &= self._holders[name]
        if common:
            # One clique holds everything: use the smallest such clique.
            best = min(
                (i for i in range(len(self.cliques)) if common >> i & 1),
                key=lambda i: self.clique_cells[i],
            )
            return (best,)
        degree = [len(n) for n in self.neighbours]
        removed = [False] * len(self.cliques)
        leaves = [i for i, d in enumerate(degree) if d == 1]
        while leaves:
            leaf = leaves.pop()
            if removed[leaf] or degree[leaf] != 1:
                continue
            (neighbour,) = (n for n in self.neighbours[leaf] if not removed[n])
            private = self.clique_sets[leaf] - self.clique_sets[neighbour]
            if private & wanted:
                continue
            removed[leaf] = True
            degree[neighbour] -= 1
            if degree[neighbour] == 1:
                leaves.append(neighbour)
        kept = [i for i in range(len(self.cliques)) if not removed[i]]
        # Root at the kept clique holding most query attributes, then breadth-first.
        root = max(kept, key=lambda i: (len(self.clique_sets[i] & wanted), -i))
        return (root, *tuple(i for i in kept if i != root))

    def plan(
        self,
        attrs: Iterable[str],
        extra_scopes: Sequence[Sequence[Variable]] = (),
        keep: Sequence[Variable] | None = None,
        *,
        extra_sizes: Mapping[Variable, int] | None = None,
        max_cells: int | None = None,
    ) -> TreePlan:
        """Plan Σ_{all but keep} p(attrs…) · Π extra tables, p over the pruned subtree.

        `attrs` are the domain attributes the query touches (they decide the
        subtree); `extra_scopes` are the scopes of further factors (e.g. query
        matrices over a row axis and an attribute); `keep` defaults to `attrs`.
        """
        names = self.check_attributes(attrs)
        keep_t = names if keep is None else tuple(keep)
        extras = tuple(tuple(s) for s in extra_scopes)
        key = (
            frozenset(names),
            extras,
            keep_t,
            tuple(sorted((extra_sizes or {}).items(), key=repr)),
        )
        cached = self._plans.get(key)
        if cached is not None:
            if max_cells is not None and cached.max_intermediate_cells > max_cells:
                raise InferenceTooLarge(cached.max_intermediate_cells, max_cells)
            return cached
        subtree = self.subtree(names)
        sources: list[tuple[int, ...]] = []
        scopes: list[tuple[Variable, ...]] = []
        members = set(subtree)
        root = subtree[0]
        sources.append((root,))
        scopes.append(self.cliques[root])
        # Breadth-first from the root inside the subtree: each clique given its parent.
        frontier = [root]
        visited = {root}
        while frontier:
            parent = frontier.pop()
            for child in self.neighbours[parent]:
                if child in members and child not in visited:
                    visited.add(child)
                    frontier.append(child)
                    sources.append((child, parent))
                    scopes.append(self.cliques[child])
        sizes = self._sizes if not extra_sizes else {**self._sizes, **extra_sizes}
        elimination = plan_elimination(scopes + list(extras), sizes, keep_t, max_cells=max_cells)
        plan = TreePlan(subtree=subtree, sources=tuple(sources), elimination=elimination)
        with self._lock:
            if len(self._plans) >= _PLAN_CACHE_LIMIT:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def run(
        self, plan: TreePlan, extra_tables: Sequence[np.ndarray] = (), *, scale: float = 1.0
    ) -> np.ndarray:
        """Execute a plan; the answer is multiplied by `scale` (e.g. N̂ for counts)."""
        tables = [self._table(source) for source in plan.sources]
        tables.extend(np.asarray(t, dtype=float) for t in extra_tables)
        if scale != 1.0:
            # The product is linear in each table: scaling the smallest one is cheapest.
            smallest = min(range(len(tables)), key=lambda k: tables[k].size)
            tables[smallest] = tables[smallest] * scale
        result = plan.elimination.execute(tables)
        if not result.flags.writeable or not result.flags.c_contiguous:
            # A projection can come back as a view of a cached table, or strided.
            result = result.copy()
        return result

    # ---- queries ------------------------------------------------------------------

    def probabilities(
        self, attrs: Iterable[str], *, max_cells: int | None = None, scale: float = 1.0
    ) -> np.ndarray:
        """The marginal distribution of `attrs` (times `scale`), axes in the order given."""
        names = self.check_attributes(attrs)
        return self.run(self.plan(names, max_cells=max_cells), scale=scale)

    def contract(
        self,
        attrs: Iterable[str],
        factors: Sequence[tuple[Sequence[Variable], np.ndarray]],
        keep: Sequence[Variable],
        *,
        max_cells: int | None = None,
        scale: float = 1.0,
    ) -> np.ndarray:
        """scale · Σ_{x, all but keep} p(x_attrs) Π factors — e.g. a factored query's N̂ Q p."""
        scopes = [tuple(s) for s, _ in factors]
        extra_sizes: dict[Variable, int] = {}
        for scope, table in factors:
            for v, n in zip(scope, np.shape(table), strict=True):
                if v not in self._sizes:
                    extra_sizes[v] = int(n)
        plan = self.plan(attrs, scopes, keep, extra_sizes=extra_sizes, max_cells=max_cells)
        return self.run(plan, [t for _, t in factors], scale=scale)
