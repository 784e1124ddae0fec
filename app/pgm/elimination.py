"""Variable elimination: marginals and factored contractions without the full joint.

Two layers:

- `plan_elimination` is generic variable elimination over named factors: given the
  scopes of some non-negative tables and the variables to keep, it picks a greedy
  min-weight elimination order and compiles it into a short list of `np.einsum`
  calls (an `EliminationPlan`). The largest table any step builds is the plan's
  `max_intermediate_cells`; a cap refuses a plan above it (`InferenceTooLarge`)
  before anything is computed.
- `CalibratedTree` holds the clique marginals μ_C of a calibrated junction tree, for
  which p(x) = Π_C μ_C / Π_S μ_S. A query over attributes A only needs the smallest
  subtree whose leaves each hold an attribute of A that no other clique of the
  subtree holds: any other leaf L sums out exactly (Σ_{L∖S} μ_L/μ_S = 1) and
  vanishes. The subtree is rooted at one clique and written as μ_root times the
  conditionals μ_C/μ_S of the others, so the factors are probabilities and no
  division happens at query time. A query inside one clique is a projection of μ_C.

Plans are cached by the shape of the query (its scopes), so repeated or batched
queries over the same attributes only run their einsums.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from app.pgm.belief_propagation import calibrate
from app.pgm.domain import Domain, DomainError
from app.pgm.junction_tree import JunctionTree

Variable = Hashable
Clique = tuple[str, ...]

# np.einsum's sublist form admits 52 distinct labels per call.
_EINSUM_LABELS = 52
_PLAN_CACHE_LIMIT = 20_000


class InferenceTooLarge(ValueError):
    """A query whose variable elimination would build a table larger than the cap allows."""

    def __init__(self, cells: int, max_cells: int) -> None:
        super().__init__(
            f"answering this query needs an intermediate table of {cells} cells, "
            f"more than the cap of {max_cells}; ask for fewer or smaller attributes"
        )
        self.cells = cells
        self.max_cells = max_cells


@dataclass(frozen=True)
class EliminationPlan:
    """A compiled elimination order: a list of array operations over numbered slots.

    Slots 0..len(scopes)-1 hold the input tables; each operation reads slots and
    appends its result as the next slot; slot `result` ends up holding the answer
    with axes in `keep` order. Operations are ("einsum", slots, subscripts, output)
    for small tables, ("matmul", a, b, layout) for large pairwise contractions (BLAS
    is an order of magnitude faster than einsum's summation loop there), and
    ("transpose", slot, axes).
    """

    scopes: tuple[tuple[Variable, ...], ...]
    keep: tuple[Variable, ...]
    order: tuple[Variable, ...]
    operations: tuple[tuple[Any, ...], ...]
    result: int
    max_intermediate_cells: int

    def execute(self, arrays: Sequence[np.ndarray]) -> np.ndarray:
        slots = list(arrays)
        for operation in self.operations:
            kind = operation[0]
            if kind == "einsum":
                _, operands, subscripts, output = operation
                args: list[Any] = []
                for slot, subscript in zip(operands, subscripts, strict=True):
                    args.append(slots[slot])
                    args.append(subscript)
                args.append(output)
                slots.append(np.asarray(np.einsum(*args)))
            elif kind == "matmul":
                _, a, b, (a_sum, a_perm, a_shape, b_sum, b_perm, b_shape, out_shape) = operation
                left = slots[a]
                if a_sum:
                    left = left.sum(axis=a_sum)
                right = slots[b]
                if b_sum:
                    right = right.sum(axis=b_sum)
                product = np.matmul(
                    left.transpose(a_perm).reshape(a_shape),
                    right.transpose(b_perm).reshape(b_shape),
                )
                slots.append(product.reshape(out_shape))
            else:  # "broadcast": a product with no summation, laid out in `keep` order
                _, operands, layouts = operation
                product = None
                for slot, (permutation, shape) in zip(operands, layouts, strict=True):
                    table = slots[slot].transpose(permutation).reshape(shape)
                    product = table if product is None else product * table
                assert product is not None
                # (np.ascontiguousarray would turn a 0-d answer into shape (1,).)
                slots.append(product if product.flags.c_contiguous else product.copy())
        return slots[self.result]


# Pairwise contractions whose joint table reaches this many cells go through matmul.
_MATMUL_CELLS = 4096


class _Compiler:
    """Emits the operations of a plan, turning each product of tables into pairs."""

    def __init__(
        self, sizes: Mapping[Variable, int], inputs: int, keep: Sequence[Variable]
    ) -> None:
        self.sizes = sizes
        # Where each kept variable goes in the answer, to orient matmul outputs alike.
        self.keep_position = {v: k for k, v in enumerate(keep)}
        self.operations: list[tuple[Any, ...]] = []
        self.next_slot = inputs

    def cells(self, variables: Iterable[Variable]) -> int:
        return prod(self.sizes[v] for v in variables)

    def _emit(self, operation: tuple[Any, ...]) -> int:
        self.operations.append(operation)
        self.next_slot += 1
        return self.next_slot - 1

    def einsum(
        self, items: Sequence[tuple[int, tuple[Variable, ...]]], result: tuple[Variable, ...]
    ) -> tuple[int, tuple[Variable, ...]]:
        labels = _local_labels([v for _, axes in items for v in axes] + list(result))
        slot = self._emit(
            (
                "einsum",
                tuple(s for s, _ in items),
                tuple([labels[v] for v in axes] for _, axes in items),
                [labels[v] for v in result],
            )
        )
        return slot, result

    def pair(
        self,
        a: tuple[int, tuple[Variable, ...]],
        b: tuple[int, tuple[Variable, ...]],
        needed: set[Variable],
    ) -> tuple[int, tuple[Variable, ...]]:
        a_set, b_set = set(a[1]), set(b[1])
        union = a[1] + tuple(v for v in b[1] if v not in a_set)
        if self.cells(union) < _MATMUL_CELLS:
            return self.einsum([a, b], tuple(v for v in union if v in needed))
        # Put first the operand whose own kept variables come first in the answer.
        first_kept = len(self.keep_position)
        a_first = min(
            (self.keep_position.get(v, first_kept) for v in a_set - b_set), default=first_kept
        )
        b_first = min(
            (self.keep_position.get(v, first_kept) for v in b_set - a_set), default=first_kept
        )
        if b_first < a_first:
            a, b, a_set, b_set = b, a, b_set, a_set
        a_slot, a_axes = a
        b_slot, b_axes = b
        batch = tuple(v for v in a_axes if v in b_set and v in needed)
        summed = tuple(v for v in a_axes if v in b_set and v not in needed)
        left = tuple(v for v in a_axes if v not in b_set and v in needed)
        right = tuple(v for v in b_axes if v not in a_set and v in needed)
        a_sum = tuple(k for k, v in enumerate(a_axes) if v not in b_set and v not in needed)
        b_sum = tuple(k for k, v in enumerate(b_axes) if v not in a_set and v not in needed)
        a_rest = [v for v in a_axes if v in b_set or v in needed]
        b_rest = [v for v in b_axes if v in a_set or v in needed]
        layout = (
            a_sum,
            tuple(a_rest.index(v) for v in batch + left + summed),
            (self.cells(batch), self.cells(left), self.cells(summed)),
            b_sum,
            tuple(b_rest.index(v) for v in batch + summed + right),
            (self.cells(batch), self.cells(summed), self.cells(right)),
            tuple(self.sizes[v] for v in batch + left + right),
        )
        return self._emit(("matmul", a_slot, b_slot, layout)), batch + left + right

    def product(
        self, items: Sequence[tuple[int, tuple[Variable, ...]]], needed: set[Variable]
    ) -> tuple[int, tuple[Variable, ...]]:
        """Multiply the tables and sum out every variable not in `needed`, two at a time."""
        pending = list(items)
        if len(pending) == 1:
            _slot, axes = pending[0]
            result = tuple(v for v in axes if v in needed)
            return pending[0] if result == axes else self.einsum(pending, result)
        while len(pending) > 1:
            # Join the pair with the smallest joint table first.
            best: tuple[int, int, int] | None = None
            for i in range(len(pending)):
                for j in range(i + 1, len(pending)):
                    joint = set(pending[i][1]) | set(pending[j][1])
                    candidate = (self.cells(joint), i, j)
                    if best is None or candidate < best:
                        best = candidate
            assert best is not None
            _, i, j = best
            others = [item for k, item in enumerate(pending) if k not in (i, j)]
            still = set(needed).union(*(set(axes) for _, axes in others))
            pending = [*others, self.pair(pending[i], pending[j], still)]
        return pending[0]


def _local_labels(variables: Iterable[Variable]) -> dict[Variable, int]:
    labels: dict[Variable, int] = {}
    for v in variables:
        if v not in labels:
            labels[v] = len(labels)
    if len(labels) > _EINSUM_LABELS:
        raise ValueError(f"one elimination step joins {len(labels)} variables; at most 52 allowed")
    return labels


def plan_elimination(
    scopes: Sequence[Sequence[Variable]],
    sizes: Mapping[Variable, int],
    keep: Sequence[Variable],
    *,
    max_cells: int | None = None,
) -> EliminationPlan:
    """Compile variable elimination of everything but `keep` from a product of tables.

    `scopes[i]` names the axes of the i-th table; the plan computes
    Σ_{variables ∉ keep} Π_i table_i, with axes in `keep` order. The order is greedy
    (min-weight): eliminate next the variable whose neighbourhood table (the union of
    the scopes it appears in) is smallest; every other variable that appears only
    inside that neighbourhood is summed out in the same step. The largest such
    neighbourhood, or the answer if larger, is `max_intermediate_cells`.
    """
    scope_list = [tuple(s) for s in scopes]
    keep_t = tuple(keep)
    keep_set = set(keep_t)
    if len(keep_set) != len(keep_t):
        raise ValueError("duplicate variables to keep")
    for scope in scope_list:
        if len(set(scope)) != len(scope):
            raise ValueError(f"scope {scope} repeats a variable")
    if not scope_list:
        raise ValueError("nothing to eliminate from: no factors")
    occurs: dict[Variable, set[int]] = {}
    for i, scope in enumerate(scope_list):
        for v in scope:
            occurs.setdefault(v, set()).add(i)
    missing = [v for v in keep_t if v not in occurs]
    if missing:
        raise ValueError(f"variables {missing} are in no factor")
    compiler = _Compiler(sizes, len(scope_list), keep_t)
    # Axes of each live slot, in the order its table has them.
    axes: dict[int, tuple[Variable, ...]] = dict(enumerate(scope_list))
    order: list[Variable] = []
    width = 0
    eliminate = [v for v in occurs if v not in keep_set]
    pending = set(eliminate)
    while pending:
        best: tuple[int, int] | None = None
        best_var: Variable = None
        for position, v in enumerate(eliminate):
            if v not in pending:
                continue
            union: set[Variable] = set()
            for slot in occurs[v]:
                union.update(axes[slot])
            candidate = (compiler.cells(union), position)
            if best is None or candidate < best:
                best, best_var = candidate, v
        assert best is not None
        involved = sorted(occurs[best_var])
        involved_set = set(involved)
        union_vars = {v for slot in involved for v in axes[slot]}
        # Sum out, in this one step, every pending variable confined to these tables.
        gone = [
            v for v in eliminate if v in pending and v in union_vars and occurs[v] <= involved_set
        ]
        gone_set = set(gone)
        width = max(width, best[0])
        if max_cells is not None and width > max_cells:
            raise InferenceTooLarge(width, max_cells)
        slot, result_axes = compiler.product(
            [(s, axes[s]) for s in involved], union_vars - gone_set
        )
        for s in involved:
            del axes[s]
        for v in union_vars:
            occurs[v] -= involved_set
            if v not in gone_set:
                occurs[v].add(slot)
        for v in gone:
            pending.discard(v)
            order.append(v)
            del occurs[v]
        axes[slot] = result_axes
    width = max(width, compiler.cells(keep_t))
    if max_cells is not None and width > max_cells:
        raise InferenceTooLarge(width, max_cells)
    # What is left holds only kept variables: multiply it out in `keep` order, the
    # smallest tables first so the full-size product is written once.
    survivors = sorted(
        ((s, axes[s]) for s in axes), key=lambda item: (compiler.cells(item[1]), item[0])
    )
    if len(survivors) == 1 and survivors[0][1] == keep_t:
        slot = survivors[0][0]
    else:
        layouts = []
        for _, survivor_axes in survivors:
            ordered = sorted(survivor_axes, key=keep_t.index)
            permutation = tuple(survivor_axes.index(v) for v in ordered)
            shape = tuple(sizes[v] if v in survivor_axes else 1 for v in keep_t)
            layouts.append((permutation, shape))
        slot = compiler._emit(("broadcast", tuple(s for s, _ in survivors), tuple(layouts)))
    return EliminationPlan(
        scopes=tuple(scope_list),
        keep=keep_t,
        order=tuple(order),
        operations=tuple(compiler.operations),
        result=slot,
        max_intermediate_cells=width,
    )


def eliminate(
    factors: Sequence[tuple[Sequence[Variable], np.ndarray]],
    keep: Sequence[Variable],
    *,
    sizes: Mapping[Variable, int] | None = None,
    max_cells: int | None = None,
) -> np.ndarray:
    """Σ over every variable not in `keep` of the product of the (scope, table) factors."""
    scope_sizes: dict[Variable, int] = dict(sizes or {})
    for scope, table in factors:
        for v, n in zip(scope, np.shape(table), strict=True):
            scope_sizes.setdefault(v, n)
    plan = plan_elimination([s for s, _ in factors], scope_sizes, keep, max_cells=max_cells)
    result = plan.execute([np.asarray(t, dtype=float) for _, t in factors])
    # Never hand back (a view of) a caller's own table.
    return result.copy() if plan.result < len(factors) else result


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
