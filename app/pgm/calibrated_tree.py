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
from dataclasses import dataclass, replace
from itertools import product
from math import prod

import numpy as np

from app.pgm.belief_propagation import calibrate
from app.pgm.domain import Domain, DomainError
from app.pgm.elimination import EliminationPlan, InferenceTooLarge, Variable, plan_elimination
from app.pgm.junction_tree import JunctionTree

Clique = tuple[str, ...]

_PLAN_CACHE_LIMIT = 20_000
# Source tables with private axes summed out are kept up to the model's own cells.
_REDUCTION_MIN_CELLS = 1 << 20


# Above this many cells in one intermediate table (or above the caller's cap), a plan
# also tries slicing. Below it the plain plan is faster in practice: its large steps are
# BLAS matrix products, while a sliced plan repeats every step per slice on strided
# views (3-way marginals of a 171k-cell model: p99 51 ms at 2M cells, 101 ms at 65k).
_SLICE_ABOVE = 1 << 21
_MAX_SLICED = 2


@dataclass(frozen=True)
class TreePlan:
    """A cached query plan on a calibrated tree: which tables feed which elimination.

    `sliced` names kept attributes the plan conditions on: the elimination runs once per
    combination of their values over the tables sliced at those values (so no table
    ever carries them), and the answers are stacked. `scopes` are the unsliced tables'
    axes (the subtree's cliques, then any extra tables), `keep` the answer's axes.
    """

    subtree: tuple[int, ...]
    # (clique,) for the root's marginal, (clique, parent) for a conditional μ_C / μ_S.
    sources: tuple[tuple[int, ...], ...]
    # Per source, the axes of its table summed out before the elimination: attributes
    # no other table of the plan holds and the answer does not keep.
    summed: tuple[tuple[int, ...], ...]
    elimination: EliminationPlan
    scopes: tuple[tuple[Variable, ...], ...] = ()
    keep: tuple[Variable, ...] = ()
    sliced: tuple[tuple[Variable, int], ...] = ()  # (attribute, size)
    keep_sizes: tuple[int, ...] = ()

    @property
    def max_intermediate_cells(self) -> int:
        """The largest table the plan builds (the answer included when sliced)."""
        if not self.sliced:
            return self.elimination.max_intermediate_cells
        return max(self.elimination.max_intermediate_cells, prod(self.keep_sizes))

    @property
    def work(self) -> int:
        """A proxy of the plan's cost: the cells its steps span, times the slices it runs."""
        return self.elimination.total_cells * prod(size for _, size in self.sliced)


def _private_axes(
    scopes: Sequence[tuple[Variable, ...]],
    extras: Sequence[tuple[Variable, ...]],
    keep: Sequence[Variable],
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[Variable, ...], ...]]:
    """Per scope, the axes no other scope holds and `keep` does not (summed first), and
    the scopes without them."""
    seen: dict[Variable, int] = {}
    for scope in (*scopes, *extras):
        for v in scope:
            seen[v] = seen.get(v, 0) + 1
    kept = set(keep)
    summed = []
    reduced = []
    for scope in scopes:
        private = tuple(k for k, v in enumerate(scope) if seen[v] == 1 and v not in kept)
        summed.append(private)
        reduced.append(
            tuple(v for k, v in enumerate(scope) if k not in private) if private else scope
        )
    return tuple(summed), tuple(reduced)


def _fits(plan: TreePlan, max_cells: int | None) -> bool:
    return max_cells is None or plan.max_intermediate_cells <= max_cells


def _better(candidate: TreePlan, found: TreePlan, max_cells: int | None) -> bool:
    """Within the cap beats over it; then less work."""
    return (not _fits(candidate, max_cells), candidate.work) < (
        not _fits(found, max_cells),
        found.work,
    )


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
        self._reductions: dict[tuple[tuple[int, ...], tuple[int, ...]], np.ndarray] = {}
        self._reduction_cells = 0
        self._reduction_limit = max(_REDUCTION_MIN_CELLS, sum(self.clique_cells))
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

    def _reduced(self, source: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray:
        """A source's table with `axes` summed out, kept: queries share these sums."""
        if not axes:
            return self._table(source)
        key = (source, axes)
        table = self._reductions.get(key)
        if table is None:
            table = np.asarray(self._table(source).sum(axis=axes))
            table.setflags(write=False)
            with self._lock:
                # Another thread may have kept the same sum meanwhile: count it once.
                if key not in self._reductions:
                    if self._reduction_cells + table.size > self._reduction_limit:
                        self._reductions.clear()
                        self._reduction_cells = 0
                    self._reductions[key] = table
                    self._reduction_cells += table.size
        return table

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
            tuple(sorted(names)),  # a set of names; a tuple of str is untracked by gc
            extras,
            keep_t,
            tuple(sorted((extra_sizes or {}).items(), key=repr)),
        )
        sizes = self._sizes if not extra_sizes else {**self._sizes, **extra_sizes}
        cached = self._plans.get(key)
        if cached is not None:
            if not _fits(cached, max_cells):
                # Planned without this cap: slicing may bring it within.
                cached = self._sliced(cached, sizes, max_cells)
                if not _fits(cached, max_cells):
                    raise InferenceTooLarge(cached.max_intermediate_cells, max_cells)  # type: ignore[arg-type]
                self._remember(key, cached)
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
        # Axes only one clique holds and the answer drops are summed out of its table
        # before the elimination (and those sums kept for the next query).
        summed, reduced = _private_axes(scopes, extras, keep_t)
        all_scopes = (*reduced, *extras)
        plan = TreePlan(
            subtree=subtree,
            sources=tuple(sources),
            summed=summed,
            elimination=plan_elimination(all_scopes, sizes, keep_t),
            scopes=all_scopes,
            keep=keep_t,
            keep_sizes=tuple(sizes[v] for v in keep_t),
        )
        threshold = _SLICE_ABOVE if max_cells is None else min(_SLICE_ABOVE, max_cells)
        if plan.elimination.max_intermediate_cells > threshold:
            plan = self._sliced(plan, sizes, max_cells)
        self._remember(key, plan)
        if max_cells is not None and plan.max_intermediate_cells > max_cells:
            raise InferenceTooLarge(plan.max_intermediate_cells, max_cells)
        return plan

    def _remember(self, key: object, plan: TreePlan) -> None:
        with self._lock:
            if len(self._plans) >= _PLAN_CACHE_LIMIT:
                self._plans.clear()
            self._plans[key] = plan

    def _sliced(
        self, plan: TreePlan, sizes: Mapping[Variable, int], max_cells: int | None
    ) -> TreePlan:
        """The plan, or one conditioning on up to two kept attributes if that is cheaper.

        Carrying a kept attribute through every table between the cliques that hold the
        query's attributes multiplies each intermediate by its size; conditioning on it
        instead (one elimination per value, over the tables sliced at that value) keeps
        every intermediate within a clique's size times the rest. For a 2-way marginal
        the widest table is then at most one clique times the other attribute, which is
        what makes any 2-way marginal of a model answerable. Greedy: add the attribute
        whose slicing lowers the work (cells spanned × number of slices) most; a plan
        within `max_cells` is preferred to a cheaper one that is not.
        """
        best = plan
        sliced: tuple[Variable, ...] = ()
        for _ in range(_MAX_SLICED):
            found: TreePlan | None = None
            for name in plan.keep:
                if name in sliced or name not in self._sizes:
                    continue
                trial = (*sliced, name)
                rest = tuple(v for v in plan.keep if v not in trial)
                if not rest:
                    continue
                elimination = plan_elimination(
                    [tuple(v for v in scope if v not in trial) for scope in plan.scopes],
                    sizes,
                    rest,
                )
                candidate = replace(
                    plan,
                    elimination=elimination,
                    sliced=tuple((v, sizes[v]) for v in trial),
                )
                if found is None or _better(candidate, found, max_cells):
                    found = candidate
            if found is None:
                break
            sliced = tuple(v for v, _ in found.sliced)
            if _fits(found, max_cells) and (found.work < best.work or not _fits(best, max_cells)):
                best = found
        return best

    def run(
        self, plan: TreePlan, extra_tables: Sequence[np.ndarray] = (), *, scale: float = 1.0
    ) -> np.ndarray:
        """Execute a plan; the answer is multiplied by `scale` (e.g. N̂ for counts)."""
        tables = [
            self._reduced(source, axes)
            for source, axes in zip(plan.sources, plan.summed, strict=True)
        ]
        tables.extend(np.asarray(t, dtype=float) for t in extra_tables)
        if plan.sliced:
            return self._run_sliced(plan, tables, scale)
        if scale != 1.0:
            # The product is linear in each table: scaling the smallest one is cheapest.
            smallest = min(range(len(tables)), key=lambda k: tables[k].size)
            tables[smallest] = tables[smallest] * scale
        result = plan.elimination.execute(tables)
        if not result.flags.writeable or not result.flags.c_contiguous:
            # A projection can come back as a view of a cached table, or strided.
            result = result.copy()
        return result

    def _run_sliced(self, plan: TreePlan, tables: list[np.ndarray], scale: float) -> np.ndarray:
        names = [v for v, _ in plan.sliced]
        rest = [v for v in plan.keep if v not in names]
        size_of = dict(zip(plan.keep, plan.keep_sizes, strict=True))
        stacked = np.empty(tuple(size_of[v] for v in [*names, *rest]))
        axes = [[scope.index(v) if v in scope else None for v in names] for scope in plan.scopes]
        for values in product(*(range(size) for _, size in plan.sliced)):
            views = []
            for table, positions in zip(tables, axes, strict=True):
                index: list[int | slice] = [slice(None)] * table.ndim
                for value, axis in zip(values, positions, strict=True):
                    if axis is not None:
                        index[axis] = value
                views.append(table[tuple(index)])
            stacked[values] = plan.elimination.execute(views)
        order = [*names, *rest]
        result = np.transpose(stacked, [order.index(v) for v in plan.keep])
        return np.ascontiguousarray(result * scale if scale != 1.0 else result)

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
