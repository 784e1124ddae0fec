"""Belief propagation: exact sum-product on a junction tree, in log space.

`calibrate` turns log-potentials into normalised clique marginals and log Z with two
passes over the tree (leaves to root, then root to leaves). Everything is whole-array
numpy: one log-sum-exp per message, no Python loop over cells.

`CalibrationPlan` precomputes, once per tree, the axes each message sums out and the
shape that broadcasts it into the receiving clique; estimation calls it thousands of
times per fit, so per-call overhead is kept to the numpy operations themselves.

Potentials may contain -inf (structural zeros): `calibrate` replaces it by −1e30,
whose exponential is exactly 0 after any shift by a finite maximum, so a slice that
is impossible throughout stays finite (no −inf − −inf = NaN) and the hot loop needs
no special cases. The downward pass never subtracts messages.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from app.pgm.domain import Domain
from app.pgm.junction_tree import JunctionTree

# Stands in for log 0: exp(LOG_ZERO − m) is exactly 0 for any finite m of ordinary size,
# and sums of a few of them stay far from float overflow.
LOG_ZERO = -1e30


def _logsumexp(values: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """log Σ exp over `axes` (kept as size-1 axes); `values` must be finite."""
    if not axes:
        return values
    peak = values.max(axis=axes, keepdims=True)
    result: np.ndarray = np.log(np.exp(values - peak).sum(axis=axes, keepdims=True)) + peak
    return result


def broadcast_shape(
    domain: Domain, attrs: tuple[str, ...], clique: tuple[str, ...]
) -> tuple[int, ...]:
    """Shape that broadcasts an array over canonical-order `attrs` into `clique`."""
    present = set(attrs)
    return tuple(domain.size_of(a) if a in present else 1 for a in clique)


def to_clique_layout(
    domain: Domain, attrs: tuple[str, ...], values: np.ndarray, clique: tuple[str, ...]
) -> np.ndarray:
    """An array with axes in `attrs` order, transposed and reshaped to broadcast into `clique`."""
    canonical = tuple(a for a in clique if a in set(attrs))
    if len(canonical) != len(attrs):
        raise KeyError(f"{attrs} is not contained in clique {clique}")
    aligned = np.transpose(values, [attrs.index(a) for a in canonical])
    return aligned.reshape(broadcast_shape(domain, canonical, clique))


class CalibrationPlan:
    """Message schedule and broadcast layouts of one junction tree, computed once."""

    def __init__(self, tree: JunctionTree) -> None:
        self.tree = tree
        self.shapes = [tree.domain.shape(c) for c in tree.cliques]
        self.root = tree.root
        # For each directed edge (sender, receiver): the sender axes to sum out, and the
        # shape that makes the (keepdims) message broadcast into the receiver.
        self.sum_axes: dict[tuple[int, int], tuple[int, ...]] = {}
        self.into_shape: dict[tuple[int, int], tuple[int, ...]] = {}
        for i, j in tree.edges:
            for s, r in ((i, j), (j, i)):
                sep = set(tree.separator(s, r))
                self.sum_axes[(s, r)] = tuple(
                    k for k, a in enumerate(tree.cliques[s]) if a not in sep
                )
                self.into_shape[(s, r)] = broadcast_shape(
                    tree.domain, tree.separator(s, r), tree.cliques[r]
                )
        self.upward = tree.upward
        self.downward = tree.downward
        self.children: list[list[int]] = [[] for _ in tree.cliques]
        self.parent: list[int | None] = [None] * len(tree.cliques)
        for child, parent in self.upward:
            self.children[parent].append(child)
            self.parent[child] = parent

    def clique_potentials(
        self, log_potentials: Mapping[tuple[str, ...], np.ndarray]
    ) -> list[np.ndarray]:
        """Sum potentials over arbitrary contained attribute tuples into per-clique arrays."""
        tree = self.tree
        thetas = [np.zeros(shape) for shape in self.shapes]
        for attrs, values in log_potentials.items():
            attrs = tuple(attrs)
            values = np.asarray(values, dtype=float)
            if values.shape != tree.domain.shape(attrs):
                raise ValueError(f"potential over {attrs} has shape {values.shape}")
            k = tree.clique_containing(attrs)
            thetas[k] = thetas[k] + to_clique_layout(tree.domain, attrs, values, tree.cliques[k])
        return [np.maximum(t, LOG_ZERO) for t in thetas]

    def run(self, thetas: list[np.ndarray]) -> tuple[list[np.ndarray], float]:
        """Unnormalised log-beliefs per clique (log p_C + log Z), and log Z.

        `thetas` (one array per clique, in clique layout) must be finite.
        """
        messages: dict[tuple[int, int], np.ndarray] = {}
        # Upward: each child's potential times its children's messages, summed to the separator.
        for child, parent in self.upward:
            belief = thetas[child]
            for grandchild in self.children[child]:
                belief = belief + messages[(grandchild, child)]
            msg = _logsumexp(belief, self.sum_axes[(child, parent)])
            messages[(child, parent)] = msg.reshape(self.into_shape[(child, parent)])
        # Downward: the parent's potential times every incoming message except the child's.
        for parent, child in self.downward:
            belief = thetas[parent]
            up = self.parent[parent]
            if up is not None:
                belief = belief + messages[(up, parent)]
            for sibling in self.children[parent]:
                if sibling != child:
                    belief = belief + messages[(sibling, parent)]
            msg = _logsumexp(belief, self.sum_axes[(parent, child)])
            messages[(parent, child)] = msg.reshape(self.into_shape[(parent, child)])
        beliefs = []
        for k, theta in enumerate(thetas):
            belief = theta
            up = self.parent[k]
            if up is not None:
                belief = belief + messages[(up, k)]
            for child in self.children[k]:
                belief = belief + messages[(child, k)]
            beliefs.append(belief)
        root = beliefs[self.root]
        log_z = float(_logsumexp(root, tuple(range(root.ndim))).reshape(()))
        return beliefs, log_z

    def marginals(self, thetas: list[np.ndarray]) -> tuple[list[np.ndarray], float]:
        """Clique probability tables (each summing to 1) and log Z."""
        beliefs, log_z = self.run(thetas)
        return [np.exp(b - log_z) for b in beliefs], log_z


def calibrate(
    tree: JunctionTree, log_potentials: Mapping[tuple[str, ...], np.ndarray]
) -> tuple[dict[tuple[str, ...], np.ndarray], float]:
    """Normalised clique marginals (axes in clique order) and log Z of exp(Σ θ).

    If every joint state is impossible (all −inf), log Z is about −1e30 rather than −inf.

    `log_potentials` maps attribute tuples (each contained in some clique; axes in the
    tuple's order) to arrays; several may land on one clique and are summed.
    """
    plan = CalibrationPlan(tree)
    marginals, log_z = plan.marginals(plan.clique_potentials(log_potentials))
    return dict(zip(tree.cliques, marginals, strict=True)), log_z


class IncrementalCalibration:
    """Clique marginals kept current while one clique's potential changes at a time.

    Proportional fitting changes one clique's log-potential per step and then needs
    another clique's marginal. A message s → r depends only on the potentials on s's
    side of the edge, so a change at clique k makes stale exactly the messages that point
    away from k; the rest are reused. Visiting cliques in a walk along the tree then
    costs about one message per step instead of a whole two-pass calibration.
    `thetas` are updated in place (the caller's arrays).
    """

    def __init__(self, plan: CalibrationPlan, thetas: list[np.ndarray]) -> None:
        self.plan = plan
        self.thetas = thetas
        count = len(thetas)
        self.neighbours: list[list[int]] = [[] for _ in range(count)]
        for child, parent in plan.upward:
            self.neighbours[child].append(parent)
            self.neighbours[parent].append(child)
        # below[(s, r)]: the cliques on s's side of the edge (s, r), as a boolean mask
        self._behind: dict[tuple[int, int], np.ndarray] = {}
        for s, r in plan.sum_axes:
            side = np.zeros(count, dtype=bool)
            stack = [s]
            side[s] = True
            while stack:
                node = stack.pop()
                for n in self.neighbours[node]:
                    if n != r and not side[n]:
                        side[n] = True
                        stack.append(n)
            self._behind[(s, r)] = side
        self._messages: dict[tuple[int, int], np.ndarray] = {}

    def walk(self) -> list[int]:
        """Every clique once, in depth-first order from the root (consecutive ones close)."""
        order, stack, seen = [], [self.plan.root], {self.plan.root}
        while stack:
            node = stack.pop()
            order.append(node)
            for n in reversed(self.neighbours[node]):
                if n not in seen:
                    seen.add(n)
                    stack.append(n)
        return order

    def add(self, k: int, delta: np.ndarray) -> None:
        """θ_k += delta; forget the messages that carried the old θ_k."""
        self.thetas[k] += delta
        for edge, side in self._behind.items():
            if side[k]:
                self._messages.pop(edge, None)

    def _message(self, sender: int, receiver: int) -> np.ndarray:
        # Iterative (no recursion limit on long chains): find the stale messages this one
        # needs, then compute them senders-first.
        pending = [(sender, receiver)]
        order: list[tuple[int, int]] = []
        while pending:
            edge = pending.pop()
            if edge in self._messages:
                continue
            order.append(edge)
            s, r = edge
            pending.extend((n, s) for n in self.neighbours[s] if n != r)
        for s, r in reversed(order):
            if (s, r) in self._messages:
                continue
            belief = self.thetas[s]
            for n in self.neighbours[s]:
                if n != r:
                    belief = belief + self._messages[(n, s)]
            msg = _logsumexp(belief, self.plan.sum_axes[(s, r)])
            self._messages[(s, r)] = msg.reshape(self.plan.into_shape[(s, r)])
        return self._messages[(sender, receiver)]

    def marginal(self, k: int) -> np.ndarray:
        """Clique k's probability table (sums to 1) under the current potentials."""
        belief = self.thetas[k]
        for n in self.neighbours[k]:
            belief = belief + self._message(n, k)
        peak = belief.max()
        table: np.ndarray = np.exp(belief - peak)
        table /= table.sum()
        return table
