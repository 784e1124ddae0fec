"""Shared pieces of the workload-adaptive mechanisms (AIM, MWEM+PGM).

A mechanism run is a list of **rounds**. A round measures one marginal with discrete
Gaussian noise, after (kind "select+measure") choosing it with the exponential
mechanism, or without selection (kind "measure", AIM's one-way initialisation). Each
`Round` record is small and JSON-serialisable (`to_dict`/`from_dict`) and holds
everything a resumed run needs: the noisy values (never drawn again), σ and ε used,
its exact ρ cost, the model's estimate of the chosen marginal before the round (to
recompute the annealing decision after a crash), and the selection statistics that
AIM's Theorem 4 needs.

Protocol with the service: the mechanism calls `on_round(round)` right after the noise
of the round is drawn and BEFORE anything (the model fit) uses it; the service commits
the round there. A resumed run gets the stored rounds back as `completed_rounds`,
replays them (their noise and ρ are reused; nothing is drawn for them) and continues
with the budget that is left.

Budget bookkeeping: every round's cost is computed from the σ and ε it actually uses
(1/(2σ²) + ε²/8); costs are summed with `math.fsum` (exactly rounded), and the round
that ends a run is solved for exactly the remaining ρ, then nudged so that its
floating-point cost never exceeds it. `RhoLedger.spend` asserts that the sum never
exceeds the charge by more than a relative 1e-12 (float rounding only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Literal

import numpy as np

from app.pgm.domain import Domain
from app.pgm.estimation import FitRecord, fit
from app.pgm.junction_tree import model_cells
from app.pgm.measurement import Measurement
from app.pgm.model import GraphicalModel
from app.privacy.accounting import rho_exponential, rho_gaussian

Attrs = tuple[str, ...]
RoundKind = Literal["measure", "select+measure"]
TrueMarginal = Callable[[Attrs], np.ndarray]

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
# Relative slack allowed between the summed float costs and the charge.
LEDGER_RTOL = 1e-12


class RoundsMismatch(ValueError):
    """The stored rounds do not belong to this run (other budget, workload or options)."""


@dataclass(frozen=True)
class MechanismOptions:
    """Knobs of a run. Everything here must be the same when a run is resumed."""

    max_model_cells: int = 10**7
    rounds: int | None = None  # AIM: T (default 16·d); MWEM: T (default d)
    measure_share: float = 0.9  # α: share of a round's ρ spent on measurement
    confidence: float = 0.95  # of the Theorem 4 bounds computed at the end
    # Fits between rounds only steer selection and annealing: a warm-started mirror-descent
    # fit of a few hundred iterations per round is enough (each round adds one measurement) and
    # costs linear time in the model's cells. The final fit, which the result and the
    # bounds refer to, runs app.pgm's default solver to convergence.
    fit_solver: str | None = "mirror_descent"
    fit_iterations: int = 300
    final_fit_solver: str | None = None  # None: app.pgm's default
    final_fit_iterations: int = 500
    fit_tolerance: float = 1e-7

    def __post_init__(self) -> None:
        if self.max_model_cells < 1:
            raise ValueError("max_model_cells must be positive")
        if self.rounds is not None and self.rounds < 1:
            raise ValueError("rounds must be positive")
        if not 0.0 < self.measure_share < 1.0:
            raise ValueError("measure_share must be in (0, 1)")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError("confidence must be in (0, 1)")


@dataclass(frozen=True)
class Selection:
    """What the exponential mechanism of one round saw (for AIM Theorem 4).

    `error_before` is ‖ỹ − M_r(p̂_{t−1})‖₁ for the chosen r (computable only after the
    measurement). `bias` is the coefficient b in the quality w_r(‖M_r(D) − M_r(p̂)‖₁ −
    b·σ·n_r): √(2/π) for AIM, 0 for MWEM. `workload_candidates` lists the workload
    marginals that were candidates this round (their weights and sizes follow from the
    workload and domain).
    """

    candidates: int
    sensitivity: float
    chosen_weight: float
    error_before: float
    bias: float
    workload_candidates: tuple[Attrs, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidates": self.candidates,
            "sensitivity": self.sensitivity,
            "chosen_weight": self.chosen_weight,
            "error_before": self.error_before,
            "bias": self.bias,
            "workload_candidates": [list(a) for a in self.workload_candidates],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Selection:
        return cls(
            candidates=int(data["candidates"]),
            sensitivity=float(data["sensitivity"]),
            chosen_weight=float(data["chosen_weight"]),
            error_before=float(data["error_before"]),
            bias=float(data["bias"]),
            workload_candidates=tuple(tuple(a) for a in data["workload_candidates"]),
        )


@dataclass(frozen=True, eq=False)
class Round:
    """One completed round of a mechanism; persisted by the service as it happens.

    `sigma`/`epsilon` are what this round used (ε = 0 for "measure"); `annealed` says the
    annealing rule halved σ (doubled ε) going into this round; `final` marks the round
    that spent exactly the rest of the budget. The annealing decision *after* round t
    needs the model fitted with round t's measurement, which exists only after the
    round is stored (the noise must be stored before anything uses it), so it is the
    next round's `sigma`/`annealed`; after a crash it is recomputed from
    `estimate_before` and the refitted model (post-processing, no privacy cost).
    """

    index: int
    kind: RoundKind
    attributes: Attrs
    sigma: float
    epsilon: float
    rho: float
    values: np.ndarray  # noisy counts, int64, row-major over `attributes`
    annealed: bool = False
    final: bool = False
    estimate_before: np.ndarray | None = None  # M_r(p̂_{t−1}) of the chosen r
    selection: Selection | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", tuple(self.attributes))
        object.__setattr__(self, "values", np.asarray(self.values, dtype=np.int64).ravel())
        if self.estimate_before is not None:
            object.__setattr__(
                self, "estimate_before", np.asarray(self.estimate_before, dtype=float).ravel()
            )
        if self.kind not in ("measure", "select+measure"):
            raise ValueError(f"unknown round kind {self.kind!r}")

    @property
    def cost(self) -> float:
        """ρ recomputed from σ and ε (must equal `rho`)."""
        return round_cost(self.sigma, self.epsilon)

    def measurement(self) -> Measurement:
        return Measurement(self.attributes, self.values.astype(float), "gaussian", self.sigma)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "kind": self.kind,
            "attributes": list(self.attributes),
            "sigma": self.sigma,
            "epsilon": self.epsilon,
            "rho": self.rho,
            "values": [int(v) for v in self.values],
            "annealed": self.annealed,
            "final": self.final,
            "estimate_before": None
            if self.estimate_before is None
            else [float(v) for v in self.estimate_before],
            "selection": None if self.selection is None else self.selection.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Round:
        estimate = data.get("estimate_before")
        selection = data.get("selection")
        return cls(
            index=int(data["index"]),
            kind=data["kind"],
            attributes=tuple(data["attributes"]),
            sigma=float(data["sigma"]),
            epsilon=float(data["epsilon"]),
            rho=float(data["rho"]),
            values=np.asarray(data["values"], dtype=np.int64),
            annealed=bool(data.get("annealed", False)),
            final=bool(data.get("final", False)),
            estimate_before=None if estimate is None else np.asarray(estimate, dtype=float),
            selection=None if selection is None else Selection.from_dict(selection),
        )


@dataclass(frozen=True)
class Progress:
    """Reported after each round is stored and after each fit."""

    mechanism: str
    round_index: int
    stage: Literal["measured", "fitted", "done"]
    attributes: Attrs
    rho_used: float
    rho_total: float
    rounds_done: int


@dataclass
class MechanismResult:
    measurements: list[Measurement]
    model: GraphicalModel
    fit: FitRecord
    rounds: list[Round]
    rho_used: float
    rho_charged: float
    # Theorem 4 bounds (relative to `model`) of workload marginals never measured
    unmeasured_bounds: dict[Attrs, Any] = field(default_factory=dict)


def round_cost(sigma: float, epsilon: float) -> float:
    """ρ of one round: Gaussian measurement (σ) plus, if ε > 0, one selection."""
    return rho_gaussian(sigma) + (rho_exponential(epsilon) if epsilon > 0 else 0.0)


class RhoLedger:
    """Exactly-rounded running sum of round costs, never allowed above the charge."""

    def __init__(self, charged: float) -> None:
        if not (charged > 0 and math.isfinite(charged)):
            raise ValueError("the charged ρ must be positive and finite")
        self.charged = float(charged)
        self._costs: list[float] = []

    @property
    def used(self) -> float:
        return math.fsum(self._costs)

    @property
    def remaining(self) -> float:
        return max(self.charged - self.used, 0.0)

    def fits(self, cost: float) -> bool:
        return math.fsum([*self._costs, cost]) <= self.charged

    def spend(self, cost: float) -> None:
        self._costs.append(float(cost))
        used = self.used
        # The invariant of the whole module: a mechanism never spends more than its charge.
        assert used <= self.charged * (1.0 + LEDGER_RTOL), (
            f"mechanism would spend {used!r} ρ but was charged {self.charged!r}"
        )


def split_round(rho_round: float, measure_share: float) -> tuple[float, float]:
    """(σ, ε) spending `rho_round`: share α on the Gaussian, 1 − α on the selection.

    Float rounding can make 1/(2σ²) + ε²/8 exceed `rho_round` by an ulp; σ is nudged up
    (and ε down) until it does not, so a run that ends on such a round spends at most
    its charge.
    """
    sigma = math.sqrt(1.0 / (2.0 * measure_share * rho_round))
    epsilon = math.sqrt(8.0 * (1.0 - measure_share) * rho_round)
    for _ in range(64):
        if round_cost(sigma, epsilon) <= rho_round:
            break
        sigma = math.nextafter(sigma, math.inf)
        epsilon = math.nextafter(epsilon, 0.0)
    return sigma, epsilon


def sigma_for_exact_rho(rho: float) -> float:
    """σ with 1/(2σ²) ≤ ρ, as close as floats allow."""
    sigma = math.sqrt(1.0 / (2.0 * rho))
    while rho_gaussian(sigma) > rho:
        sigma = math.nextafter(sigma, math.inf)
    return sigma


# --- workloads --------------------------------------------------------------------


def normalise_workload(
    domain: Domain, workload: Iterable[Sequence[str] | tuple[Sequence[str], float]]
) -> dict[Attrs, float]:
    """{marginal (domain order): weight}. Items are attribute lists or (attributes, weight)."""
    result: dict[Attrs, float] = {}
    for item in workload:
        if isinstance(item, str):
            raise TypeError("a workload item is a list of attributes, not a string")
        item = tuple(item)  # type: ignore[assignment]
        if len(item) == 2 and not isinstance(item[0], str) and isinstance(item[1], (int, float)):
            attrs, weight = tuple(item[0]), float(item[1])
        else:
            attrs, weight = tuple(item), 1.0  # type: ignore[arg-type]
        if not attrs:
            raise ValueError("a workload marginal names at least one attribute")
        if len(set(attrs)) != len(attrs):
            raise ValueError(f"duplicate attributes in workload marginal {attrs}")
        if not (weight > 0 and math.isfinite(weight)):
            raise ValueError("workload weights must be positive")
        key = domain.canonical(attrs)
        result[key] = result.get(key, 0.0) + weight
    if not result:
        raise ValueError("the workload is empty")
    return result


def downward_closure(domain: Domain, sets: Iterable[Attrs]) -> list[Attrs]:
    """Every non-empty subset of the sets, in domain order, smallest first."""
    found: set[Attrs] = set()
    for s in sets:
        s = domain.canonical(s)
        for k in range(1, len(s) + 1):
            found.update(combinations(s, k))
    position = {a: i for i, a in enumerate(domain.attributes)}
    return sorted(found, key=lambda c: (len(c), [position[a] for a in c]))


def candidate_weights(domain: Domain, workload: Mapping[Attrs, float]) -> dict[Attrs, float]:
    """AIM's candidates: the workload's downward closure, w_r = Σ_s c_s·|r ∩ s|."""
    return {
        r: math.fsum(c * len(set(r) & set(s)) for s, c in workload.items())
        for r in downward_closure(domain, workload)
    }


def covered_by(attrs: Attrs, measured: Iterable[Attrs]) -> bool:
    """Is `attrs` in the downward closure of the measured sets?"""
    wanted = set(attrs)
    return any(wanted <= set(m) for m in measured)


# --- shared loop pieces -------------------------------------------------------------


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


def size_filter(
    domain: Domain,
    measured: Sequence[Attrs],
    candidates: Iterable[Attrs],
    limit: float,
    hard_cap: int,
) -> list[Attrs]:
    """Candidates whose addition keeps the junction tree within `limit` cells.

    A candidate that does not grow the model (its hypothetical size is no more than the
    current one, e.g. a subset of a clique) is always allowed, as in AIM's code; nothing
    above `hard_cap` ever is.
    """
    current = model_cells(domain, measured)
    kept = []
    for r in candidates:
        cells = model_cells(domain, [*measured, r])
        if cells <= hard_cap and (cells <= limit or cells <= current):
            kept.append(r)
    return kept


def fit_model(
    domain: Domain,
    measurements: Sequence[Measurement],
    options: MechanismOptions,
    warm_start: GraphicalModel | None,
    final: bool = False,
) -> tuple[GraphicalModel, FitRecord]:
    kwargs: dict[str, Any] = {}
    solver = options.final_fit_solver if final else options.fit_solver
    if solver is not None:
        kwargs["solver"] = solver
    return fit(
        domain,
        measurements,
        warm_start=warm_start,
        max_iterations=options.final_fit_iterations if final else options.fit_iterations,
        tolerance=options.fit_tolerance,
        max_model_cells=options.max_model_cells,
        **kwargs,
    )


def model_estimate(model: GraphicalModel | None, domain: Domain, attrs: Attrs) -> np.ndarray:
    """M_r(p̂) flattened; an all-zero estimate before any model exists."""
    if model is None:
        return np.zeros(domain.cells(attrs))
    return np.asarray(model.marginal(attrs), dtype=float).ravel()


def check_replayed(rounds: Sequence[Round]) -> None:
    """Stored rounds must be consecutive and their recorded ρ must match σ and ε."""
    for position, r in enumerate(rounds):
        if r.index != position:
            raise RoundsMismatch(f"stored round {position} has index {r.index}")
        if not math.isclose(r.rho, r.cost, rel_tol=1e-12, abs_tol=0.0):
            raise RoundsMismatch(f"stored round {position} records ρ {r.rho} but costs {r.cost}")
        if r.values.size == 0:
            raise RoundsMismatch(f"stored round {position} has no values")


def notify(on_progress: Callable[[Progress], None] | None, progress: Progress) -> None:
    if on_progress is not None:
        on_progress(progress)


def check_workload(domain: Domain, workload: Mapping[Attrs, float], max_model_cells: int) -> None:
    """Refuse (ValueError) a workload none of whose marginals fits the model cap.

    Meant for the request validation, before anything is charged.
    """
    if not any(model_cells(domain, [r]) <= max_model_cells for r in workload):
        raise ValueError("no workload marginal fits within max_model_cells")


# --- the select/measure engine both mechanisms drive ----------------------------------


class MechanismRun:
    """State of one run: ledger, rounds (replayed and new), current model, Theorem 4 data.

    AIM and MWEM drive it with their own schedules; it owns the protocol: ρ is spent in
    the ledger before noise is drawn, the round is handed to `on_round` (the service
    commits it) before the model uses it, and progress is reported after each step.
    """

    def __init__(
        self,
        name: str,
        domain: Domain,
        true_marginal: TrueMarginal,
        rho: float,
        options: MechanismOptions,
        workload: Mapping[Attrs, float],
        completed_rounds: Sequence[Round | Mapping[str, Any]],
        on_round: Callable[[Round], None] | None,
        on_progress: Callable[[Progress], None] | None,
        base_measurements: Sequence[Measurement],
        warm_start: GraphicalModel | None,
    ) -> None:
        self.name = name
        self.domain = domain
        self.truth = TrueMarginals(domain, true_marginal)
        self.ledger = RhoLedger(rho)
        self.options = options
        self.workload = dict(workload)
        self.stored = [r if isinstance(r, Round) else Round.from_dict(r) for r in completed_rounds]
        check_replayed(self.stored)
        for r in self.stored:
            if r.values.size != domain.cells(r.attributes):
                raise RoundsMismatch(f"stored round {r.index} has the wrong number of values")
        self.on_round = on_round
        self.on_progress = on_progress
        self.base_measurements = list(base_measurements)
        self.model = warm_start
        self.fit_record: FitRecord | None = None
        self.rounds: list[Round] = []
        # workload marginal -> (round index, M_r(p̂_{t−1})) of the last round it was a
        # candidate in this process (the vectors are not persisted; see `finish`)
        self.estimates_at_selection: dict[Attrs, tuple[int, np.ndarray]] = {}

    # --- replay -----------------------------------------------------------------
    def replay(self, check: Callable[[int, Round], None]) -> None:
        """Take the stored rounds back: their ρ is spent again in the ledger, no noise drawn."""
        for r in self.stored:
            check(r.index, r)
            self.ledger.spend(r.rho)
            self.rounds.append(r)

    # --- state ------------------------------------------------------------------
    @property
    def measured(self) -> list[Attrs]:
        sets = [self.domain.canonical(m.attributes) for m in self.base_measurements]
        return sets + [self.domain.canonical(r.attributes) for r in self.rounds]

    def measurements(self) -> list[Measurement]:
        return self.base_measurements + [r.measurement() for r in self.rounds]

    def estimate(self, attrs: Attrs) -> np.ndarray:
        return model_estimate(self.model, self.domain, attrs)

    def _progress(self, stage: Literal["measured", "fitted", "done"], attrs: Attrs) -> None:
        notify(
            self.on_progress,
            Progress(
                mechanism=self.name,
                round_index=len(self.rounds) - 1,
                stage=stage,
                attributes=attrs,
                rho_used=self.ledger.used,
                rho_total=self.ledger.charged,
                rounds_done=len(self.rounds),
            ),
        )

    # --- steps ------------------------------------------------------------------
    def select(
        self,
        candidates: Sequence[Attrs],
        weights: Mapping[Attrs, float],
        sigma: float,
        epsilon: float,
        bias: float,
    ) -> tuple[Attrs, np.ndarray, dict[str, Any]]:
        """Exponential mechanism over the candidates, quality w_r(‖M_r(D) − M_r(p̂)‖₁ − b·σ·n_r)."""
        from app.privacy import selection

        if not candidates:
            raise ValueError("no candidate marginal fits within the model size limit")
        index = len(self.rounds)
        estimates = [self.estimate(r) for r in candidates]
        scores = np.empty(len(candidates))
        for k, (r, est) in enumerate(zip(candidates, estimates, strict=True)):
            error = float(np.abs(self.truth(r) - est).sum())
            scores[k] = weights[r] * (error - bias * sigma * self.domain.cells(r))
        sensitivity = max(weights[r] for r in candidates)
        chosen = selection.exponential_mechanism(scores, epsilon, sensitivity)
        for r, est in zip(candidates, estimates, strict=True):
            if r in self.workload:
                self.estimates_at_selection[r] = (index, est)
        info = {
            "candidates": len(candidates),
            "sensitivity": float(sensitivity),
            "chosen_weight": float(weights[candidates[chosen]]),
            "bias": float(bias),
            "workload_candidates": tuple(r for r in candidates if r in self.workload),
        }
        return candidates[chosen], estimates[chosen], info

    def measure(
        self,
        kind: RoundKind,
        attrs: Attrs,
        sigma: float,
        epsilon: float,
        *,
        annealed: bool = False,
        final: bool = False,
        estimate_before: np.ndarray | None = None,
        selection_info: Mapping[str, Any] | None = None,
    ) -> Round:
        """Spend, draw the noise (OpenDP), hand the round to `on_round`, keep it."""
        from app.privacy import noise

        cost = round_cost(sigma, epsilon)
        self.ledger.spend(cost)
        noisy = noise.discrete_gaussian(self.truth(attrs), sigma)
        selection_record = None
        if selection_info is not None:
            assert estimate_before is not None
            selection_record = Selection(
                error_before=float(np.abs(noisy - estimate_before).sum()), **selection_info
            )
        record = Round(
            index=len(self.rounds),
            kind=kind,
            attributes=attrs,
            sigma=sigma,
            epsilon=epsilon,
            rho=cost,
            values=noisy,
            annealed=annealed,
            final=final,
            estimate_before=estimate_before,
            selection=selection_record,
        )
        if self.on_round is not None:
            self.on_round(record)  # the service commits it here, before anything uses it
        self.rounds.append(record)
        self._progress("measured", attrs)
        return record

    def refit(self, final: bool = False) -> None:
        self.model, self.fit_record = fit_model(
            self.domain, self.measurements(), self.options, self.model, final
        )
        self._progress("fitted", self.rounds[-1].attributes if self.rounds else ())

    # --- end --------------------------------------------------------------------
    def finish(self, weights: Mapping[Attrs, float] | None = None) -> MechanismResult:
        """Final fit, final checks, and Theorem 4 bounds (relative to the final model).

        `weights` are the quality weights w_r the selections used (AIM's candidate
        weights; 1 for MWEM, the default).
        """
        from app.privacy.mechanisms.bounds import UnmeasuredBound, theorem4_round_bound

        self.refit(final=True)
        assert self.model is not None and self.fit_record is not None
        used = self.ledger.used
        assert used <= self.ledger.charged * (1.0 + LEDGER_RTOL), "spent more than charged"
        measured = self.measured
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
            base = theorem4_round_bound(self.domain, last, r, weight, self.options.confidence)
            drift = float(np.abs(stored[1] - self.estimate(r)).sum())
            bounds[r] = UnmeasuredBound(r, base + drift, last.index, self.options.confidence)
        self._progress("done", self.rounds[-1].attributes if self.rounds else ())
        return MechanismResult(
            measurements=[r.measurement() for r in self.rounds],
            model=self.model,
            fit=self.fit_record,
            rounds=list(self.rounds),
            rho_used=used,
            rho_charged=self.ledger.charged,
            unmeasured_bounds=bounds,
        )
