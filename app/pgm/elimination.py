"""Variable elimination: sums of products of named tables without the full joint.

`plan_elimination` is generic variable elimination over named factors: given the
scopes of some non-negative tables and the variables to keep, it picks a greedy
min-weight elimination order and compiles it into a short list of array operations
(`np.einsum` for small tables, BLAS `matmul` for large pairwise contractions): an
`EliminationPlan`, which `execute` runs on any tables of those scopes. The largest
table any step builds is the plan's `max_intermediate_cells`; a cap refuses a plan
above it (`InferenceTooLarge`) before anything is computed. `eliminate` plans and
runs in one call.

Queries on a fitted model use this through `app.pgm.calibrated_tree`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

Variable = Hashable

# np.einsum's sublist form admits 52 distinct labels per call.
_EINSUM_LABELS = 52


# What one array operation costs beyond its cells, in cells (numpy call overhead, ~µs).
_STEP_OVERHEAD_CELLS = 2000


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
    # Σ over the steps of the table each one spans, plus the answer: a proxy of the work.
    total_cells: int = 0

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
                if product is None:
                    raise ValueError("a broadcast step of the plan has no operands")
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
        return prod(map(self.sizes.__getitem__, variables))

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
                # Tuples, not lists: a cached plan of only tuples of ints and strings is
                # untracked by the garbage collector, so thousands of them cost its
                # full collections nothing.
                tuple(tuple(labels[v] for v in axes) for _, axes in items),
                tuple(labels[v] for v in result),
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
            _, i, j = (
                (0, 0, 1)
                if len(pending) == 2
                else min(
                    (self.cells(set(pending[i][1]) | set(pending[j][1])), i, j)
                    for i in range(len(pending))
                    for j in range(i + 1, len(pending))
                )
            )
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
    total = 0
    eliminate = [v for v in occurs if v not in keep_set]
    pending = set(eliminate)
    position = {v: k for k, v in enumerate(eliminate)}

    def neighbourhood(v: Variable) -> tuple[int, int]:
        union: set[Variable] = set()
        for slot in occurs[v]:
            union.update(axes[slot])
        return compiler.cells(union), position[v]

    # A variable's neighbourhood changes only when a step joins a table it is in, so
    # only the variables of each step's tables are costed again.
    costs = {v: neighbourhood(v) for v in eliminate}
    while pending:
        best = min(costs[v] for v in pending)
        best_var = eliminate[best[1]]
        involved = sorted(occurs[best_var])
        involved_set = set(involved)
        union_vars = {v for slot in involved for v in axes[slot]}
        # Sum out, in this one step, every pending variable confined to these tables.
        gone = [
            v for v in eliminate if v in pending and v in union_vars and occurs[v] <= involved_set
        ]
        gone_set = set(gone)
        width = max(width, best[0])
        total += best[0]
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
        for v in union_vars:
            if v in pending:
                costs[v] = neighbourhood(v)
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
        total_cells=total
        + compiler.cells(keep_t)
        + _STEP_OVERHEAD_CELLS * len(compiler.operations),
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
