"""Estimators: interchangeable algorithms that fit a model to one `FitProblem`.

Every estimator is a module of this package with one function of the same shape,

    estimate(run: FitRun, theta: np.ndarray, *, warm: bool) -> GraphicalModel

(the `Estimator` protocol). `run.problem` is the compiled problem (junction tree,
belief-propagation oracle, measurement matrix, N̂); `theta` is the flat vector of
starting log-potentials over the tree's cliques (zero, or a previous model's mapped
onto this tree, in which case `warm` is true). The estimator reports the loss of every
iteration with `run.report` (and calls `run.tick` after any other step that may take
seconds), sets `run.converged` when its own stopping rule is met,
never runs more than `run.max_iterations` iterations, and returns the fitted model.

The fitting loop (`app.pgm.estimation.fit`) builds the tree and the problem, picks
the estimator by name from its registry and records the run; it is the only caller.
To add an estimator: a module here with its `estimate`, and one line in that registry.

- `mirror_descent` — Private-PGM Algorithm 1 on the potentials.
- `accelerated` — Algorithm 1 from Nesterov's extrapolated point, with adaptive restart.
- `dual_averaging` — Private-PGM Algorithm 2, smooth (all-Gaussian) losses only.
- `admm` — a QP over the clique marginals, solved by ADMM with exact equalities.
- `max_entropy` — not an estimator: the proportional-fitting step that moves the
  marginal-space estimators to the maximum-entropy point of their optimal face.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from app.pgm.model import GraphicalModel
from app.pgm.problem import FitProblem

Callback = Callable[[int, float], None]  # (iteration, loss) after every iteration
Heartbeat = Callable[[], None]  # after every other step that may take seconds


@dataclass
class FitRun:
    """One estimator run: its problem and limits in, its loss trace and outcome out."""

    problem: FitProblem
    max_iterations: int
    tolerance: float
    callback: Callback | None
    heartbeat: Heartbeat | None = None
    losses: list[float] = field(default_factory=list)
    converged: bool = False
    entropy_sweeps: int = 0

    def report(self, value: float) -> None:
        self.losses.append(value)
        if self.callback is not None:
            self.callback(len(self.losses), value)

    def tick(self) -> None:
        """After a step that is no iteration but may take seconds (a factorisation, a
        proportional-fitting sweep): `heartbeat()`, so the caller can still report
        progress and stop there."""
        if self.heartbeat is not None:
            self.heartbeat()

    def stalled(self) -> bool:
        """Relative change of the loss below tolerance (on a loss scale of at least 1)."""
        if len(self.losses) < 2:
            return False
        a, b = self.losses[-2], self.losses[-1]
        return abs(a - b) <= self.tolerance * max(abs(b), 1.0)


class Estimator(Protocol):
    """What every estimator module's `estimate` is (see the module docstring)."""

    def __call__(self, run: FitRun, theta: np.ndarray, *, warm: bool) -> GraphicalModel: ...
