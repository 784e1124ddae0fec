"""The select/measure engine that AIM and MWEM+PGM drive, and what a run takes and gives.

`MechanismRun` holds one run's state — its ρ ledger, the rounds (replayed and new),
the current model and what AIM's Theorem 4 needs — and owns the protocol with the
service. Write-ahead: every round opens `gate(RoundAccess)` BEFORE it touches the
true marginals (its selection scores them, its measurement adds noise to one); the
service records the round's cost as used, durably, before it returns, and may refuse
there (a cancelled job, a lost lease) — never later. Inside the gate the round selects,
draws, and hands the round to `on_round(round)` right after the noise is drawn and
BEFORE anything (the model fit) uses it; the service stores it there. A resumed run
gets the stored rounds back as `completed_rounds`, replays them (their noise and ρ
are reused; nothing is selected or drawn for them), takes the cost of `lost_rounds`
(accesses recorded whose output was never stored) as spent, and continues with the
budget that is left. Progress is reported after each round is stored, after every
iteration of every fit (the final one included; `app.privacy.mechanisms.fitting`) and
after each fit.

`RunArguments` are the keyword arguments every mechanism's `run_*` function takes
besides the domain, the true marginals, ρ and the workload; they go to the run as
they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar, Unpack

import numpy as np

from app.pgm.domain import Domain
from app.pgm.estimation import FitRecord
from app.pgm.measurement import Measurement
from app.pgm.model import GraphicalModel
from app.privacy import noise, selection
from app.privacy.accounting import BudgetOverspent
from app.privacy.mechanisms.bounds import UnmeasuredBound, theorem4_round_bound
from app.privacy.mechanisms.budget import LEDGER_RTOL, RhoLedger
from app.privacy.mechanisms.coarse import Candidate, Coarse, attributes_of
from app.privacy.mechanisms.fitting import (
    FitReports,
    Progress,
    Stage,
    fit_model,
    fit_plan,
    keeps_admm,
)
from app.privacy.mechanisms.options import MechanismOptions
from app.privacy.mechanisms.rounds import (
    Attrs,
    Priced,
    Round,
    RoundKind,
    RoundsMismatch,
    Selection,
    check_replayed,
)
from app.privacy.mechanisms.workload import covered_by

TrueMarginal = Callable[[Attrs], np.ndarray]
C = TypeVar("C", bound=Candidate)  # what a selection chooses among: marginals or coarse ones


@dataclass(frozen=True)
class RoundAccess(Priced):
    """What one round is about to do with the records, and its price: handed to the gate
    before the round reads anything. ε = 0: a measurement without selection."""

    index: int
    kind: RoundKind
    sigma: float
    epsilon: float
    sensitivity: int = 1


# The service's write-ahead gate: records the access as used, then lets it run.
Gate = Callable[[RoundAccess], AbstractContextManager[object]]


class MechanismStateError(RuntimeError):
    """A run's state breaks the engine's own protocol: a bug, never the caller's input."""


@dataclass
class MechanismResult:
    measurements: list[Measurement]
    model: GraphicalModel
    fit: FitRecord
    rounds: list[Round]
    rho_used: float
    rho_charged: float
    # Theorem 4 bounds (relative to `model`) of workload marginals never measured
    unmeasured_bounds: dict[Attrs, UnmeasuredBound] = field(default_factory=dict)


class RunArguments(TypedDict, total=False):
    """The optional arguments of every mechanism (`run_aim`, `run_mwem`)."""

    options: MechanismOptions | None
    completed_rounds: Sequence[Round | Mapping[str, Any]]
    on_round: Callable[[Round], None] | None
    on_progress: Callable[[Progress], None] | None
    base_measurements: Sequence[Measurement]
    warm_start: GraphicalModel | None
    gate: Gate | None
    lost_rounds: Sequence[float]


class TrueMarginals:
    """Cache of the true count marginals the worker computes (flat, int64)."""

    def __init__(self, domain: Domain, compute: TrueMarginal) -> None:
        self.domain = domain
        self._compute = compute
        self._cache: dict[Attrs, np.ndarray] = {}

    def __call__(self, attrs: Attrs) -> np.ndarray:
        found = self._cache.get(attrs)
        if found is None:
            raw = np.asarray(self._compute(attrs))
            if raw.size != self.domain.cells(attrs):
                raise ValueError(f"true marginal of {attrs} has {raw.size} cells")
            if raw.dtype.kind not in "iub" and not np.all(raw == np.round(raw)):
                raise TypeError("true marginals must be integer counts")
            found = raw.astype(np.int64).ravel()
            self._cache[attrs] = found
        return found


def model_estimate(model: GraphicalModel | None, domain: Domain, attrs: Attrs) -> np.ndarray:
    """M_r(p̂) flattened; an all-zero estimate before any model exists."""
    if model is None:
        return np.zeros(domain.cells(attrs))
    return np.asarray(model.marginal(attrs), dtype=float).ravel()


def notify(on_progress: Callable[[Progress], None] | None, progress: Progress) -> None:
    if on_progress is not None:
        on_progress(progress)


class MechanismRun:
    """State of one run: ledger, rounds (replayed and new), current model, Theorem 4 data.

    AIM and MWEM drive it with their own schedules; it owns the protocol: a round's ρ is
    spent in the ledger and passed through the gate (`access`) before its selection or
    its noise reads a true marginal, the round is handed to `on_round` (the service
    stores it) before the model uses it, and progress is reported after each step.
    """

    def __init__(
        self,
        name: str,
        domain: Domain,
        true_marginal: TrueMarginal,
        rho: float,
        workload: Mapping[Attrs, float],
        **arguments: Unpack[RunArguments],
    ) -> None:
        self.name = name
        self.domain = domain
        self.truth = TrueMarginals(domain, true_marginal)
        self.ledger = RhoLedger(rho)
        self.options = arguments.get("options") or MechanismOptions()
        self.workload = dict(workload)
        self.stored = [
            r if isinstance(r, Round) else Round.from_dict(r)
            for r in arguments.get("completed_rounds", ())
        ]
        check_replayed(self.stored, self.options.sensitivity)
        for r in self.stored:
            if r.coarse is not None and r.coarse.sizes != domain.shape(r.attributes):
                raise RoundsMismatch(f"stored round {r.index} groups other attributes' values")
            if r.values.size != (
                domain.cells(r.attributes) if r.coarse is None else r.coarse.cells
            ):
                raise RoundsMismatch(f"stored round {r.index} has the wrong number of values")
        self.on_round = arguments.get("on_round")
        self.gate = arguments.get("gate")
        self.lost_costs = [float(c) for c in arguments.get("lost_rounds", ())]
        self._open: RoundAccess | None = None
        self.on_progress = arguments.get("on_progress")
        self.base_measurements = list(arguments.get("base_measurements", ()))
        self.model = arguments.get("warm_start")
        self.fit_record: FitRecord | None = None
        # between-round fits may use ADMM until one of them is too much work (`keeps_admm`)
        self.admm_rounds = True
        # set by the mechanism once its last selection round begins: no pause point after
        self.closing = False
        self.rounds: list[Round] = []
        # workload marginal -> (round index, M_r(p̂_{t−1}), its noise term) of the last
        # round it was a candidate in this process (not persisted; see `finish`)
        self.estimates_at_selection: dict[Attrs, tuple[int, np.ndarray, float]] = {}
        self._estimates: dict[Attrs, np.ndarray] = {}  # of the current model

    # --- replay -----------------------------------------------------------------
    def replay(self, check: Callable[[int, Round], None]) -> None:
        """Take the stored rounds back: their ρ is spent again in the ledger, no noise drawn;
        then the lost rounds' ρ, which was used though nothing of it was stored."""
        for r in self.stored:
            check(r.index, r)
            self.ledger.spend(r.rho)
            self.rounds.append(r)
        for cost in self.lost_costs:
            self.ledger.spend(cost)

    @property
    def lost(self) -> int:
        """How many rounds were paid for (and ran) but lost before they were stored."""
        return len(self.lost_costs)

    @contextmanager
    def access(self, kind: RoundKind, sigma: float, epsilon: float) -> Iterator[RoundAccess]:
        """One round's access to the records: its ρ spent here, then the service's gate,
        which records it as used before the body selects or draws."""
        if self._open is not None:
            raise MechanismStateError("a round's access is already open")
        request = RoundAccess(len(self.rounds), kind, sigma, epsilon, self.options.sensitivity)
        self.ledger.spend(request.cost)
        with self.gate(request) if self.gate is not None else nullcontext():
            self._open = request
            try:
                yield request
            finally:
                self._open = None

    def _require_open(self, doing: str) -> RoundAccess:
        if self._open is None:
            raise MechanismStateError(f"{doing} outside a round's access to the records")
        return self._open

    # --- state ------------------------------------------------------------------
    @property
    def measured(self) -> list[Attrs]:
        sets = [self.domain.canonical(m.attributes) for m in self.base_measurements]
        return sets + [self.domain.canonical(r.attributes) for r in self.rounds]

    def measurements(self) -> list[Measurement]:
        return self.base_measurements + [r.measurement() for r in self.rounds]

    def estimate(self, attrs: Attrs) -> np.ndarray:
        """M_r(p̂) of the current model (kept until the next fit; read-only)."""
        found = self._estimates.get(attrs)
        if found is None:
            found = model_estimate(self.model, self.domain, attrs)
            found.setflags(write=False)
            self._estimates[attrs] = found
        return found

    def cells_of(self, r: Candidate) -> int:
        return r.cells if isinstance(r, Coarse) else self.domain.cells(r)

    def truth_of(self, r: Candidate) -> np.ndarray:
        """r's true counts (a coarse candidate's over its groups); only within an access."""
        if isinstance(r, Coarse):
            return r.project(self.truth(r.attributes))
        return self.truth(r)

    def estimate_of(self, r: Candidate) -> np.ndarray:
        """The model's answer to r (a coarse candidate's over its groups)."""
        if isinstance(r, Coarse):
            return r.project(self.estimate(r.attributes))
        return self.estimate(r)

    def _progress(self, stage: Stage, **details: Any) -> None:
        notify(
            self.on_progress,
            Progress(
                mechanism=self.name,
                round_index=len(self.rounds) - 1,
                stage=stage,
                attributes=self.rounds[-1].attributes if self.rounds else (),
                rho_used=self.ledger.used,
                rho_total=self.ledger.charged,
                rounds_done=len(self.rounds),
                **details,
            ),
        )

    # --- steps ------------------------------------------------------------------
    def select(
        self,
        candidates: Sequence[C],
        weights: Mapping[C, float],
        sigma: float,
        epsilon: float,
        noise: float | Mapping[C, float],
    ) -> tuple[C, np.ndarray, dict[str, Any]]:
        """Exponential mechanism over the candidates, quality w_r(‖M_r(D) − M_r(p̂)‖₁ − η_r).

        η_r, r's noise term, is `noise`·σ·n_r when `noise` is a coefficient b (AIM's paper
        √(2/π), MWEM 0), or `noise[r]` (rows) when it is a mapping; either depends on
        public sizes and released measurements only, so the sensitivity is k·max w_r. A
        coarse candidate (`Coarse`) is scored on its groups: one unit moves its counts by at
        most k too."""
        if not candidates:
            raise ValueError("no candidate marginal fits within the model size limit")
        self._require_open("a selection")
        index = len(self.rounds)
        if isinstance(noise, Mapping):
            terms, bias = {r: float(noise[r]) for r in candidates}, None
        else:
            terms = {r: noise * sigma * self.cells_of(r) for r in candidates}
            bias = float(noise)
        estimates = [self.estimate_of(r) for r in candidates]
        scores = np.empty(len(candidates))
        for k, (r, est) in enumerate(zip(candidates, estimates, strict=True)):
            error = float(np.abs(self.truth_of(r) - est).sum())
            scores[k] = weights[r] * (error - terms[r])
        # One unit moves each ‖M_r(D) − M_r(p̂)‖₁ by at most k, so q_r by at most k·w_r.
        sensitivity = self.options.sensitivity * max(weights[r] for r in candidates)
        chosen = selection.exponential_mechanism(scores, epsilon, sensitivity)
        for r, est in zip(candidates, estimates, strict=True):
            if not isinstance(r, Coarse) and r in self.workload:
                self.estimates_at_selection[r] = (index, est, terms[r])
        info = {
            "candidates": len(candidates),
            "sensitivity": float(sensitivity),
            "chosen_weight": float(weights[candidates[chosen]]),
            "bias": bias,
            "chosen_noise": terms[candidates[chosen]],
            "workload_candidates": tuple(
                r for r in candidates if not isinstance(r, Coarse) and r in self.workload
            ),
        }
        return candidates[chosen], estimates[chosen], info

    def measure(
        self,
        kind: RoundKind,
        target: Candidate,
        sigma: float,
        epsilon: float,
        *,
        annealed: bool = False,
        final: bool = False,
        estimate_before: np.ndarray | None = None,
        selection_info: Mapping[str, Any] | None = None,
    ) -> Round:
        """Draw the noise (OpenDP) on `target`'s counts (a marginal, or a coarse one's
        groups), hand the round to `on_round`, keep it (within `access`)."""
        opened = self._require_open("a measurement")
        if (opened.kind, opened.sigma, opened.epsilon) != (kind, sigma, epsilon):
            raise MechanismStateError("a round measured at another price than it paid")
        cost = opened.cost
        noisy = noise.discrete_gaussian(self.truth_of(target), sigma)
        selection_record = None
        if selection_info is not None:
            if estimate_before is None:
                raise MechanismStateError("a selected round needs the model's estimate before it")
            selection_record = Selection(
                error_before=float(np.abs(noisy - estimate_before).sum()), **selection_info
            )
        record = Round(
            index=len(self.rounds),
            kind=kind,
            attributes=attributes_of(target),
            sigma=sigma,
            epsilon=epsilon,
            rho=cost,
            values=noisy,
            annealed=annealed,
            final=final,
            estimate_before=estimate_before,
            selection=selection_record,
            sensitivity=opened.sensitivity,
            coarse=target if isinstance(target, Coarse) else None,
        )
        if self.on_round is not None:
            self.on_round(record)  # the service commits it here, before anything uses it
        self.rounds.append(record)
        self._progress("measured", pause_point=not (final or self.closing))
        return record

    def refit(self, final: bool = False) -> None:
        """Fit the model to every measurement so far (warm-started from the last model),
        reporting each iteration as progress ("fitting", or "final fit") and the fit's
        record when it ends ("fitted"; `finish` reports the final one as "done")."""
        self._estimates = {}
        measurements = self.measurements()
        sets = [m.attributes for m in measurements]
        plan = fit_plan(self.domain, sets, self.options, final, self.admm_rounds)
        stage: Stage = "final fit" if final else "fitting"
        checkpoint = self.options.checkpoint
        reports = None
        if self.on_progress is not None or checkpoint is not None:
            reports = FitReports(stage, plan, checkpoint, self._progress)
        self.model, self.fit_record = fit_model(
            self.domain, measurements, self.options, self.model, plan, reports
        )
        if not final:  # `finish` reports the final fit's record as "done"
            self.admm_rounds = self.admm_rounds and keeps_admm(self.fit_record, self.options)
            self._progress("fitted", fit=self.fit_record)

    # --- end --------------------------------------------------------------------
    def finish(self, weights: Mapping[Attrs, float] | None = None) -> MechanismResult:
        """Final fit, final checks, and Theorem 4 bounds (relative to the final model).

        `weights` are the quality weights w_r the selections used (AIM's candidate
        weights; 1 for MWEM, the default).
        """
        self.refit(final=True)
        if self.model is None or self.fit_record is None:
            raise MechanismStateError("the final fit left no model")
        used = self.ledger.used
        if used > self.ledger.charged * (1.0 + LEDGER_RTOL):
            raise BudgetOverspent(
                f"mechanism spent {used!r} ρ but was charged {self.ledger.charged!r}"
            )
        # a coarse measurement (a query over the marginal) does not cover it: no Theorem 2
        measured = [
            self.domain.canonical(m.attributes) for m in self.measurements() if m.query is None
        ]
        bounds: dict[Attrs, UnmeasuredBound] = {}
        for r in self.workload:
            weight = 1.0 if weights is None else weights[r]
            if covered_by(r, measured):
                continue  # Theorem 2 applies
            last = None
            for rnd in reversed(self.rounds):
                if rnd.selection is not None and r in rnd.selection.workload_candidates:
                    last = rnd
                    break
            if last is None:
                continue
            stored = self.estimates_at_selection.get(r)
            if stored is None or stored[0] != last.index:
                # that round was replayed after a crash: M_r(p̂_{t−1}) is gone, no bound
                continue
            base = theorem4_round_bound(
                self.domain, last, r, weight, stored[2], self.options.confidence
            )
            drift = float(np.abs(stored[1] - self.estimate(r)).sum())
            bounds[r] = UnmeasuredBound(r, base + drift, last.index, self.options.confidence)
        self._progress("done", fit=self.fit_record)
        return MechanismResult(
            measurements=[r.measurement() for r in self.rounds],
            model=self.model,
            fit=self.fit_record,
            rounds=list(self.rounds),
            rho_used=used,
            rho_charged=self.ledger.charged,
            unmeasured_bounds=bounds,
        )
