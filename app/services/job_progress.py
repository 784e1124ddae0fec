"""What a running mechanism job reports: its stage, round, fit iteration and ETA, throttled.

A mechanism run (`app.privacy.mechanisms`) reports a `Progress` after every round it
stores, after every iteration of every fit and after each fit. `MechanismProgress`
turns those into the job's progress updates (`GET /v1/jobs/{id}` shows them): a fit's
iterations at most once every `MIN_REPORT_SECONDS` (a write each is a database
transaction; one a second keeps the job's progress at most a second stale), every
other report at once.

The ETA (`eta_seconds`) is estimated from this job's own timings, in this process:

- rounds left × the mean time of the last `RECENT_ROUNDS` rounds that had a fit before
  them (AIM's one-way rounds, drawn back to back, take no time worth counting; later
  rounds are slower, on a larger model): rounds left is the ρ not
  yet used divided by the last such round's ρ (AIM anneals, so its rounds get dearer
  and fewer; MWEM's all cost the same);
- plus the final fit: the model's cells × the iterations it will run × the seconds a
  cell-iteration took in this run's last fit with the same solver (mirror descent: at
  most its plan's cap, which follows from the model's cells; ADMM converges in about
  as many iterations as its last fit between rounds);
- during the final fit: its iterations left × its own seconds an iteration so far;
  left to its cap for mirror descent, and for ADMM to as many as the run's last ADMM
  fit took or, once past that, as many again as it has run.

It is null where there is nothing to estimate from (no round timed yet, no fit of the
final fit's solver timed). The ETA is for display: nothing in the run reads it, and it
is the only thing here that reads a clock, so the run does the same on a quiet or a busy
machine. Every number written is finite (JSON has no NaN).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.pgm.estimation import ADMM_MAX_CELLS, FitRecord
from app.privacy.mechanisms import Progress
from app.privacy.mechanisms.fitting import FINAL_FIT_SOLVER

MIN_REPORT_SECONDS = 1.0
# A round's expected time is the mean of the last few rounds' (rounds slow down as the
# model grows).
RECENT_ROUNDS = 5
# Progress stages, as the job shows them (the mechanism's round stages keep their names).
STAGE_NAMES = {
    "measured": "round measured",
    "fitting": "round fitting",
    "fitted": "round fitted",
    "final fit": "final fit",
    "done": "round done",
}
FIT_STAGES = frozenset({"fitting", "final fit"})


def finite(value: float | None) -> float | None:
    """A finite float, or None."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def final_solver(configured: str | None, cells: int) -> str:
    """The solver app.pgm's fit will run for the final fit of a model of `cells` cells."""
    if configured is None or configured == "auto":
        return "admm" if cells <= ADMM_MAX_CELLS else FINAL_FIT_SOLVER
    return configured


@dataclass
class RunTimes:
    """The timings of one run in this process, for its ETA (display only)."""

    final_solver: str | None
    # the final fit's iteration cap: fixed, or by the model's cells (its plan)
    final_iterations: int | Callable[[int], int]
    round_seconds: list[float] = field(default_factory=list)
    last_round_rho: float | None = None
    # solver -> (seconds a cell-iteration took, iterations) of its last fit
    fits: dict[str, tuple[float, int]] = field(default_factory=dict)
    model_cells: int | None = None

    def fitted(self, record: FitRecord) -> None:
        if record.iterations > 0 and record.model_cells > 0 and record.seconds > 0:
            rate = record.seconds / (record.iterations * record.model_cells)
            self.fits[record.solver] = (rate, record.iterations)
        self.model_cells = record.model_cells

    def final_fit_seconds(self) -> float | None:
        """The final fit's expected seconds, from this run's fits so far (None: none timed
        with its solver)."""
        if self.model_cells is None:
            return None
        solver = final_solver(self.final_solver, self.model_cells)
        timed = self.fits.get(solver)
        if timed is None and solver == FINAL_FIT_SOLVER:
            # never run between rounds: mirror descent's rate (its iteration is the same
            # step, with one more belief-propagation pass)
            timed = self.fits.get("mirror_descent")
        if timed is None:
            return None
        rate, last_iterations = timed
        iterations = self.final_iteration_cap(self.model_cells)
        if solver == "admm":  # to convergence, about as long as its last fit
            iterations = min(iterations, last_iterations)
        return rate * self.model_cells * iterations

    def final_iteration_cap(self, cells: int) -> int:
        cap = self.final_iterations
        return cap(cells) if callable(cap) else cap

    def rounds_seconds(self, rho_left: float) -> float | None:
        """The rounds left's expected seconds (None: no round timed yet)."""
        if not self.round_seconds or not self.last_round_rho:
            return None
        rounds_left = max(rho_left, 0.0) / self.last_round_rho
        recent = self.round_seconds[-RECENT_ROUNDS:]
        return rounds_left * sum(recent) / len(recent)

    def final_fit_iterations_left(self, iteration: int, cap: int) -> int:
        """Iterations the running final fit has left: to its cap, or (ADMM, which
        converges first) to as many as the run's last ADMM fit took, or twice as many as
        it has run if that is more."""
        expected, cells = cap, self.model_cells
        admm = cells is not None and final_solver(self.final_solver, cells) == "admm"
        if admm and "admm" in self.fits:
            # past that, as many again as it has run (it is converging more slowly)
            expected = min(cap, max(self.fits["admm"][1], 2 * iteration))
        return max(expected - iteration, 0)


class MechanismProgress:
    """A mechanism job's `on_progress`: turns each `Progress` into the job's progress
    update (or None: a fit iteration within `min_interval` of the last write)."""

    def __init__(
        self,
        *,
        rho_total: float,
        final_fit_solver: str | None,
        final_fit_iterations: int | Callable[[int], int],
        min_interval: float = MIN_REPORT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rho_total = rho_total
        self.min_interval = min_interval
        self.clock = clock
        self.times = RunTimes(final_fit_solver, final_fit_iterations)
        self._last_write: float | None = None
        self._last_event = clock()  # when the last round was stored or fit ended
        self._last_round = self._last_event  # when the last round was stored
        self._last_rho: float | None = None
        self._fit_since_round = False

    def update(self, progress: Progress) -> dict[str, Any] | None:
        now = self.clock()
        if progress.stage in FIT_STAGES:
            if self._last_write is not None and now - self._last_write < self.min_interval:
                return None
        else:
            self._observe(progress, now)
        self._last_write = now
        return {
            "stage": STAGE_NAMES[progress.stage],
            "round": progress.round_index,
            "rounds_done": progress.rounds_done,
            "attributes": list(progress.attributes),
            "rho_used": finite(progress.rho_used),
            "rho_total": self.rho_total,
            **self._fit_fields(progress),
            "eta_seconds": self._eta(progress, now),
        }

    def _observe(self, progress: Progress, now: float) -> None:
        """Time a stored round (if a fit came before it: a selection round) or a fit."""
        if progress.stage == "measured":
            if self._fit_since_round:  # a round's time: its fit, selection and draw
                self.times.round_seconds.append(now - self._last_round)
            spent = None if self._last_rho is None else progress.rho_used - self._last_rho
            first = self.times.last_round_rho is None
            if spent is not None and spent > 0 and (self._fit_since_round or first):
                self.times.last_round_rho = spent
            self._fit_since_round = False
            self._last_event = self._last_round = now
        elif progress.stage == "fitted" and progress.fit is not None:
            self.times.fitted(progress.fit)
            self._fit_since_round = True
            self._last_event = now
        self._last_rho = progress.rho_used

    @staticmethod
    def _fit_fields(progress: Progress) -> dict[str, Any]:
        if progress.stage in FIT_STAGES:
            return {
                "iteration": progress.iteration,
                "max_iterations": progress.max_iterations,
                "loss": finite(progress.loss),
            }
        record = progress.fit
        if record is not None:
            loss = record.losses[-1] if record.losses else record.final_loss
            return {"iteration": record.iterations, "max_iterations": None, "loss": finite(loss)}
        return {"iteration": None, "max_iterations": None, "loss": None}

    def _eta(self, progress: Progress, now: float) -> float | None:
        if progress.stage == "done":
            return None
        if progress.stage == "final fit":
            iteration, cap = progress.iteration or 0, progress.max_iterations
            if iteration <= 0 or cap is None:
                return finite(self.times.final_fit_seconds())
            per_iteration = (now - self._last_event) / iteration
            return finite(self.times.final_fit_iterations_left(iteration, cap) * per_iteration)
        rounds = self.times.rounds_seconds(progress.rho_total - progress.rho_used)
        final = self.times.final_fit_seconds()
        if rounds is None or final is None:
            return None
        return finite(rounds + final)


def eta_now(status: str, progress: dict[str, Any] | None, now: datetime) -> float | None:
    """A job's `eta_seconds` as `GET /v1/jobs/{id}` shows it: while it runs, the ETA its
    worker last wrote less the time since (`updated_at`), never below 0; else None."""
    if status != "running" or not progress:
        return None
    eta, written = progress.get("eta_seconds"), progress.get("updated_at")
    if not isinstance(eta, int | float) or not math.isfinite(eta) or not isinstance(written, str):
        return None
    try:
        at = datetime.fromisoformat(written)
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return max(float(eta) - max((now - at).total_seconds(), 0.0), 0.0)
