"""The fitting problem: measurements compiled against one junction tree, for the estimators.

`FitProblem` lays every clique marginal of the tree end to end in one flat vector x
(clique k at `offsets[k]`, row-major over the clique's attributes) and compiles the
measurements into one linear operator M with M·x = every measured answer (`answers`)
and its transpose (`adjoint`), so each estimator evaluates the loss and its gradient
the same way whatever the measurements are. The operator sums each measurement's
clique over the axes it does not measure (a marginal measured twice is summed once);
the sparse matrix of M, one nonzero for every cell of every measurement's clique, is
built only for the estimators that factorise it (ADMM, CGM), which run on models of at
most a few hundred thousand cells, and for models small enough that products with it
are cheaper than the loop over the measurements (`SPARSE_MAX_ENTRIES`): on a model of
10⁷ cells it took 1.3 GB with its transpose. It also carries the belief-propagation
oracle of the tree (`probabilities`: potentials θ ↦ clique marginals) and turns
potentials back into a `GraphicalModel`.

Models are built from clique probabilities with `potentials_from_marginals`
(θ_root = log p_root, θ_C = log p_C − log p_C(S) for the others). A zero probability
becomes log(1e-300) ≈ −690.8 rather than −inf, so downstream inference never meets
−inf − (−inf); the mass this puts on impossible cells is below 1e-290.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from app.pgm.belief_propagation import (
    LOG_ZERO,
    CalibrationPlan,
    broadcast_shape,
    to_clique_layout,
)
from app.pgm.junction_tree import JunctionTree
from app.pgm.measurement import Measurement
from app.pgm.model import GraphicalModel

PROBABILITY_FLOOR = 1e-300
# M is a sparse matrix while it has at most this many nonzeros (M and Mᵀ: about 50 MB):
# on a small model a product with it costs less than a Python loop over the
# measurements (3,000 cells: 7 µs against 97 µs); above, the operator sums cliques.
SPARSE_MAX_ENTRIES = 2_000_000


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """a·b without BLAS: a multi-threaded BLAS dot on a busy 2-core host was measured 4×
    slower for the whole ADMM loop (threads spinning against the other processes)."""
    return float(np.einsum("i,i->", a, b))


def norm(a: np.ndarray) -> float:
    return float(np.sqrt(dot(a, a)))


def potentials_from_marginals(
    tree: JunctionTree, probabilities: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """Log-potentials on the tree whose distribution has these clique marginals.

    θ_root = log p_root and θ_C = log p_C − log p_C(S) (the conditional of C given its
    separator with its parent). The result is always a proper distribution; its clique
    marginals equal the inputs exactly when the inputs agree on every separator.
    """
    plan_axes = CalibrationPlan(tree).sum_axes
    thetas: list[np.ndarray] = [np.empty(0)] * len(tree.cliques)
    root = tree.root
    p_root = np.maximum(np.asarray(probabilities[root], dtype=float), 0.0)
    mass = p_root.sum()
    p_root = p_root / mass if mass > 0 else np.full(p_root.shape, 1.0 / p_root.size)
    thetas[root] = np.log(np.maximum(p_root, PROBABILITY_FLOOR))
    for parent, child in tree.downward:
        p = np.maximum(np.asarray(probabilities[child], dtype=float), 0.0)
        on_separator = p.sum(axis=plan_axes[(child, parent)], keepdims=True)
        has_mass = on_separator > 0
        # A separator value with no mass here gets a uniform conditional: any choice is
        # exact there because the parent gives that value (next to) no mass.
        uniform = on_separator.size / p.size
        conditional = np.where(has_mass, p / np.where(has_mass, on_separator, 1.0), uniform)
        thetas[child] = np.log(np.maximum(conditional, PROBABILITY_FLOOR))
    return thetas


@dataclass(frozen=True)
class Term:
    """One measurement against the tree: its rows start:stop of M are the sum of clique
    `clique` over `axes`, transposed by `order` into the measurement's attribute order
    (`shape`), then `query` (None: the identity). `back` and `into` undo the transpose
    and lay the marginal out to broadcast into the clique."""

    clique: int
    axes: tuple[int, ...]
    order: tuple[int, ...]
    back: tuple[int, ...]
    shape: tuple[int, ...]
    into: tuple[int, ...]
    query: sp.csr_matrix | None
    start: int
    stop: int


class FitProblem:
    """Measurements compiled against one junction tree: x (all clique cells) ↦ answers."""

    def __init__(
        self,
        tree: JunctionTree,
        measurements: Sequence[Measurement],
        total: float,
        sparse_max_entries: int | None = None,
    ) -> None:
        self.tree = tree
        self.measurements = tuple(measurements)
        self.total = total
        self.plan = CalibrationPlan(tree)
        domain = tree.domain
        self.shapes = [domain.shape(c) for c in tree.cliques]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int)
        self.n = int(self.offsets[-1])
        values, weights, gaussian = [], [], []
        # Lipschitz constant of the Gaussian part of ∇loss in counts, from ‖·‖₁ to ‖·‖∞:
        # Σ w·(largest squared column norm of Q) — used by dual averaging's step.
        self.lipschitz_unit = 0.0
        self.terms: list[Term] = []
        rows = 0
        for m in measurements:
            k = tree.clique_containing(m.attributes)
            clique = tree.cliques[k]
            kept = tuple(a for a in clique if a in set(m.attributes))
            q = None if m.query is None else sp.csr_matrix(m.query, dtype=float)
            self.terms.append(
                Term(
                    clique=k,
                    axes=tuple(i for i, a in enumerate(clique) if a not in set(m.attributes)),
                    order=tuple(kept.index(a) for a in m.attributes),
                    back=tuple(m.attributes.index(a) for a in kept),
                    shape=domain.shape(m.attributes),
                    into=broadcast_shape(domain, kept, clique),
                    query=q,
                    start=rows,
                    stop=rows + m.values.size,
                )
            )
            rows += m.values.size
            values.append(m.values)
            weights.append(np.full(m.values.size, m.weight))
            gaussian.append(np.full(m.values.size, m.noise == "gaussian"))
            if m.noise == "gaussian":
                column_norm2 = (
                    1.0 if q is None else float(np.max(np.asarray(q.multiply(q).sum(axis=0))))
                )
                self.lipschitz_unit += m.weight * column_norm2
        self.rows = rows
        # M's nonzeros (a query's rows: the clique's cells each, at most): public sizes.
        entries = sum(
            self.sizes[t.clique] * (1 if t.query is None else t.query.shape[0]) for t in self.terms
        )
        limit = SPARSE_MAX_ENTRIES if sparse_max_entries is None else sparse_max_entries
        self.sparse = entries <= limit
        # Maximal measured sets, each as (holding clique, that clique's axes to sum out).
        sets = [domain.canonical(m.attributes) for m in measurements]
        maximal = {s for s in sets if not any(set(s) < set(o) for o in sets)}
        self.measured_sets: list[tuple[int, tuple[int, ...]]] = []
        for s in sorted(maximal, key=lambda s: (len(s), s)):
            k = tree.clique_containing(s)
            axes = tuple(i for i, a in enumerate(tree.cliques[k]) if a not in s)
            self.measured_sets.append((k, axes))
        self.y = np.concatenate(values) if values else np.zeros(0)
        self.w = np.concatenate(weights) if weights else np.zeros(0)
        self.is_gaussian = np.concatenate(gaussian) if gaussian else np.zeros(0, bool)
        self.all_gaussian = bool(self.is_gaussian.all())
        self.any_gaussian = bool(self.is_gaussian.any())

    # --- the measurement operator -----------------------------------------------------
    def answers(self, x: np.ndarray) -> np.ndarray:
        """M·x: every measured answer of the clique cells x, by summing each clique out
        (a marginal measured more than once is summed once), or with the sparse matrix
        on a small model."""
        if self.sparse:
            return np.asarray(self.M @ x)
        out = np.empty(self.rows)
        done: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}
        for term in self.terms:
            key = (term.clique, term.axes)
            marginal = done.get(key)
            if marginal is None:
                block = x[self.offsets[term.clique] : self.offsets[term.clique + 1]]
                marginal = block.reshape(self.shapes[term.clique]).sum(axis=term.axes)
                done[key] = marginal
            flat = np.transpose(marginal, term.order).ravel()
            out[term.start : term.stop] = flat if term.query is None else term.query @ flat
        return out

    def adjoint(self, g: np.ndarray) -> np.ndarray:
        """Mᵀ·g: each answer's weight spread back over the clique cells it sums (the
        terms of one marginal are added before they are spread), or with the sparse
        matrix on a small model."""
        if self.sparse:
            return np.asarray(self.MT @ g)
        spread: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}
        for term in self.terms:
            part = g[term.start : term.stop]
            if term.query is not None:
                part = term.query.T @ part
            into = np.transpose(part.reshape(term.shape), term.back).reshape(term.into)
            key = (term.clique, term.axes)
            spread[key] = into if key not in spread else spread[key] + into
        out = np.zeros(self.n)
        views = self.split(out)
        for (k, _), into in spread.items():
            views[k] += into
        return out

    @cached_property
    def M(self) -> sp.csr_matrix:
        """M as a sparse matrix (answers × clique cells), built on first use: ADMM's KKT
        system and CGM need it. It holds a nonzero for every cell of every measurement's
        clique, which on a model of millions of cells is gigabytes, so the loss and its
        gradient never build it (`answers`, `adjoint`)."""
        blocks = []
        for term in self.terms:
            k = term.clique
            coords = np.indices(self.shapes[k]).reshape(len(self.shapes[k]), -1)
            kept = [i for i in range(len(self.shapes[k])) if i not in term.axes]
            target = np.ravel_multi_index([coords[kept[i]] for i in term.order], term.shape)
            marg = sp.csr_matrix(
                (np.ones(self.sizes[k]), (target, self.offsets[k] + np.arange(self.sizes[k]))),
                shape=(int(np.prod(term.shape)), self.n),
            )
            blocks.append(marg if term.query is None else (term.query @ marg).tocsr())
        return sp.vstack(blocks).tocsr() if blocks else sp.csr_matrix((0, self.n))

    @cached_property
    def MT(self) -> sp.csr_matrix:
        return self.M.T.tocsr()

    # --- objective -----------------------------------------------------------------
    def loss(self, x: np.ndarray) -> float:
        r = self.answers(x) - self.y
        if self.all_gaussian:
            return 0.5 * dot(self.w, r * r)
        return dot(self.w, np.where(self.is_gaussian, 0.5 * r * r, np.abs(r)))

    def loss_and_gradient(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        r = self.answers(x) - self.y
        if self.all_gaussian:
            g = self.w * r
            return 0.5 * dot(g, r), self.adjoint(g)
        g = self.w * np.where(self.is_gaussian, r, np.sign(r))
        value = dot(self.w, np.where(self.is_gaussian, 0.5 * r * r, np.abs(r)))
        return value, self.adjoint(g)

    # --- layouts -------------------------------------------------------------------
    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """Per-clique views of a flat vector over all clique cells."""
        return [
            flat[self.offsets[k] : self.offsets[k + 1]].reshape(s)
            for k, s in enumerate(self.shapes)
        ]

    def probabilities(self, theta: np.ndarray) -> np.ndarray:
        """Flat clique marginals (each clique summing to 1) of the potentials θ (flat)."""
        beliefs, log_z = self.plan.run(self.split(theta))
        flat = np.concatenate([b.ravel() for b in beliefs])
        flat -= log_z
        probabilities: np.ndarray = np.exp(flat, out=flat)
        return probabilities

    def model(self, thetas: list[np.ndarray]) -> GraphicalModel:
        return GraphicalModel(
            self.tree.domain,
            self.tree.cliques,
            {
                c: np.ascontiguousarray(t, dtype=float)
                for c, t in zip(self.tree.cliques, thetas, strict=True)
            },
            float(self.total),
        )

    def warm_theta(self, previous: GraphicalModel | None) -> np.ndarray:
        """The previous model's potentials mapped onto this tree's cliques (else zero)."""
        theta = np.zeros(self.n)
        if previous is None:
            return theta
        views = self.split(theta)
        domain = self.tree.domain
        for clique, values in previous.log_potentials.items():
            if any(
                a not in domain or domain.size_of(a) != previous.domain.size_of(a) for a in clique
            ):
                continue  # an attribute this domain lacks or sizes differently: cannot map
            holders = [k for k, c in enumerate(self.tree.cliques) if set(clique) <= set(c)]
            if not holders:
                continue  # no new clique contains it: that part starts from zero
            k = min(holders, key=lambda i: self.sizes[i])
            views[k] += to_clique_layout(domain, tuple(clique), values, self.tree.cliques[k])
        # Solvers need finite potentials; −inf (an impossible cell) becomes LOG_ZERO.
        return np.maximum(theta, LOG_ZERO, out=theta)
