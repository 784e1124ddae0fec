"""A small seeded table shared by the mechanism tests: its domain, workload and true marginals."""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations

import numpy as np

from app.pgm.domain import Domain

DOMAIN = Domain(("a", "b", "c", "d", "e"), (2, 3, 4, 5, 3))
ALL_PAIRS = list(combinations(DOMAIN.attributes, 2))
FAST = {"fit_iterations": 100, "final_fit_iterations": 300}


def synthetic(seed: int, rows: int = 2_000) -> Callable[[tuple[str, ...]], np.ndarray]:
    """A seeded chain-structured table's true-marginal function (flat counts; rows stay here)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, rows)
    b = (a + rng.integers(0, 2, rows)) % 3
    c = (b + rng.integers(0, 2, rows)) % 4
    d = (c + rng.integers(0, 3, rows)) % 5
    e = (a + rng.integers(0, 2, rows)) % 3
    data = np.stack([a, b, c, d, e], axis=1)

    def true_marginal(attrs: tuple[str, ...]) -> np.ndarray:
        idx = [DOMAIN.index(x) for x in attrs]
        flat = np.ravel_multi_index(tuple(data[:, i] for i in idx), DOMAIN.shape(attrs))
        return np.bincount(flat, minlength=DOMAIN.cells(attrs))

    return true_marginal
