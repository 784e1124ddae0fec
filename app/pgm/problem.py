"""The fitting problem: measurements compiled against one junction tree, for the estimators.

`FitProblem` lays every clique marginal of the tree end to end in one flat vector x
(clique k at `offsets[k]`, row-major over the clique's attributes) and compiles the
measurements into one sparse matrix M with M·x = every measured answer, so each
estimator evaluates the loss and its gradient with two sparse products whatever the
measurements are. It also carries the belief-propagation oracle of the tree
(`probabilities`: potentials θ ↦ clique marginals) and turns potentials back into a
`GraphicalModel`.

Models are built from clique probabilities with `potentials_from_marginals`
(θ_root = log p_root, θ_C = log p_C − log p_C(S) for the others). A zero probability
becomes log(1e-300) ≈ −690.8 rather than −inf, so downstream inference never meets
−inf − (−inf); the mass this puts on impossible cells is below 1e-290.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from app.pgm.belief_propagation import LOG_ZERO, CalibrationPlan, to_clique_layout
from app.pgm.junction_tree import JunctionTree
from app.pgm.measurement import Measurement
from app.pgm.model import GraphicalModel

PROBABILITY_FLOOR = 1e-300


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


class FitProblem:
    """Measurements compiled against one junction tree: x (all clique cells) ↦ answers."""

    def __init__(
        self, tree: JunctionTree, measurements: Sequence[Measurement], total: float
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
        blocks, values, weights, gaussian = [], [], [], []
        # Lipschitz constant of the Gaussian part of ∇loss in counts, from ‖·‖₁ to ‖·‖∞:
        # Σ w·(largest squared column norm of Q) — used by dual averaging's step.
        self.lipschitz_unit = 0.0
        for m in measurements:
            k = tree.clique_containing(m.attributes)
            clique = tree.cliques[k]
            coords = np.indices(self.shapes[k]).reshape(len(clique), -1)
            target = np.ravel_multi_index(
                [coords[clique.index(a)] for a in m.attributes], domain.shape(m.attributes)
            )
            cells = domain.cells(m.attributes)
            marg = sp.csr_matrix(
                (np.ones(self.sizes[k]), (target, self.offsets[k] + np.arange(self.sizes[k]))),
                shape=(cells, self.n),
            )
            q = None if m.query is None else sp.csr_matrix(m.query, dtype=float)
            block = marg if q is None else (q @ marg).tocsr()
            blocks.append(block)
            values.append(m.values)
            weights.append(np.full(m.values.size, m.weight))
            gaussian.append(np.full(m.values.size, m.noise == "gaussian"))
            if m.noise == "gaussian":
                column_norm2 = (
                    1.0 if q is None else float(np.max(np.asarray(q.multiply(q).sum(axis=0))))
                )
                self.lipschitz_unit += m.weight * column_norm2
        # Maximal measured sets, each as (holding clique, that clique's axes to sum out).
        sets = [domain.canonical(m.attributes) for m in measurements]
        maximal = {s for s in sets if not any(set(s) < set(o) for o in sets)}
        self.measured_sets: list[tuple[int, tuple[int, ...]]] = []
        for s in sorted(maximal, key=lambda s: (len(s), s)):
            k = tree.clique_containing(s)
            axes = tuple(i for i, a in enumerate(tree.cliques[k]) if a not in s)
            self.measured_sets.append((k, axes))
        self.M = sp.vstack(blocks).tocsr() if blocks else sp.csr_matrix((0, self.n))
        self.MT = self.M.T.tocsr()
        self.y = np.concatenate(values) if values else np.zeros(0)
        self.w = np.concatenate(weights) if weights else np.zeros(0)
        self.is_gaussian = np.concatenate(gaussian) if gaussian else np.zeros(0, bool)
        self.all_gaussian = bool(self.is_gaussian.all())
        self.any_gaussian = bool(self.is_gaussian.any())

    # --- objective -----------------------------------------------------------------
    def loss(self, x: np.ndarray) -> float:
        r = self.M @ x - self.y
        if self.all_gaussian:
            return 0.5 * dot(self.w, r * r)
        return dot(self.w, np.where(self.is_gaussian, 0.5 * r * r, np.abs(r)))

    def loss_and_gradient(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        r = self.M @ x - self.y
        if self.all_gaussian:
            g = self.w * r
            return 0.5 * dot(g, r), self.MT @ g
        g = self.w * np.where(self.is_gaussian, r, np.sign(r))
        value = dot(self.w, np.where(self.is_gaussian, 0.5 * r * r, np.abs(r)))
        return value, self.MT @ g

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
